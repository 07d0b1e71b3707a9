package givebackattack2

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestGiveBackSweepNeverAbove: random histories on a moving miniredis
// clock (never back) of takes to give back (user alone; alone and in
// concurrent batches through a WithBatching Limiter), kept takes (user and
// twin in one call), Refunds and Settles below the take of random held
// receipts (also through the batching Limiter, and with Result.At
// edited), Limit changes back and forth (A->B->A: capacity, rate), keys
// expiring (the clock past the refill), Resets of both keys, and receipts
// of Peeks and denials refunded and settled at 0. After every step user
// must stand at or below twin, read under the current Limit. GIVEBACK2_SEEDS
// sets the seeds (default 40 per algorithm).
func TestGiveBackSweepNeverAbove(t *testing.T) {
	seeds := 40
	if n, err := strconv.Atoi(os.Getenv("GIVEBACK2_SEEDS")); err == nil && n > 0 {
		seeds = n
	}
	for _, alg := range buckets {
		var worst int
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed%d", alg, seed), func(t *testing.T) {
				worst = max(worst, sweepOnce(t, alg, uint64(seed)))
			})
		}
	}
}

type held struct {
	r    core.Result
	lim  core.Limit
	id   int
	used int // -1: Refund; else Settle at used, which the twin took at the take's instant
}

