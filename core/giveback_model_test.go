package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestGiveBackModelSweep walks random histories of takes and give-backs
// (Refund, and Settle below the take) on one bucket key, "a", with the
// give-backs landing after other callers' takes and give-backs, and
// replays on a twin key only what a kept: the state a would hold had the
// units given back never been taken. At the end, at one instant:
//   - a is never above its twin (docs/limits.md, "Giving units back");
//   - a equals its twin exactly when every give-back was one the state's
//     count of units taken places: the bucket, without that take and those
//     taken since, would not have reached its end (full; a queue, empty)
//     by the give-back.
//
// Without the count (give-backs under contention that lose the refill
// since their take), the exact histories end up to a unit per give-back
// below their twin; without the strict bound, or with a count that missed
// a take, they end above it.
func TestGiveBackModelSweep(t *testing.T) {
	limits := []Limit{
		{Rate: 10, Period: time.Second},
		{Rate: 1000, Period: time.Second},
		{Rate: 5, Period: 200 * time.Millisecond, Burst: 20},
	}
	histories := 150
	if testing.Short() {
		histories = 40
	}
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		for _, lim := range limits {
			lim.Algorithm = alg
			t.Run(lim.String(), func(t *testing.T) {
				mr, _, l := miniLimiter(t)
				p, err := lim.params()
				if err != nil {
					t.Fatal(err)
				}
				var eligible, exact int
				for seed := range uint64(histories) {
					h := giveBackHistory{t: t, mr: mr, l: l, lim: lim, p: p, key: fmt.Sprintf("h%d", seed)}
					placed, lost := h.run(rand.New(rand.NewPCG(seed, 35)))
					switch {
					case lost < 0:
						t.Fatalf("seed %d: a ends %d scaled units above its twin\n%s", seed, -lost, h.log.String())
					case placed && lost != 0:
						t.Fatalf("seed %d: every give-back was placed, yet a ends %d scaled units below its twin\n%s", seed, lost, h.log.String())
					case placed:
						eligible++
						exact++
					case lost == 0:
						exact++
					}
				}
				t.Logf("%d histories: %d with every give-back placed (all exact), %d exact in all", histories, eligible, exact)
				if eligible < histories/10 {
					t.Errorf("only %d of %d histories had every give-back placed: the sweep tests little", eligible, histories)
				}
			})
		}
	}
}

// giveBackHistory is one random history on key and its twin.
type giveBackHistory struct {
	t   *testing.T
	mr  *miniredis.Miniredis
	l   *Limiter
	lim Limit
	p   params
	key string
	log strings.Builder
}

type heldTake struct {
	at    int64 // µs
	n     int
	res   Result
	end   int64 // the bucket's distance from its end just after, scaled
	kept  int   // units the twin takes at at
	given bool
}

type givenBack struct{ at, units int64 }

// run plays the history and reports whether every give-back was placed
// (see TestGiveBackModelSweep) and how far a ends below its twin, in
// scaled units (negative: above).
func (h *giveBackHistory) run(rng *rand.Rand) (placed bool, lost int64) {
	ctx := context.Background()
	a, twin := h.lim.For(h.key+"a"), h.lim.For(h.key+"twin")
	clock := redistest.Epoch.UnixMicro() + 250_000
	var takes []*heldTake
	var gives []givenBack
	placed = true
	step := h.p.tick * (h.p.period / h.p.rate) // about a unit's refill
	capacity := int(h.p.capacity)
	most := max(3, capacity/20) // the largest take
	busy := rng.IntN(2) == 0
	if busy {
		// A busy bucket: most of it taken at the start, by a caller who
		// keeps it (the twin takes it too), and takes coming faster than
		// it refills.
		redistest.SetTime(h.mr, time.UnixMicro(clock))
		drain := capacity - 2*most - rng.IntN(capacity/3)
		for _, k := range []string{"a", "twin"} {
			if res, err := h.l.Allow(ctx, max(1, drain), h.lim.For(h.key+k)); err != nil || !res.Allowed {
				h.t.Fatal(res, err)
			}
		}
	}
	for range 24 {
		switch r := rng.IntN(10); {
		case r < 3:
		case r < 6 || busy:
			clock += 1 + rng.Int64N(max(1, step/4))
		default:
			clock += 1 + rng.Int64N(3*step)
		}
		redistest.SetTime(h.mr, time.UnixMicro(clock))
		open := []*heldTake{}
		for _, tk := range takes {
			if !tk.given {
				open = append(open, tk)
			}
		}
		if len(open) == 0 || rng.IntN(5) < 3 {
			n := 1 + rng.IntN(most)
			res, err := h.l.Allow(ctx, n, a)
			if err != nil {
				h.t.Fatal(err)
			}
			if res.Allowed {
				tk := &heldTake{at: clock, n: n, res: res, end: h.endOf(h.key+"a", clock), kept: n}
				takes = append(takes, tk)
				fmt.Fprintf(&h.log, "  %d: take %d (end %d)\n", clock, n, tk.end)
			}
			continue
		}
		tk := open[rng.IntN(len(open))]
		tk.given = true
		give := tk.n
		if rng.IntN(2) == 0 {
			if err := h.l.Refund(ctx, tk.res); err != nil {
				h.t.Fatal(err)
			}
			tk.kept = 0
		} else {
			tk.kept = rng.IntN(tk.n)
			give = tk.n - tk.kept
			if _, err := h.l.Settle(ctx, tk.res, tk.kept); err != nil {
				h.t.Fatal(err)
			}
		}
		// Placed: even with every unit given back since, and the refill or
		// drain since the take, the bucket stays short of its end.
		room := tk.end - ceilDiv(clock-tk.at, h.p.tick)*h.p.rate
		for _, g := range gives {
			if g.at > tk.at {
				room -= g.units * h.p.period
			}
		}
		placed = placed && room >= int64(give)*h.p.period
		gives = append(gives, givenBack{at: clock, units: int64(give)})
		fmt.Fprintf(&h.log, "  %d: give back %d of the take at %d (placed: %v)\n", clock, give, tk.at, room >= int64(give)*h.p.period)
	}
	end := clock
	for _, tk := range takes {
		if tk.kept == 0 {
			continue
		}
		redistest.SetTime(h.mr, time.UnixMicro(tk.at))
		if res, err := h.l.Allow(ctx, tk.kept, twin); err != nil || !res.Allowed {
			h.t.Fatalf("the twin refused %d at %d, which a admitted: %+v, %v", tk.kept, tk.at, res, err)
		}
	}
	return placed, h.endOf(h.key+"a", end) - h.endOf(h.key+"twin", end)
}

// endOf is how far key's bucket is from its end at µs now, in scaled
// units: a token bucket's tokens short of full, a queue's queued units.
func (h *giveBackHistory) endOf(key string, now int64) int64 {
	v, err := h.mr.Get(stateKeys(nil, "test", escapeTag(key), h.lim.row(), 0)[0])
	if err != nil {
		return 0 // no state: full, or empty
	}
	f := strings.Fields(v)
	level, _ := strconv.ParseInt(f[0], 10, 64)
	t, _ := strconv.ParseInt(f[1], 10, 64)
	ticks := floorDiv(now-t, h.p.tick)
	full := h.p.capacity * h.p.period
	if h.lim.Algorithm == TokenBucket {
		return full - min(full, level+ticks*h.p.rate)
	}
	return max(0, level-ticks*h.p.rate)
}
