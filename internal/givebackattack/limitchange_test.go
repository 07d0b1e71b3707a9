package givebackattack

import (
	"context"
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
//
// With 6 kept before A, the key (2 after A) is below the new capacity when
// it changes, so no read caps it: only its twin (4) is capped, to 3. A
// give-back that bounds its loss by the units taken since (1) against the
// receipt's capacity (10) gives A back whole: user 3, twin 2.
func TestRefundAfterCapacityLoweredNeverAbove(t *testing.T) {
	from := core.Limit{Rate: 10, Period: time.Second}
	to := core.Limit{Rate: 10, Period: time.Second, Burst: 3}
	for _, pre := range []int{0, 6} {
		for _, gap := range []time.Duration{0, time.Microsecond, 50 * time.Millisecond} {
			e := newEnv(t)
			p := newTwin(e)
			if pre > 0 {
				p.kept(from, pre)
			}
			a := p.solo(from, 2, "A")
			e.adv(gap)
			p.kept(to, 1)
			e.adv(time.Microsecond) // (not the take's µs: the give-back is not the exact one)
			p.refund(a, "A")
			p.check(to, fmt.Sprintf("burst 10 to 3, %d kept before, %v from A to the change", pre, gap))
		}
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
//
// The second case raises the rate threefold with the same scale (10/s and
// 3/100ms both count a unit as 100000 scaled units), so the state's scale
// does not change: a give-back that trusted a Limit change only when the
// scale changed would still give back 2 of 3 here (user 9, twin 7).
func TestRefundAfterRateRaisedNeverAbove(t *testing.T) {
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		for _, c := range []struct {
			from, to core.Limit
			after    time.Duration
		}{
			{core.Limit{Rate: 10, Period: 10 * time.Second}, core.Limit{Rate: 10, Period: time.Second}, time.Second},
			{core.Limit{Rate: 10, Period: time.Second}, core.Limit{Rate: 3, Period: 100 * time.Millisecond, Burst: 10}, 100 * time.Millisecond},
		} {
			c.from.Algorithm, c.to.Algorithm = alg, alg
			e := newEnv(t)
			p := newTwin(e)
			a := p.solo(c.from, 3, "A")
			e.adv(c.after)
			p.kept(c.to, 3)
			p.refund(a, "A")
			p.check(c.to, fmt.Sprintf("%s %v to %v", alg, c.from, c.to))
		}
	}
}

// TestPositionWrapNeverAbove: a bucket's count of units taken runs modulo
// 2^52 (POS in core/scripts/prelude.lua) and starts again only when the
// bucket is found full. At the largest Limit (2^40 per ms, burst 2^40),
// takes of what refilled, one every 999µs, never let it stand full, and
// take 2^52 units in 4.1 s: the count is back where A's take left it, the
// units taken since A read as none, and A's whole burst comes back on top
// of a bucket the takes since emptied, although without A the bucket
// would have been full a millisecond after it (user 2^40, twin 0.1% of
// that, on 2d57f4f). A Limit this large is absurd; at 2^30 units a second
// (a GiB/s of bytes) the same needs 48 days with the receipt held. On
// e40815a (no count) the strict rule gives back nothing here.
func TestPositionWrapNeverAbove(t *testing.T) {
	if testing.Short() {
		t.Skip("4100 script calls")
	}
	ctx := context.Background()
	const full = 1 << 40
	const step = 999 * time.Microsecond
	m := int(int64(full) * 999 / 1000) // what refills in a step, rounded down
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		e := newEnv(t)
		p := newTwin(e)
		lim := core.Limit{Algorithm: alg, Rate: full, Period: time.Millisecond}
		if err := lim.Validate(); err != nil {
			t.Fatal(err)
		}
		a := p.solo(lim, full, "A")
		// The odd remainder first, as soon as it has refilled (so that the
		// bucket is never found full, which restarts its count), then
		// takes of a whole step's refill, the last of which leaves the
		// twin nearly empty.
		r := int((int64(1) << 52) % int64(m))
		e.adv(time.Duration((int64(r)*1000+full-1)/full) * time.Microsecond)
		if res, err := e.l.Allow(ctx, r, lim.For(p.user), lim.For(p.tw)); err != nil || !res.Allowed {
			t.Fatalf("%s: kept take of %d: %v %v", alg, r, res, err)
		}
		left := int64(1)<<52 - int64(r)
		takes := 1
		for left > 0 {
			e.adv(step)
			res, err := e.l.Allow(ctx, m, lim.For(p.user), lim.For(p.tw))
			if err != nil || !res.Allowed {
				t.Fatalf("%s: kept take %d of %d: %v %v", alg, takes, m, res, err)
			}
			left -= int64(m)
			takes++
		}
		if left != 0 {
			t.Fatalf("%d units short of 2^52", -left)
		}
		e.logf("%d kept takes, 2^52 units in all, one every %v", takes, step)
		p.refund(a, "A")
		p.check(lim, fmt.Sprintf("%s: A's full take, 2^52 units taken since", alg))
	}
}