func sweepOnce(t *testing.T, alg core.Algorithm, seed uint64) int {
	ctx := context.Background()
	e := newEnv(t)
	l := e.limiter(e.client(0), "gb2")
	lb := e.limiter(e.client(0), "gb2", core.WithBatching(4))
	rnd := rand.New(rand.NewPCG(seed, 2))
	limits := []core.Limit{
		{Algorithm: alg, Rate: 10, Period: time.Second},
		{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 4},
		{Algorithm: alg, Rate: 20, Period: time.Second},
		{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 6},
	}
	cur := limits[0]
	var hs []held
	ids := 0
	pick := func() (held, bool) {
		if len(hs) == 0 {
			return held{}, false
		}
		i := rnd.IntN(len(hs))
		if rnd.IntN(2) == 0 {
			i = len(hs) - 1
		}
		h := hs[i]
		hs = append(hs[:i], hs[i+1:]...)
		return h, true
	}
	// under is the Limit both keys were last written under: a take under
	// another converts the taker's state alone (a lower capacity caps it),
	// so both keys are first charged 1 under cur, which keeps twin a twin.
	under := cur
	both := func(lim core.Limit) {
		pk, err := l.Peek(ctx, lim.For("user"), lim.For("twin"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Settle(ctx, pk, 1); err != nil {
			t.Fatal(err)
		}
		under = lim
		e.logf("both charged 1 under %v", lim)
	}
	steps := []time.Duration{time.Microsecond, 9 * time.Microsecond, 4 * time.Millisecond, 60 * time.Millisecond, 250 * time.Millisecond, 900 * time.Millisecond}
	for range 50 {
		p := rnd.IntN(100)
		switch {
		case p < 22: // a take to give back
			if under != cur {
				both(cur)
			}
			n := 1 + rnd.IntN(min(3, cur.Capacity()))
			r, err := l.Allow(ctx, n, cur.For("user"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				used := -1
				if rnd.IntN(3) == 0 {
					// To be settled at used: the twin takes used now, at the
					// take's instant (a charge, which the twin, never below
					// user, has room for).
					used = rnd.IntN(n)
					if used > 0 {
						pk, err := l.Peek(ctx, cur.For("twin"))
						if err != nil {
							t.Fatal(err)
						}
						if _, err := l.Settle(ctx, pk, used); err != nil {
							t.Fatal(err)
						}
					}
				}
				hs = append(hs, held{r, cur, ids, used})
				e.logf("take #%d: %d under %v (Remaining %d), to settle at %d", ids, n, cur, r.Remaining, used)
				ids++
			} else {
				e.logf("take %d under %v: denied; refund and settle 0 of the denial", n, cur)
				if err := l.Refund(ctx, r); err != nil {
					t.Fatal(err)
				}
				if _, err := l.Settle(ctx, r, 0); err != nil {
					t.Fatal(err)
				}
			}
		case p < 32: // kept
			if under != cur {
				both(cur)
			}
			n := 1 + rnd.IntN(min(3, cur.Capacity()))
			r, err := l.Allow(ctx, n, cur.For("user"), cur.For("twin"))
			if err != nil {
				t.Fatal(err)
			}
			e.logf("kept %d under %v: %v", n, cur, r.Allowed)
		case p < 50: // give back
			h, ok := pick()
			if !ok {
				continue
			}
			via := []*core.Limiter{l, lb}[rnd.IntN(2)]
			r := h.r
			if h.lim != under {
				// Both keys charged 1 under the receipt's Limit first, at
				// this instant: a state not written since the Limit
				// changed is still under the old one, and the give-back's
				// call runs the time since its last write at the old
				// rate, which a twin read under the new Limit would not
				// (TestRefundAfterLimitChange in internal/givebackattack
				// does the same with a kept take).
				both(h.lim)
			}
			if rnd.IntN(4) == 0 {
				r.At = r.At.Add(-time.Hour) // edited: a receipt names its take by its own stamp
			}
			if h.used >= 0 {
				if _, err := via.Settle(ctx, r, h.used); err != nil {
					t.Fatal(err)
				}
				e.logf("settle #%d (%d under %v) used %d", h.id, r.Granted, h.lim, h.used)
			} else {
				if err := via.Refund(ctx, r); err != nil {
					t.Fatal(err)
				}
				e.logf("refund #%d (%d under %v)", h.id, r.Granted, h.lim)
			}
		case p < 56: // concurrent takes through the batching Limiter
			if under != cur {
				both(cur)
			}
			k := 2 + rnd.IntN(5)
			out := make([]core.Result, k)
			var wg sync.WaitGroup
			for i := range k {
				wg.Go(func() {
					r, err := lb.Allow(ctx, 1, cur.For("user"))
					if err != nil {
						t.Error(err)
					}
					out[i] = r
				})
			}
			wg.Wait()
			for _, r := range out {
				if r.Allowed {
					hs = append(hs, held{r, cur, ids, -1})
					ids++
				}
			}
			e.logf("%d concurrent takes of 1 under %v: up to #%d", k, cur, ids-1)
		case p < 64: // the Limit changes (and back, later)
			cur = limits[rnd.IntN(len(limits))]
			// Both keys see the new Limit at once (a charge of 1 writes
			// them under it): a take under a new Limit converts its
			// state (capping it at a lower capacity), and a twin that
			// missed the change would be no twin.
			e.logf("limit now %v", cur)
			both(cur)
		case p < 67: // the keys expire
			e.adv(5 * time.Second)
			e.logf("+5s: keys %v", e.mr.Keys())
		case p < 69: // Reset both
			for _, k := range []string{"user", "twin"} {
				if err := l.Reset(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			e.adv(time.Microsecond) // (a take at the Reset's µs is the documented exception)
			e.logf("reset both")
		case p < 72: // a Peek's receipt
			pk, err := l.Peek(ctx, cur.For("user"))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Refund(ctx, pk); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Settle(ctx, pk, 0); err != nil {
				t.Fatal(err)
			}
			e.logf("refund and settle 0 of a Peek")
		default:
			d := steps[rnd.IntN(len(steps))]
			e.adv(d)
			e.logf("+%v", d)
			continue
		}
		units, lvl, u, w := above(t, l, cur, "user", "twin")
		if units > 0 || lvl > time.Microsecond {
			t.Fatalf("seed %d: user at Remaining %d (ResetAfter %v) stands %d units (%v) above twin at %d (%v)\n%s",
				seed, u.Remaining, u.ResetAfter, units, lvl, w.Remaining, w.ResetAfter, e.history())
		}
	}
	return 0
}

// TestGiveBackExactInBusyBucket: docs/limits.md says a give-back is exact
// whenever the bucket, without the take and those taken since, would not
// have reached its end by now. Twin and user start at 5 of 20; every 100
// ms (a unit's refill) both keep a take of 1, so the twin stays near 5;
// user also takes 1, 2 and 1 (A, B, C) at steps 1, 2 and 3 and gives them
// back in every order at steps 5 to 9, or with B settled at 1 (the twin takes that 1 at B's instant). Without
// A, B, C and the kept takes the bucket holds at most 5 + 10 + 4 < 20:
// after the last give-back user must equal twin exactly.
func TestGiveBackExactInBusyBucket(t *testing.T) {
	ctx := context.Background()
	orders := [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for _, alg := range buckets {
		for oi, order := range orders {
			for _, settle := range []bool{false, true} {
				e := newEnv(t)
				l := e.limiter(e.client(0), "gb2")
				lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 20}
				user, twin := lim.For("user"), lim.For("twin")
				e.allow(l, 15, user, twin)
				var rs [3]core.Result
				sizes := [3]int{1, 2, 1}
				for step := 1; step <= 10; step++ {
					e.adv(100 * time.Millisecond)
					e.allow(l, 1, user, twin)
					if step <= 3 {
						rs[step-1] = e.allow(l, sizes[step-1], user)
						if settle && step == 2 {
							// B will be settled at 1: the twin takes 1 now.
							pk, _ := l.Peek(ctx, twin)
							if _, err := l.Settle(ctx, pk, 1); err != nil {
								t.Fatal(err)
							}
						}
					}
					if step >= 5 && step <= 7 {
						i := order[step-5]
						if settle && i == 1 {
							if _, err := l.Settle(ctx, rs[i], 1); err != nil {
								t.Fatal(err)
							}
							e.logf("settle B at 1 (the twin took 1 at B's instant)")
						} else if err := l.Refund(ctx, rs[i]); err != nil {
							t.Fatal(err)
						} else {
							e.logf("refund %c", 'A'+i)
						}
					}
				}
				units, lvl, u, w := above(t, l, lim, "user", "twin")
				what := fmt.Sprintf("%s order %d settle %v", alg, oi, settle)
				if units > 0 || lvl > 0 {
					t.Errorf("%s: user above twin by %d units (%v)\n%s", what, units, lvl, e.history())
				}
				if units != 0 || lvl != 0 {
					t.Errorf("%s: not exact: user Remaining %d ResetAfter %v, twin %d %v (%v below)\n%s",
						what, u.Remaining, u.ResetAfter, w.Remaining, w.ResetAfter, -lvl, e.history())
				}
			}
		}
	}
}

// TestGiveBackExactNothingWritten: "a token bucket that nothing was
// written to since the take holds min(capacity, level + n)" (a leaky
// bucket's queue max(0, queued - n)), at any time after the take: Peeks
// and denials in between write nothing. user and twin start at the same
// level; user takes n; after a gap (with a Peek and a denial of user in
// it), the refund must leave user exactly at twin.
func TestGiveBackExactNothingWritten(t *testing.T) {
	ctx := context.Background()
	for _, alg := range buckets {
		for _, start := range []int{0, 3, 7} {
			for _, n := range []int{1, 3} {
				for _, gap := range []time.Duration{0, time.Microsecond, 99 * time.Millisecond, 250 * time.Millisecond, 2 * time.Second} {
					e := newEnv(t)
					l := e.limiter(e.client(0), "gb2")
					lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
					user, twin := lim.For("user"), lim.For("twin")
					if start > 0 {
						e.allow(l, start, user, twin)
					}
					e.adv(time.Millisecond)
					a := e.allow(l, n, user)
					e.adv(gap / 2)
					if _, err := l.Peek(ctx, user); err != nil {
						t.Fatal(err)
					}
					if pk, err := l.Peek(ctx, user); err != nil {
						t.Fatal(err)
					} else if pk.Remaining < lim.Capacity() {
						if r, err := l.Allow(ctx, lim.Capacity(), user); err != nil || r.Allowed {
							t.Fatal(r, err)
						}
					}
					e.adv(gap - gap/2)
					if err := l.Refund(ctx, a); err != nil {
						t.Fatal(err)
					}
					units, lvl, u, w := above(t, l, lim, "user", "twin")
					if units != 0 || lvl != 0 {
						t.Errorf("%s start %d n %d gap %v: user Remaining %d ResetAfter %v, twin %d %v",
							alg, start, n, gap, u.Remaining, u.ResetAfter, w.Remaining, w.ResetAfter)
					}
				}
			}
		}
	}
}
