package givebackattack2

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestExactClaimWithATakeGivenBackBetween: the count of units taken since
// a take keeps the units of a later take that was given back (unless that
// take was the last: a count that forgot them otherwise could over-give),
// while the level no longer holds them. So a give-back is exact only while
// the level now plus its units and every unit taken since, given back or
// not, fits the capacity (docs/limits.md, "Giving units back"); past it,
// it loses at most min(n, the refill since the take), never gains.
//
//	capacity 20, 10/s; user and twin kept 5: both at 15
//	t=0     A: user takes 3                      user 12
//	t=10ms  B: user takes 10                     user 2.1
//	t=20ms  C: both keep 1                       user 1.2, twin 14.2
//	t=30ms  refund B (not the last take: C is)   user 11.3
//	t=300ms refund A                             twin 17.0
//
// At 300 ms the level 14 plus A, B and C (14 units) passes the capacity:
// A's give-back is the strict one, 3 below the twin (= min(3, 3 refilled)).
// The leaky bucket the same, with queues. It is what a CountIf policy pays
// when another request of the key is refunded between a request's take and
// its own refund.
func TestExactClaimWithATakeGivenBackBetween(t *testing.T) {
	ctx := context.Background()
	for _, alg := range buckets {
		for _, refundA := range []time.Duration{40 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond} {
			name := fmt.Sprintf("%s/refund-A-at=%v", alg, refundA)
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				l := e.limiter(e.client(0), "gb2")
				lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 20}
				user, twin := lim.For("user"), lim.For("twin")
				e.allow(l, 5, user, twin)
				a := e.allow(l, 3, user)
				e.at(10 * time.Millisecond)
				b := e.allow(l, 10, user)
				e.at(20 * time.Millisecond)
				e.allow(l, 1, user, twin)
				e.at(30 * time.Millisecond)
				if err := l.Refund(ctx, b); err != nil {
					t.Fatal(err)
				}
				e.logf("refund B")
				if units, lvl, _, _ := above(t, l, lim, "user", "twin"); units != -3 || lvl != -30*time.Millisecond {
					t.Logf("after B's refund: user %d units, %v from twin (A outstanding: -3, -300ms expected)", units, lvl)
				}
				e.at(refundA)
				if err := l.Refund(ctx, a); err != nil {
					t.Fatal(err)
				}
				e.logf("refund A")
				units, lvl, u, w := above(t, l, lim, "user", "twin")
				if units > 0 || lvl > 0 {
					t.Fatalf("above the twin\n%s", e.history())
				}
				// The documented bound, at most min(n, the refill since the
				// take): at 10/s, min(300 ms, refundA) of ResetAfter.
				if bound := min(300*time.Millisecond, refundA); -lvl > bound {
					t.Errorf("%s: %v below the twin, more than min(n, the refill since the take) = %v\n%s", name, -lvl, bound, e.history())
				}
				t.Logf("%s: user Remaining %d ResetAfter %v, twin %d %v: %.2f units below (B, given back but not the last take, still counts as taken since A)",
					name, u.Remaining, u.ResetAfter, w.Remaining, w.ResetAfter, float64(-lvl)/float64(100*time.Millisecond))
			})
		}
	}
}
