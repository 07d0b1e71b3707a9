package httplimit

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/observe"
)

// TestEveryAlgorithmHasAShape: every algorithm core has has a row in
// shapes, and the row says what core does: a bucket's capacity is its
// Burst, a queue delays the request behind another, a permit is what
// Renew keeps. An algorithm added to core without a row, or with a wrong
// one, fails here rather than falling into a default branch of the
// fields' arithmetic (advertise, remaining, untilWhole), of MaxWait or of
// the InFlight layer.
// Guards: IETF's promise "whatever its algorithm" for algorithms yet to
// come, with the pacing tests, which walk every core.Algorithm too.
func TestEveryAlgorithmHasAShape(t *testing.T) {
	if got, want := len(shapes), observe.Algorithms; got != want {
		t.Errorf("shapes has %d rows, core has %d algorithms", got, want)
	}
	ctx := context.Background()
	for a := range core.Algorithm(observe.Algorithms) {
		t.Run(a.String(), func(t *testing.T) {
			s := shapeOf(a)
			if s.periods < 1 {
				t.Fatalf("no row in shapes (periods %d)", s.periods)
			}
			lim := core.Limit{Algorithm: a, Rate: 2, Period: time.Minute, Burst: 3}
			if got := lim.Capacity() == 3; got != s.refills {
				t.Errorf("refills %v, but Capacity %d of Rate 2, Burst 3", s.refills, lim.Capacity())
			}
			_, _, l := mini(t)
			first, err := l.Allow(ctx, 1, lim.For("k"))
			if err != nil || !first.Allowed {
				t.Fatalf("first request: %+v, %v", first, err)
			}
			second, err := l.Allow(ctx, 1, lim.For("k"))
			if err != nil || !second.Allowed {
				t.Fatalf("second request: %+v, %v", second, err)
			}
			if got := second.Delay > 0; got != s.queues {
				t.Errorf("queues %v, but the second request's Delay is %v", s.queues, second.Delay)
			}
			_, err = l.Renew(ctx, first)
			if got := err == nil; got != s.permits {
				t.Errorf("permits %v, but Renew of a request's Result: %v", s.permits, err)
			}
		})
	}
}
