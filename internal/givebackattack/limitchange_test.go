package givebackattack

import (
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// A receipt gives back under the Limit it was taken under
// (docs/limits.md#receipts), and Limits change at run time (Overrides,
// a deploy): these two tests give back a take after its key's Limit
// changed, and compare with a twin that saw the same Limits and takes but
// not the one given back. Both fail on e40815a, by whole units.

// TestRefundAfterCapacityLoweredNeverAbove: a token bucket's capacity is
// lowered while a take is outstanding. The lower capacity caps the key,
// which absorbs the take (without it, the key would have been capped to
// the same level); the refund then adds the whole take on top.
//
//	t=0 take A of 2 under 10/s (burst 10): user 8, twin 10
//	t=0 kept take of 1 under 10/s burst 3: both capped to 3, then 2
//	t=0 refund A: user 2 + 2 = 4 (capped at 3 when read), twin 2
//
// user ends at Remaining 3, twin at 2: one unit above; with a take of 3
// and the cap at 3, the whole take comes back (TestRefundAfterLimitChange
// finds 2 above).
func TestRefundAfterCapacityLoweredNeverAbove(t *testing.T) {
	from := core.Limit{Rate: 10, Period: time.Second}
	to := core.Limit{Rate: 10, Period: time.Second, Burst: 3}
	for _, gap := range []time.Duration{0, time.Microsecond, 50 * time.Millisecond} {
		e := newEnv(t)
		p := newTwin(e)
		a := p.solo(from, 2, "A")
		e.adv(gap)
		p.kept(to, 1)
		p.refund(a, "A")
		p.check(to, fmt.Sprintf("burst 10 to 3, refund %v after the take", gap))
	}
}

// TestRefundAfterRateRaisedNeverAbove: a bucket's rate is raised while a
// take is outstanding. Others' takes under the new Limit write the key, so
// the give-back takes the strict rule: the take's units less the refill
// since it. It counts that refill at the receipt's rate, 1 per second,
// while the key refilled (drained) at the new rate, 10 per second: the
// take had refilled away long before, yet most of it comes back.
//
//	t=0  take A of 3 under 10/10s (1/s): user 7, twin 10
//	t=1s kept take of 3 under 10/s: user refilled to 10 (at 10/s), both 7
//	t=1s refund A: 3 - 1 s x 1/s = 2 given back: user 9, twin 7
//
// For the leaky bucket the same with queues: A's 3 drained in 0.3 s at
// the new rate; the refund takes 2 off the others' queue.
func TestRefundAfterRateRaisedNeverAbove(t *testing.T) {
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		from := core.Limit{Algorithm: alg, Rate: 10, Period: 10 * time.Second}
		to := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
		e := newEnv(t)
		p := newTwin(e)
		a := p.solo(from, 3, "A")
		e.adv(time.Second)
		p.kept(to, 3)
		p.refund(a, "A")
		p.check(to, fmt.Sprintf("%s 10/10s to 10/s", alg))
	}
}
