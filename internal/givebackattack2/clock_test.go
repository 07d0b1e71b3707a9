package givebackattack2

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestRefundAfterExpiryAndClockStepBack: a take A, its key expires (the
// bucket refilled: without A it would be whole too), Redis' clock steps
// back (an NTP step; ntpd steps offsets above 128 ms) to before A's
// take, others take from the fresh key, and A is refunded. The fresh
// state's epoch is Redis' clock, now before A's stamp, so the give-back
// does not see that the bucket was whole since A, and A's units come back
// on top of the others' takes. docs/limits.md#giving-units-back names
// only "a Reset followed by a take at the very µs of an earlier take" on
// a clock that stands still or stepped back; here nothing was Reset, and
// any µs of the step will do.
//
//	t=0       A: take 3 under 10/s               user 7
//	t=1s      (refilled at 0.3 s; the key expired)
//	t=-200ms  (the clock stepped back 1.2 s) kept take of 3: user 7, twin 7
//	t=-200ms  refund A: user 10, twin 7: 3 units above
//
// The "reset" cases do the same with a Reset in place of the expiry and a
// step back of 1 ms: a Reset's fresh state at an earlier µs than A's.
// give_back now refuses a take later than the state's now; a step back to
// the take's very µs stays the documented limit, and is logged.
func TestRefundAfterExpiryAndClockStepBack(t *testing.T) {
	ctx := context.Background()
	for _, alg := range buckets {
		for _, c := range []struct {
			how       string
			forward   time.Duration // after A: the key expires here (if past its refill)
			back      time.Duration // the clock then steps back to this (since t0)
			refundGap time.Duration
		}{
			{"expiry", time.Second, -200 * time.Millisecond, 0},
			{"expiry", time.Second, -200 * time.Millisecond, 50 * time.Millisecond},
			{"expiry", 400 * time.Millisecond, -time.Microsecond, 0},
			{"expiry", 400 * time.Millisecond, 0, 0},           // the clock back to A's very µs
			{"expiry", time.Second, 500 * time.Millisecond, 0}, // a step back, still after A: safe
			{"reset", 0, -time.Millisecond, 0},
			{"reset", 100 * time.Millisecond, 50 * time.Millisecond, 0},
		} {
			name := fmt.Sprintf("%s/%s/forward=%v/back-to=%v/gap=%v", alg, c.how, c.forward, c.back, c.refundGap)
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				l := e.limiter(e.client(0), "gb2")
				lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
				e.at(time.Second) // room to step back
				e.t0 = e.t0.Add(time.Second)
				e.now = 0
				a := e.allow(l, 3, lim.For("user"))
				e.at(c.forward)
				if c.how == "reset" {
					if err := l.Reset(ctx, "user"); err != nil {
						t.Fatal(err)
					}
					e.logf("reset user")
				}
				e.logf("keys before the step: %v", e.mr.Keys())
				e.at(c.back)
				e.logf("clock stepped back to %v", c.back)
				e.allow(l, 3, lim.For("user"), lim.For("twin"))
				e.adv(c.refundGap)
				if err := l.Refund(ctx, a); err != nil {
					t.Fatal(err)
				}
				e.logf("refund A")
				if c.back == 0 {
					// A step back to the take's very µs: the fresh state's
					// epoch is that µs, which no bounded state tells from
					// the take's own (docs/limits.md, "Giving units back").
					units, _, _, _ := above(t, l, lim, "user", "twin")
					t.Logf("%s: %d units above the twin (a step back to the take's very µs: documented)", name, units)
					return
				}
				units := e.check(l, lim, "user", "twin", name)
				t.Logf("%s: %d units above the twin", name, units)
			})
		}
	}
}
