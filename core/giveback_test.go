package core

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// A give-back restores exactly the state the key would have had had the
// take never happened. Each case runs two keys through the same history
// but for one take: "a" takes n units and gives them back (or some of
// them) in one of the ways a caller can, "twin" never takes them (or takes
// only what a kept). Both are then read in one Peek, one script call at
// one Redis instant, and must agree on Remaining, RetryAfter and
// ResetAfter, there and at later instants.

// giveBackKinds are the ways units come back: Refund, a Settle below the
// take, and a refusal in a later Cluster slot. (httplimit's CountIf gives
// back through Refund.)
var giveBackKinds = []string{"refund", "settle", "refusal"}

// stepHook runs pass(step) after every script call while step is set:
// the time a give-back comes after its take, also between the slots of
// one decision (miniredis' clock moved on, or a real Redis' waited for).
type stepHook struct {
	step *atomic.Int64 // µs
	pass func(time.Duration)
}

func (stepHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h stepHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch strings.ToLower(cmd.Name()) {
		case "fcall", "evalsha", "eval":
			if d := h.step.Load(); d > 0 {
				h.pass(time.Duration(d) * time.Microsecond)
			}
		}
		return err
	}
}
func (stepHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestGiveBackRestoresSweep: every rate algorithm x give-back kind x time
// since the take x level at the take, on miniredis' clock. Before the
// buckets gave back their level plus the units, a give-back subtracted
// what they refilled since the take: a 10/s bucket lost a unit per 100 ms
// between take and give-back.
func TestGiveBackRestoresSweep(t *testing.T) {
	const n, used = 3, 1
	since := []time.Duration{0, time.Microsecond, 7 * time.Millisecond, 99999 * time.Microsecond,
		100 * time.Millisecond, 350 * time.Millisecond, time.Second - time.Microsecond, time.Second, 2500 * time.Millisecond}
	for _, a := range Algorithms() {
		if a == Concurrency {
			continue
		}
		lim := Limit{Algorithm: a, Rate: 10, Period: time.Second}
		for _, kind := range giveBackKinds {
			for _, level := range []int{0, 5, 10 - n} { // units taken before
				for _, dt := range since {
					name := fmt.Sprintf("%s/%s/level=%d/after=%v", a, kind, level, dt)
					t.Run(name, func(t *testing.T) {
						mr, rdb, l := miniLimiter(t)
						now := redistest.Epoch.Add(250 * time.Millisecond) // off every window's edge
						redistest.SetTime(mr, now)
						var step atomic.Int64
						rdb.AddHook(stepHook{&step, func(d time.Duration) {
							now = now.Add(d)
							redistest.SetTime(mr, now)
						}})
						giveBackCase(t, l, lim, kind, level, n, used, dt, &step, true)
						// And later: the twins stay one.
						redistest.SetTime(mr, now.Add(lim.Period/3))
						compareTwins(t, l, lim.For("a"), lim.For("twin"), true)
					})
				}
			}
		}
	}
}

// giveBackCase runs one case: a and twin share the level, a takes n (the
// twin, for a Settle, used), the give-back comes dt after the take (step
// is the hook's), and both are compared (see compareTwins for exact).
func giveBackCase(t *testing.T, l *Limiter, lim Limit, kind string, level, n, used int, dt time.Duration, step *atomic.Int64, exact bool) {
	t.Helper()
	ctx := context.Background()
	a, twin := lim.For("a"), lim.For("twin")
	wait := func(d time.Duration) { step.Store(int64(d / time.Microsecond)) }
	if level > 0 {
		if r, err := l.Allow(ctx, level, a, twin); err != nil || !r.Allowed {
			t.Fatalf("the level: %+v, %v", r, err)
		}
	}
	switch kind {
	case "refusal":
		full := Limit{Algorithm: FixedWindow, Rate: n, Period: time.Hour}.For("full")
		if r, err := l.Allow(ctx, n, full); err != nil || !r.Allowed {
			t.Fatalf("filling: %+v, %v", r, err)
		}
		splitBySlot(l)
		if s := split([]Rule{a, full}, l.group); len(s.groups) != 2 {
			t.Fatalf("%q and %q share a slot", a.Key, full.Key)
		}
		wait(dt)
		r, err := l.Allow(ctx, n, a, full)
		wait(0)
		if err != nil || r.Allowed || r.Rules[0].Granted != 0 {
			t.Fatalf("Allow under a full Rule: %+v, %v", r, err)
		}
	default:
		taken, err := l.Allow(ctx, n, a)
		if err != nil || !taken.Allowed {
			t.Fatalf("the take: %+v, %v", taken, err)
		}
		if kind == "settle" {
			if r, err := l.Allow(ctx, used, twin); err != nil || !r.Allowed {
				t.Fatalf("the twin's take: %+v, %v", r, err)
			}
		}
		wait(dt)
		if _, err := l.Peek(ctx, lim.For("tick")); err != nil { // the clock moves on by dt
			t.Fatal(err)
		}
		wait(0)
		if kind == "refund" {
			err = l.Refund(ctx, taken)
		} else {
			_, err = l.Settle(ctx, taken, used)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	compareTwins(t, l, a, twin, exact)
}

// compareTwins reads a and twin in one call. Unless exact, it compares
// their Remaining only, a leading by one unit at most: on a real Redis
// the twin's history is not at the same instants as a's (its take, for a
// Settle), which moves a window's ResetAfter, or a Settle's bucket by the
// refill between.
func compareTwins(t *testing.T, l *Limiter, a, twin Rule, exact bool) {
	t.Helper()
	l.group = groupNode // one call, one instant
	r, err := l.Peek(context.Background(), a, twin)
	if err != nil {
		t.Fatal(err)
	}
	got, want := r.Rules[0], r.Rules[1]
	if !exact {
		got.RetryAfter, got.ResetAfter = want.RetryAfter, want.ResetAfter
		// The twin's take came a round trip after a's, and a bucket of
		// 1000/s refills a unit a millisecond: a may lead by that unit,
		// never lag (a lag is the lost refill this sweep is for).
		if got.Remaining == want.Remaining+1 {
			got.Remaining = want.Remaining
		}
	}
	if got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter {
		t.Errorf("after the give-back: Remaining %d, RetryAfter %v, ResetAfter %v; had the take never happened: %d, %v, %v",
			got.Remaining, got.RetryAfter, got.ResetAfter, want.Remaining, want.RetryAfter, want.ResetAfter)
	}
}

// TestRealGiveBackRestores is the sweep on a real Redis, whose clock runs:
// 1000 units a second (a minute's windows), so that the microseconds of a
// round trip between take and give-back are refill the buckets must not
// lose (0.85 to 0.98 units per refusal before), and waits of a few ms.
func TestRealGiveBackRestores(t *testing.T) {
	rdb := redistest.Real(t)
	const n, used = 3, 1
	for _, a := range Algorithms() {
		if a == Concurrency {
			continue
		}
		lim := Limit{Algorithm: a, Rate: 60000, Period: time.Minute}
		for _, kind := range giveBackKinds {
			for _, level := range []int{0, 30000, 60000 - n} {
				for _, dt := range []time.Duration{0, time.Millisecond, 4 * time.Millisecond} {
					t.Run(fmt.Sprintf("%s/%s/level=%d/after=%v", a, kind, level, dt), func(t *testing.T) {
						prefix := fmt.Sprintf("giveback%d", time.Now().UnixNano())
						t.Cleanup(func() { dropPrefix(t, rdb, prefix) })
						hooked := redis.NewClient(rdb.Options())
						t.Cleanup(func() { _ = hooked.Close() })
						var step atomic.Int64
						hooked.AddHook(stepHook{&step, time.Sleep})
						l, err := New(hooked, WithPrefix(prefix), WithLogger(nil))
						if err != nil {
							t.Fatal(err)
						}
						defer func() { _ = l.Close() }()
						bucket := a == TokenBucket || a == LeakyBucket
						giveBackCase(t, l, lim, kind, level, n, used, dt, &step, bucket && kind != "settle")
					})
				}
			}
		}
	}
}

// TestGiveBackContendedBound backs docs/limits.md's bound for a bucket
// give-back when others took from the key between the take and it: the
// key ends at most min(n, the refill since the take) units below the state
// it would have had without the take, and never above it (the units given
// back never fund more than the Limit: TestCountIfBankingAttack). "a" and
// "twin" share every take but a's n; the others' takes hit both in one
// call. Without the strict rule (giving back min(C, level + n) whatever
// was written since), "a" ends above its twin when the bucket would have
// stood full meanwhile.
func TestGiveBackContendedBound(t *testing.T) {
	const n, others = 3, 2
	for _, a := range []Algorithm{TokenBucket, LeakyBucket} {
		lim := Limit{Algorithm: a, Rate: 10, Period: time.Second}
		for _, level := range []int{0, 5} {
			for _, between := range []time.Duration{time.Microsecond, 150 * time.Millisecond} {
				for _, dt := range []time.Duration{200 * time.Millisecond, 600 * time.Millisecond, 2 * time.Second} {
					name := fmt.Sprintf("%s/level=%d/others-at=%v/after=%v", a, level, between, dt)
					t.Run(name, func(t *testing.T) {
						ctx := context.Background()
						mr, _, l := miniLimiter(t)
						now := redistest.Epoch.Add(250 * time.Millisecond)
						redistest.SetTime(mr, now)
						ra, twin := lim.For("a"), lim.For("twin")
						if level > 0 {
							if r, err := l.Allow(ctx, level, ra, twin); err != nil || !r.Allowed {
								t.Fatal(r, err)
							}
						}
						taken, err := l.Allow(ctx, n, ra)
						if err != nil || !taken.Allowed {
							t.Fatal(taken, err)
						}
						redistest.SetTime(mr, now.Add(between))
						if r, err := l.Allow(ctx, others, ra, twin); err != nil || !r.Allowed {
							t.Fatal(r, err)
						}
						redistest.SetTime(mr, now.Add(dt))
						if err := l.Refund(ctx, taken); err != nil {
							t.Fatal(err)
						}
						r, err := l.Peek(ctx, ra, twin)
						if err != nil {
							t.Fatal(err)
						}
						lost := r.Rules[1].Remaining - r.Rules[0].Remaining
						most := min(n, int((dt*time.Duration(lim.Rate)+lim.Period-1)/lim.Period))
						if lost < 0 || lost > most {
							t.Errorf("a ends %d units below its twin, want 0 to %d", lost, most)
						}
					})
				}
			}
		}
	}
}

// TestGiveBackOverlapNeverAbove backs docs/limits.md's "never above it"
// for give-backs that overlap: Z takes, X takes, Z is given back, then
// others take, then X is given back. A give-back bounded by its take's
// level (X's) trusted a level that Z's give-back had since raised, and
// left a one unit above the state without Z and X (a at Remaining 10, its
// twin at 9). The strict rule ends a at or below its twin.
func TestGiveBackOverlapNeverAbove(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		mr, _, l := miniLimiter(t)
		lim := Limit{Algorithm: alg, Rate: 10, Period: time.Second}
		a, twin := lim.For("a"), lim.For("twin")
		t0 := redistest.Epoch.Add(250 * time.Millisecond)
		at := func(d time.Duration) { redistest.SetTime(mr, t0.Add(d)) }
		at(0)
		z, err := l.Allow(ctx, 3, a)
		if err != nil || !z.Allowed {
			t.Fatal(z, err)
		}
		at(10 * time.Millisecond)
		x, err := l.Allow(ctx, 3, a)
		if err != nil || !x.Allowed {
			t.Fatal(x, err)
		}
		at(20 * time.Millisecond)
		if err := l.Refund(ctx, z); err != nil {
			t.Fatal(err)
		}
		at(170 * time.Millisecond)
		if r, err := l.Allow(ctx, 1, a, twin); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		if err := l.Refund(ctx, x); err != nil {
			t.Fatal(err)
		}
		r, err := l.Peek(ctx, a, twin)
		if err != nil {
			t.Fatal(err)
		}
		got, want := r.Rules[0], r.Rules[1]
		if got.Remaining > want.Remaining || got.ResetAfter < want.ResetAfter {
			t.Errorf("%s: a at Remaining %d, ResetAfter %v: above its twin's %d, %v, the state without Z and X",
				alg, got.Remaining, got.ResetAfter, want.Remaining, want.ResetAfter)
		}
	}
}
