package core

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestLimitChangeToAnotherAlgorithmStartsWhole documents what Limiter's doc
// says: "Each algorithm keeps its own state, so moving a key to another
// algorithm starts it with a whole quota under the new one." For every
// pair of rate algorithms, a key that spent its whole quota under one gets
// the whole quota of the other at once (a change of Limit that keeps the
// Algorithm hands out nothing: TestLimitChange), and finds the first one
// still spent when it moves back.
//
// Note that this is a way to free requests: the README's "Changing the
// Limit passed for a key takes effect on the next call, without a reset
// and without free requests", Limit's "without handing out free units"
// and httplimit's LimitFunc "A key keeps one state whatever Limit it is
// decided under" hold only while the Algorithm stays the same.
func TestLimitChangeToAnotherAlgorithmStartsWhole(t *testing.T) {
	ctx := context.Background()
	algos := []Algorithm{TokenBucket, SlidingWindow, SlidingWindowCounter, FixedWindow, LeakyBucket}
	for _, from := range algos {
		for _, to := range algos {
			if from == to {
				continue
			}
			t.Run(from.String()+"→"+to.String(), func(t *testing.T) {
				mr, _, l := miniLimiter(t)
				redistest.SetTime(mr, redistest.Epoch)
				first := Limit{Algorithm: from, Rate: 5, Period: time.Hour}
				then := Limit{Algorithm: to, Rate: 5, Period: time.Hour}
				if r, err := l.Allow(ctx, 5, first.For("k")); err != nil || !r.Allowed {
					t.Fatalf("AllowN(5) under %v = %+v, %v; want admitted", first, r, err)
				}
				if r, err := l.Allow(ctx, 1, first.For("k")); err != nil || r.Allowed {
					t.Fatalf("a sixth under %v = %+v, %v; want denied", first, r, err)
				}
				// The other algorithm's state is its own, and whole.
				if r, err := l.Allow(ctx, 5, then.For("k")); err != nil || !r.Allowed {
					t.Errorf("after moving to %v: AllowN(5) = %+v, %v; want admitted (another state, whole)", then.Algorithm, r, err)
				}
				// Moving back finds the first state as it was left.
				if r, err := l.Allow(ctx, 1, first.For("k")); err != nil || r.Allowed {
					t.Errorf("back under %v: %+v, %v; want still denied", first.Algorithm, r, err)
				}
			})
		}
	}
}

// TestLeakyRemainingWithinMaxDelay backs Result's "Remaining is how many
// units could still be taken right now, after this request" for a
// LeakyBucket whose MaxDelay is shorter than its queue takes to drain: a
// Remaining above 0 must mean that the next request now is admitted.
//
// 11 per minute with Burst 8 and a MaxDelay of 2s: the first request
// leaves at once, and the second would wait 5.45s, so it is refused.
// Without the bound in scripts/leaky_bucket.lua (Remaining is the room in
// the queue and no more than the requests whose delay stays within
// max_delay) the first reported Remaining 7.
func TestLeakyRemainingWithinMaxDelay(t *testing.T) {
	ctx := context.Background()
	_, _, l := miniLimiter(t)
	limit := Limit{Algorithm: LeakyBucket, Rate: 11, Period: time.Minute, Burst: 8, MaxDelay: 2 * time.Second}
	for i := range 10 {
		r, err := l.Allow(ctx, 1, limit.For("k"))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			break
		}
		next, err := l.Allow(ctx, 1, limit.For("k"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining > 0 && !next.Allowed {
			t.Fatalf("request %d: admitted with Remaining %d (Delay %v), and the next one at the same instant refused (%+v): "+
				"Remaining counts queue room its MaxDelay of %v does not let in", i, r.Remaining, r.Delay, next, limit.MaxDelay)
		}
		if !next.Allowed {
			break
		}
	}
}

// TestLimitChangeCarriesOver backs core/limit.go's (Limit) and docs/limits.md's
// sentence on a changed Limit: 3 units spent under 10 per minute leave,
// at the same instant, 2 under 5 per minute and 17 under 20 per minute in
// the windows and the leaky bucket (what was spent carries over), and 5
// and 7 in the token bucket (the 7 tokens it holds, capped). Before, the
// docs said every algorithm carried what was spent over.
func TestLimitChangeCarriesOver(t *testing.T) {
	ctx := context.Background()
	for _, a := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		_, _, l := miniLimiter(t) // the clock stands still
		if r, err := l.Allow(ctx, 3, with(PerMinute(10), a).For("k")); err != nil || !r.Allowed {
			t.Fatalf("%s: %+v, %v", a, r, err)
		}
		lower, higher := 2, 17
		if a == TokenBucket {
			lower, higher = 5, 7
		}
		for _, c := range []struct{ rate, want int }{{5, lower}, {20, higher}} {
			r, err := l.Peek(ctx, with(PerMinute(c.rate), a).For("k"))
			if err != nil || r.Remaining != c.want {
				t.Errorf("%s: 3 spent of 10/min, then %d/min: Remaining %d (%v), want %d", a, c.rate, r.Remaining, err, c.want)
			}
		}
	}
}

// TestPeriodLengthenedBound backs docs/limits.md's "the new, longer
// window that holds it may admit what the old Limit admitted before the
// change plus the new Rate" (issue 35 item 6: 5/200ms changed to 5/2s
// admitted 10 in one aligned 2 s window, where the docs promised no free
// requests). The old Limit admits 5 in each of three 200 ms windows, the
// Limit becomes 5/2s mid-window: the aligned 2 s window admits at most
// 15 + 5, and the next one 5.
func TestPeriodLengthenedBound(t *testing.T) {
	ctx := context.Background()
	mr, _, l := miniLimiter(t)
	short := Limit{Algorithm: FixedWindow, Rate: 5, Period: 200 * time.Millisecond}
	long := Limit{Algorithm: FixedWindow, Rate: 5, Period: 2 * time.Second}
	start := redistest.Epoch.Truncate(2 * time.Second).Add(2 * time.Second)
	admit := func(at time.Duration, lim Limit) int {
		redistest.SetTime(mr, start.Add(at))
		n := 0
		for range 20 {
			r, err := l.Allow(ctx, 1, lim.For("k"))
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed {
				break
			}
			n++
		}
		return n
	}
	old := 0
	for _, at := range []time.Duration{50, 250, 450} {
		old += admit(at*time.Millisecond, short)
	}
	if old != 15 {
		t.Fatalf("the old Limit admitted %d in three windows, want 15", old)
	}
	after := 0
	for _, at := range []time.Duration{500, 650, 1100, 1999} {
		after += admit(at*time.Millisecond, long)
	}
	if after > long.Rate {
		t.Errorf("after the change, the 2 s window admitted %d on top of the old Limit's %d, want at most %d", after, old, long.Rate)
	}
	next := 0
	for _, at := range []time.Duration{2000, 2500, 3999} {
		next += admit(at*time.Millisecond, long)
	}
	if next != long.Rate {
		t.Errorf("the next 2 s window admitted %d, want %d", next, long.Rate)
	}
	t.Logf("aligned 2 s window: %d under 5/200ms + %d under 5/2s", old, after)
}
