package core_test

// Attacks on the period FixedWindow (one integer key ":fw4", tag*2^36 +
// count, expiring at the window's end) from outside the package: a hostile
// client, a bad network, values redlimit did not write, Limit changes.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

func fwLimit(rate int, period time.Duration) core.Limit {
	return core.Limit{Algorithm: core.FixedWindow, Rate: rate, Period: period}
}

// fwPrefix is a prefix unique to the test and the run.
func fwPrefix(t *testing.T) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("fwattack-%s-%d", name, time.Now().UnixNano())
}

// fwKeys lists the Redis keys under prefix.
func fwKeys(t *testing.T, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %s:*: %v", prefix, err)
	}
	return keys
}

// fwCleanup deletes the keys under prefix when the test ends.
func fwCleanup(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Cleanup(func() {
		for _, k := range fwKeys(t, rdb, prefix) {
			_ = rdb.Del(context.Background(), k).Err()
		}
	})
}

// fwTTLs asserts that no key under prefix lives forever.
func fwTTLs(t *testing.T, rdb redis.UniversalClient, prefix, step string) {
	t.Helper()
	for _, k := range fwKeys(t, rdb, prefix) {
		d, err := rdb.PTTL(context.Background(), k).Result()
		if err != nil {
			t.Fatalf("%s: PTTL %s: %v", step, k, err)
		}
		// (go-redis reads PTTL -1, no expiry, as -1ns; -2, gone in
		// between, as -2ns; and 0 is a key in its last ms.)
		if d == -time.Nanosecond {
			t.Fatalf("%s: key %s has no expiry: it lives forever", step, k)
		}
	}
}

func fwNew(t *testing.T, rdb redis.UniversalClient, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// redisMicros is Redis' TIME in µs.
func redisMicros(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	tm, err := rdb.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	return tm.UnixMicro(), nil
}

// clearOfPeriodEnd returns once Redis' clock is at least need before the
// end of an aligned window of period: if the window in progress ends
// sooner, it waits that window out. A test that counts an aligned window
// over a run on the real clock (which no test controls) would otherwise
// see its keys' windows end mid-run, about once an hour for an hour.
func clearOfPeriodEnd(t *testing.T, rdb redis.UniversalClient, period, need time.Duration) {
	t.Helper()
	now, err := redisMicros(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	if left := period - time.Duration(now%period.Microseconds())*time.Microsecond; left < need {
		t.Logf("the %v window ends in %v, before the run would: waiting it out", period, left)
		time.Sleep(left + time.Millisecond)
	}
}

// fwStateKey is the Redis key of key's fixed window state under prefix.
func fwStateKey(prefix, key string) string { return prefix + ":{" + key + "}:fw4" }

// fwClock moves a miniredis clock and its TTLs together, back as well as
// forth (redistest.SetTime moves TTLs only past its highest time).
type fwClock struct {
	mr  *miniredis.Miniredis
	now time.Time
}

func newFwClock(mr *miniredis.Miniredis, t0 time.Time) *fwClock {
	mr.SetTime(t0)
	return &fwClock{mr: mr, now: t0}
}

func (c *fwClock) set(t time.Time) {
	d := t.Sub(c.now)
	c.mr.SetTime(t)
	if d > 0 {
		c.mr.FastForward(d)
	}
	c.now = t
}

func (c *fwClock) add(d time.Duration) { c.set(c.now.Add(d)) }

// TestFwAttackHammerReal: 8 Limiters on 8 clients, 8 goroutines each, on 3
// keys of a 200 ms window, costs 1 to 3 and AllowAtMost: by the window each
// admission's ResetAfter names (bracketed by Redis TIME before and after
// the call), never more than Rate per window, and every wait lands on a
// window's end.
func TestFwAttackHammerReal(t *testing.T) {
	admin := redistest.Real(t)
	prefix := fwPrefix(t)
	fwCleanup(t, admin, prefix)
	const rate, instances, workers = 40, 8, 8
	const period = 200 * time.Millisecond
	const P = int64(period / time.Microsecond)
	lim := fwLimit(rate, period)
	keys := []string{"a", "b", "c"}
	type adm struct {
		key            int
		t0, t1, reset  int64
		granted, maxed int
	}
	var mu sync.Mutex
	var adms []adm
	var calls, errs atomic.Int64
	ctx := context.Background()
	deadline := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range instances {
		rdb := redistest.Real(t)
		l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
		for w := range workers {
			wg.Go(func() {
				var mine []adm
				for j := 0; time.Now().Before(deadline); j++ {
					k := (i + w + j) % len(keys)
					n := 1 + (i*7+w*3+j)%3
					t0, err := redisMicros(ctx, rdb)
					if err != nil {
						errs.Add(1)
						return
					}
					var res core.Result
					if j%4 == 3 {
						res, err = l.AllowAtMost(ctx, n+2, lim.For(keys[k]))
					} else {
						res, err = l.Allow(ctx, n, lim.For(keys[k]))
					}
					t1, err2 := redisMicros(ctx, rdb)
					calls.Add(1)
					if err != nil || err2 != nil {
						t.Errorf("call: %v / %v", err, err2)
						return
					}
					if res.Remaining < 0 || res.Remaining > rate {
						t.Errorf("Remaining %d out of [0, %d]", res.Remaining, rate)
					}
					if !res.Allowed {
						if res.RetryAfter <= 0 || res.RetryAfter > period+time.Millisecond {
							t.Errorf("denial with RetryAfter %v", res.RetryAfter)
						}
						continue
					}
					mine = append(mine, adm{k, t0, t1, res.ResetAfter.Microseconds(), res.Granted, n})
				}
				mu.Lock()
				adms = append(adms, mine...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d TIME calls failed", errs.Load())
	}
	type win struct {
		key int
		end int64
	}
	byEnd := map[win]int{}
	byEpoch := map[win]int{}
	slow := 0
	for _, a := range adms {
		end, ok := fwEnd(a.t0, a.t1, a.reset, P)
		if !ok {
			slow++
			continue
		}
		byEnd[win{a.key, end}] += a.granted
		if a.t0/P == a.t1/P {
			byEpoch[win{a.key, a.t0 / P}] += a.granted
		}
	}
	if slow > len(adms)/10 {
		t.Fatalf("%d of %d admissions name no single window (calls slower than a window)", slow, len(adms))
	}
	for w, n := range byEnd {
		if n > rate {
			t.Errorf("key %s, window ending %dµs: %d units admitted, Rate %d", keys[w.key], w.end, n, rate)
		}
	}
	most := 0
	for _, n := range byEpoch {
		most = max(most, n)
	}
	t.Logf("%d calls, %d admissions, %d key-windows; most in one epoch-aligned window by TIME brackets: %d", calls.Load(), len(adms), len(byEnd), most)
	fwTTLs(t, admin, prefix, "after the hammer")
}

// TestFwAttackTailMsReal: the lone take counts a request made in the first
// ms of an epoch-aligned window (the ms the old key's expiry names, which
// Redis keeps it through) in the OLD window, while fw_open aligns windows
// to the epoch. By Redis TIME brackets, an epoch window [kP, (k+1)P) can
// then admit Rate plus whatever the old window had left.
func TestFwAttackTailMsReal(t *testing.T) {
	admin := redistest.Real(t)
	prefix := fwPrefix(t)
	fwCleanup(t, admin, prefix)
	ctx := context.Background()
	const rate = 1000
	const period = 100 * time.Millisecond
	const P = int64(period / time.Microsecond)
	lim := fwLimit(rate, period)
	l := fwNew(t, admin, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
	for attempt := range 5 {
		key := fmt.Sprintf("k%d", attempt)
		now, err := redisMicros(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		// Open a window in the middle of an epoch window, with room left.
		if now%P > P-20000 {
			time.Sleep(time.Duration(P-now%P+10000) * time.Microsecond)
		}
		if _, err := l.Allow(ctx, 1, lim.For(key)); err != nil {
			t.Fatal(err)
		}
		now, _ = redisMicros(ctx, admin)
		boundary := (now/P + 1) * P
		time.Sleep(time.Duration(boundary-now-3000) * time.Microsecond)
		inNext := 0 // units admitted with a bracket inside [boundary, boundary+P)
		tail := 0   // of which in the boundary's ms
		for {
			t0, _ := redisMicros(ctx, admin)
			res, err := l.Allow(ctx, 1, lim.For(key))
			t1, _ := redisMicros(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			if t0 >= boundary+P {
				break
			}
			if res.Allowed && t0 >= boundary && t1 < boundary+P {
				inNext += res.Granted
				if t1 < boundary+1000 {
					tail += res.Granted
				}
			}
			if !res.Allowed && t0 >= boundary+1000 {
				break
			}
		}
		t.Logf("attempt %d: %d admitted inside [kP, (k+1)P), %d of them in ms kP", attempt, inNext, tail)
		if tail > 0 {
			if inNext > rate {
				t.Fatalf("epoch window [%d, %d)µs admitted %d units, Rate %d (%d in its first ms, counted in the window before)", boundary, boundary+P, inNext, rate, tail)
			}
			return
		}
	}
	t.Log("no take landed inside the boundary ms; inconclusive")
}

// TestFwAttackBounds: costs at and beyond the bounds, debts up to and past
// 2^40: errors or refusals, never an admission beyond Rate, never a key
// without a TTL, never a corrupt state.
func TestFwAttackBounds(t *testing.T) {
	for _, where := range []string{"mini", "real"} {
		t.Run(where, func(t *testing.T) {
			var rdb redis.UniversalClient
			if where == "mini" {
				_, rdb = redistest.Mini(t)
			} else {
				rdb = redistest.Real(t)
			}
			prefix := fwPrefix(t)
			fwCleanup(t, rdb, prefix)
			ctx := context.Background()
			l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
			const big = 1 << 33
			lim := fwLimit(big, time.Hour)
			if where == "real" {
				clearOfPeriodEnd(t, rdb, time.Hour, 10*time.Second)
			}
			if err := fwLimit(big+1, time.Hour).Validate(); !errors.Is(err, core.ErrInvalidLimit) {
				t.Fatalf("Rate 2^33+1 validates: %v", err)
			}
			if _, err := l.Allow(ctx, 1, fwLimit(big+1, time.Hour).For("x")); !errors.Is(err, core.ErrInvalidLimit) {
				t.Fatalf("Allow under Rate 2^33+1: %v", err)
			}
			for _, n := range []int{0, -1, math.MinInt, big + 1, math.MaxInt} {
				res, err := l.Allow(ctx, n, lim.For("a"))
				if err == nil && res.Allowed {
					t.Fatalf("Allow(%d) admitted: %+v", n, res)
				}
				if n <= 0 || n > big {
					if !errors.Is(err, core.ErrInvalidCost) {
						t.Fatalf("Allow(%d): %v, want ErrInvalidCost", n, err)
					}
				}
			}
			if _, err := l.AllowAtMost(ctx, 0, lim.For("a")); !errors.Is(err, core.ErrInvalidCost) {
				t.Fatalf("AllowAtMost(0): %v", err)
			}
			fwTTLs(t, rdb, prefix, "invalid costs")
			res, err := l.Allow(ctx, big, lim.For("a"))
			if err != nil || !res.Allowed || res.Remaining != 0 {
				t.Fatalf("Allow(2^33) of Rate 2^33: %+v %v", res, err)
			}
			fwTTLs(t, rdb, prefix, "Allow(2^33)")
			for _, n := range []int{1, big} {
				res, err := l.Allow(ctx, n, lim.For("a"))
				if err != nil || res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > time.Hour+time.Millisecond {
					t.Fatalf("Allow(%d) on a full window: %+v %v", n, res, err)
				}
			}
			if res, err := l.AllowAtMost(ctx, math.MaxInt, lim.For("a")); err != nil || res.Allowed {
				t.Fatalf("AllowAtMost(MaxInt) on a full window: %+v %v", res, err)
			}
			fwTTLs(t, rdb, prefix, "refusals")
			// AllowAtMost(MaxInt) on a fresh key takes the Rate, no more.
			res, err = l.AllowAtMost(ctx, math.MaxInt, lim.For("b"))
			if err != nil || !res.Allowed || res.Granted != big || res.Remaining != 0 {
				t.Fatalf("AllowAtMost(MaxInt): %+v %v", res, err)
			}
			// Refund of the whole 2^33, then it is all there again.
			if err := l.Refund(ctx, res); err != nil {
				t.Fatal(err)
			}
			if p, err := l.Peek(ctx, lim.For("b")); err != nil || p.Remaining != big {
				t.Fatalf("after the refund of 2^33: %+v %v", p, err)
			}
			fwTTLs(t, rdb, prefix, "refund of 2^33")
			// Debts: used up to 2^40 and beyond, on a small and on the big Rate.
			small := fwLimit(3, time.Second)
			for i, used := range []int{1 << 40, 1<<40 + 1, math.MaxInt} {
				key := fmt.Sprintf("d%d", i)
				taken, err := l.Allow(ctx, 1, small.For(key))
				if err != nil || !taken.Allowed {
					t.Fatal(taken, err)
				}
				s, err := l.Settle(ctx, taken, used)
				if err != nil {
					t.Fatalf("Settle(used=%d): %v", used, err)
				}
				if s.ResetAfter <= 0 {
					t.Fatalf("Settle(used=%d): ResetAfter %v", used, s.ResetAfter)
				}
				fwTTLs(t, rdb, prefix, fmt.Sprintf("Settle(used=%d)", used))
				for _, n := range []int{1, 3} {
					r, err := l.Allow(ctx, n, small.For(key))
					if err != nil || r.Allowed || r.RetryAfter < time.Hour {
						t.Fatalf("after a debt of %d: Allow(%d) = %+v %v", used, n, r, err)
					}
				}
				if r, err := l.AllowAtMost(ctx, 100, small.For(key)); err != nil || r.Allowed {
					t.Fatalf("after a debt: AllowAtMost = %+v %v", r, err)
				}
				// A refund of the receipt does not pay a debt ahead.
				if err := l.Refund(ctx, taken); err != nil {
					t.Fatal(err)
				}
				if r, err := l.Allow(ctx, 1, small.For(key)); err != nil || r.Allowed {
					t.Fatalf("after a debt and a refund: %+v %v", r, err)
				}
				fwTTLs(t, rdb, prefix, "after the debt")
				d, _ := rdb.PTTL(ctx, fwStateKey(prefix, key)).Result()
				if d < time.Hour {
					t.Fatalf("debt key PTTL %v", d)
				}
			}
			// The big Rate in debt: 2^33 used then a charge of 2^40.
			taken, err := l.Allow(ctx, big, lim.For("c"))
			if err != nil || !taken.Allowed {
				t.Fatal(taken, err)
			}
			if _, err := l.Settle(ctx, taken, math.MaxInt); err != nil {
				t.Fatal(err)
			}
			if r, err := l.Allow(ctx, 1, lim.For("c")); err != nil || r.Allowed || r.RetryAfter < 100*time.Hour {
				t.Fatalf("Rate 2^33 after a 2^40 debt: %+v %v", r, err)
			}
			v, err := rdb.Get(ctx, fwStateKey(prefix, "c")).Int64()
			if err != nil || v >= 1<<53 {
				t.Fatalf("state of c: %d %v", v, err)
			}
			fwTTLs(t, rdb, prefix, "end")
		})
	}
}

// TestFwAttackReceipts: forged, foreign, stale and repeated receipts.
func TestFwAttackReceipts(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	clk := newFwClock(mr, redistest.Epoch)
	ctx := context.Background()
	l := fwNew(t, rdb, core.WithPrefix("p"), core.WithTimeout(5*time.Second))
	lim := fwLimit(10, time.Second)
	remaining := func(key string) int {
		t.Helper()
		p, err := l.Peek(ctx, lim.For(key))
		if err != nil {
			t.Fatal(err)
		}
		return p.Remaining
	}
	clk.add(100 * time.Millisecond)
	a, err := l.Allow(ctx, 4, lim.For("a"))
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	if _, err := l.Allow(ctx, 6, lim.For("a")); err != nil {
		t.Fatal(err)
	}
	// A zero Result gives nothing back; a hand-made one is refused.
	if err := l.Refund(ctx, core.Result{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, core.Result{Allowed: true, Granted: 10}); !errors.Is(err, core.ErrInvalidCost) {
		t.Fatalf("Refund of a hand-made receipt: %v, want ErrInvalidCost", err)
	}
	if s, err := l.Settle(ctx, core.Result{Allowed: true, Granted: 10}, 0); !errors.Is(err, core.ErrInvalidCost) || remaining("a") != 0 {
		t.Fatalf("Settle of a hand-made receipt: %+v %v, remaining %d", s, err, remaining("a"))
	}
	// A receipt whose Granted was raised is refused.
	forged := a
	forged.Granted = 10
	if err := l.Refund(ctx, forged); !errors.Is(err, core.ErrInvalidCost) {
		t.Fatalf("refund of a raised receipt: %v", err)
	}
	if r := remaining("a"); r != 0 {
		t.Fatalf("a forged receipt gave back: remaining %d", r)
	}
	// A refund in its window gives back once; a second (the caller's
	// mistake, documented) never drives the count below 0.
	if err := l.Refund(ctx, a); err != nil {
		t.Fatal(err)
	}
	if r := remaining("a"); r != 4 {
		t.Fatalf("after the refund: remaining %d, want 4", r)
	}
	for range 3 {
		if err := l.Refund(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if r := remaining("a"); r < 0 || r > 10 {
		t.Fatalf("after repeated refunds: remaining %d", r)
	}
	fwTTLs(t, rdb, "p", "refunds")
	// A receipt held into the next window gives nothing back there.
	clk.set(redistest.Epoch.Add(100 * time.Millisecond))
	old, err := l.Allow(ctx, 1, lim.For("c"))
	if err != nil || !old.Allowed {
		t.Fatal(old, err)
	}
	clk.add(time.Second)
	if _, err := l.Allow(ctx, 10, lim.For("c")); err != nil {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, old); err != nil {
		t.Fatal(err)
	}
	if r := remaining("c"); r != 0 {
		t.Fatalf("a stale refund gave back %d in the next window", r)
	}
	// ...nor in a window k periods on, for k up to 1000.
	for k := 2; k < 1000; k += 97 {
		clk.add(time.Duration(97) * time.Second)
		if _, err := l.Allow(ctx, 10, lim.For("c")); err != nil {
			t.Fatal(err)
		}
		if err := l.Refund(ctx, old); err != nil {
			t.Fatal(err)
		}
		if r := remaining("c"); r != 0 {
			t.Fatalf("a refund %d windows late gave back %d", k, r)
		}
	}
	fwTTLs(t, rdb, "p", "stale refunds")
}

// TestFwAttackTagWrap backs Refund's "a FixedWindow over a Period tells
// its windows apart by their number modulo 131071": a receipt held 131070
// windows, the longest that bound covers, gives nothing back into the
// window it is refunded in. (Held 131071 windows, it would: the edge the
// godoc names.)
func TestFwAttackTagWrap(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	clk := newFwClock(mr, redistest.Epoch)
	ctx := context.Background()
	l := fwNew(t, rdb, core.WithPrefix("p"), core.WithTimeout(5*time.Second))
	lim := fwLimit(5, time.Millisecond)
	taken, err := l.Allow(ctx, 2, lim.For("k"))
	if err != nil || !taken.Allowed {
		t.Fatal(taken, err)
	}
	clk.add(131070 * time.Millisecond)
	if back := fwGaveBack(t, l, 5, taken, lim.For("k")); back != 0 {
		t.Fatalf("a refund 131070 windows late gave back %d units in a window that never took them", back)
	}
}

// TestFwAttackTagWrapPeriodChange: a lone receipt taken under 10 per 1000ms
// names its window's index modulo 131071; under 10 per 1001ms, the window
// 5 s later has the same tag at some dates (here 2024-01-19): the stale
// refund lands there.
func TestFwAttackTagWrapPeriodChange(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	const M = 131071
	// i1 = 13013*M + j windows of 1000ms; 1001ms windows then number
	// 13000*M + j at j ms later: the same tag.
	const j = 5000
	t1 := time.UnixMilli(int64(13013*M+j)*1000 + 100).UTC()
	t2 := time.UnixMilli(int64(13000*M+j)*1001 + 100).UTC()
	clk := newFwClock(mr, t1)
	ctx := context.Background()
	l := fwNew(t, rdb, core.WithPrefix("p"), core.WithTimeout(5*time.Second))
	l1, l2 := fwLimit(10, 1000*time.Millisecond), fwLimit(10, 1001*time.Millisecond)
	taken, err := l.Allow(ctx, 4, l1.For("k"))
	if err != nil || !taken.Allowed {
		t.Fatal(taken, err)
	}
	clk.set(t2)
	t.Logf("take at %v, refund at %v (%v later)", t1, t2, t2.Sub(t1))
	if back := fwGaveBack(t, l, 10, taken, l2.For("k")); back != 0 {
		t.Fatalf("a refund %v late, after a Period change, gave back %d units in a window that never took them", t2.Sub(t1), back)
	}
}

// TestFwAttackSeveralPeriodChange: the receipt of several Rules stamps the
// call's clock, from which the refund derives the tag under the Limit it is
// given: after the Period grows from 1 s to 10 s, a refund of units taken
// in a 1 s window that has ended derives the tag of the 10 s window that
// holds the take's instant, which is the current one.
func TestFwAttackSeveralPeriodChange(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	clk := newFwClock(mr, redistest.Epoch.Truncate(10*time.Second).Add(100*time.Millisecond))
	ctx := context.Background()
	l := fwNew(t, rdb, core.WithPrefix("p"), core.WithTimeout(5*time.Second))
	short, long := fwLimit(10, time.Second), fwLimit(10, 10*time.Second)
	other := fwLimit(100, time.Minute)
	taken, err := l.Allow(ctx, 4, short.For("k"), other.For("o"))
	if err != nil || !taken.Allowed {
		t.Fatal(taken, err)
	}
	clk.add(1500 * time.Millisecond) // the 1 s window has ended
	if back := fwGaveBack(t, l, 10, taken, long.For("k"), other.For("o")); back != 0 {
		t.Fatalf("units taken in an ended 1 s window came back in the new 10 s window: Remaining %d", back)
	}
}

// TestFwAttackSeveralStale: without a Limit change, the stamp of a
// several-Rule receipt gives back only in its window.
func TestFwAttackSeveralStale(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	clk := newFwClock(mr, redistest.Epoch.Add(100*time.Millisecond))
	ctx := context.Background()
	l := fwNew(t, rdb, core.WithPrefix("p"), core.WithTimeout(5*time.Second))
	lim, other := fwLimit(10, time.Second), fwLimit(100, time.Minute)
	taken, err := l.Allow(ctx, 4, lim.For("k"), other.For("o"))
	if err != nil || !taken.Allowed {
		t.Fatal(taken, err)
	}
	if r, err := l.Allow(ctx, 6, lim.For("k")); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	clk.add(time.Second)
	if r, err := l.Allow(ctx, 10, lim.For("k")); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if err := l.Refund(ctx, taken); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Peek(ctx, lim.For("k")); err != nil || p.Remaining != 0 {
		t.Fatalf("a stale several-Rule refund: %+v %v", p, err)
	}
	// In its window, it gives back.
	taken, err = l.Allow(ctx, 4, lim.For("j"), other.For("o"))
	if err != nil || !taken.Allowed {
		t.Fatal(taken, err)
	}
	if err := l.Refund(ctx, taken); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Peek(ctx, lim.For("j")); err != nil || p.Remaining != 10 {
		t.Fatalf("a several-Rule refund in its window: %+v %v", p, err)
	}
	fwTTLs(t, rdb, "p", "end")
}

// TestFwAttackStalledRefund: a redis-server of the test's own is stopped
// (SIGSTOP) right after a take; the Refund is sent while it is stopped
// (with a Limiter timeout shorter than the stall, and without), the window
// ends, a take of another instance is queued too, and the server resumes:
// the units never land in the next window.
func TestFwAttackStalledRefund(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Admin(t)
	ctx := context.Background()
	const rate = 10
	const period = 200 * time.Millisecond
	const P = int64(period / time.Microsecond)
	lim := fwLimit(rate, period)
	for _, short := range []bool{false, true} {
		timeout := 5 * time.Second
		if short {
			timeout = 30 * time.Millisecond
		}
		la := fwNew(t, srv.Client(t, nil), core.WithPrefix("p"), core.WithTimeout(timeout))
		lb := fwNew(t, srv.Client(t, nil), core.WithPrefix("p"), core.WithTimeout(5*time.Second))
		key := fmt.Sprintf("k%v", short)
		// Take in the second half of a window, leaving no room.
		now, err := redisMicros(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		if now%P < P/2 {
			time.Sleep(time.Duration(P/2-now%P+5000) * time.Microsecond)
		} else if now%P > P-40000 {
			time.Sleep(time.Duration(P-now%P+P/2) * time.Microsecond)
		}
		taken, err := la.Allow(ctx, 4, lim.For(key))
		if err != nil || !taken.Allowed {
			t.Fatal(taken, err)
		}
		if r, err := lb.Allow(ctx, 6, lim.For(key)); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		srv.Pause()
		refunded := make(chan error, 1)
		go func() { refunded <- la.Refund(ctx, taken) }()
		time.Sleep(period) // the window ends while the server is stopped
		took := make(chan core.Result, 1)
		go func() {
			r, err := lb.AllowAtMost(ctx, rate, lim.For(key))
			if err != nil {
				t.Error(err)
			}
			took <- r
		}()
		time.Sleep(20 * time.Millisecond)
		srv.Resume()
		err = <-refunded
		if short && err == nil {
			t.Log("the refund answered within 30ms of a stalled server?")
		}
		if !short && err != nil {
			t.Fatalf("refund: %v", err)
		}
		first := <-took
		// Whatever ran first, the window that started holds rate units.
		total := first.Granted
		for {
			r, err := lb.Allow(ctx, 1, lim.For(key))
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed {
				break
			}
			total++
		}
		if total != rate {
			t.Fatalf("timeout %v: the window after the stall admitted %d units, Rate %d (first take %+v, refund error %v)", timeout, total, rate, first, err)
		}
		if _, err := admin.Del(ctx, fwStateKey("p", key)).Result(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFwAttackForeignValues: values redlimit did not write, a key without a
// TTL, a huge value, another type: every verb errs naming the key, or
// decides sensibly (never more than Rate); nothing panics or hangs.
func TestFwAttackForeignValues(t *testing.T) {
	fwForeign(t, "text", "float", "huge", "negative", "small", "persisted")
}

// TestFwAttackForeignValuesUnnamed: an integer INCRBY overflows and a key
// of another type fail with Redis' error, which does not name the key.
func TestFwAttackForeignValuesUnnamed(t *testing.T) {
	fwForeign(t, "maxint64", "list")
}

func fwForeign(t *testing.T, only ...string) {
	for _, where := range []string{"mini", "real"} {
		t.Run(where, func(t *testing.T) {
			var rdb redis.UniversalClient
			if where == "mini" {
				_, rdb = redistest.Mini(t)
			} else {
				rdb = redistest.Real(t)
			}
			prefix := fwPrefix(t)
			fwCleanup(t, rdb, prefix)
			ctx := context.Background()
			l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
			lim := fwLimit(5, time.Minute)
			other := fwLimit(100, time.Hour)
			big := strings.Repeat("9", 1<<20)
			cases := []struct {
				name  string
				setup func(key string) error
			}{
				{"text", func(k string) error { return rdb.Set(ctx, k, "abc", time.Minute).Err() }},
				{"float", func(k string) error { return rdb.Set(ctx, k, "1.5", time.Minute).Err() }},
				{"huge", func(k string) error { return rdb.Set(ctx, k, big, time.Minute).Err() }},
				{"negative", func(k string) error { return rdb.Set(ctx, k, "-7", time.Minute).Err() }},
				{"small", func(k string) error { return rdb.Set(ctx, k, "3", time.Minute).Err() }},
				{"maxint64", func(k string) error { return rdb.Set(ctx, k, strconv.FormatInt(math.MaxInt64, 10), time.Minute).Err() }},
				{"list", func(k string) error {
					return rdb.RPush(ctx, k, "x").Err()
				}},
				{"persisted", func(k string) error { return rdb.Persist(ctx, k).Err() }}, // after a take, below
			}
			for _, c := range cases {
				if !slices.Contains(only, c.name) {
					continue
				}
				key := "v-" + c.name
				sk := fwStateKey(prefix, key)
				if c.name == "persisted" {
					if r, err := l.Allow(ctx, 1, lim.For(key)); err != nil || !r.Allowed {
						t.Fatal(r, err)
					}
				}
				if err := c.setup(sk); err != nil {
					t.Fatal(err)
				}
				admitted := 0
				verbs := []struct {
					name string
					do   func(ctx context.Context) (core.Result, error)
				}{
					{"Allow", func(ctx context.Context) (core.Result, error) { return l.Allow(ctx, 1, lim.For(key)) }},
					{"Allow(3)", func(ctx context.Context) (core.Result, error) { return l.Allow(ctx, 3, lim.For(key)) }},
					{"AllowAtMost", func(ctx context.Context) (core.Result, error) { return l.AllowAtMost(ctx, 9, lim.For(key)) }},
					{"Peek", func(ctx context.Context) (core.Result, error) { return l.Peek(ctx, lim.For(key)) }},
					{"Settle", func(ctx context.Context) (core.Result, error) {
						return l.Settle(ctx, core.Charge(lim.For(key)), 2)
					}},
					{"Rules", func(ctx context.Context) (core.Result, error) {
						return l.Allow(ctx, 1, lim.For(key), other.For("o-"+c.name))
					}},
				}
				for _, v := range verbs {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					r, err := v.do(cctx)
					cancel()
					switch {
					case err != nil:
						if !strings.Contains(err.Error(), sk) {
							t.Errorf("%s on a %s value: error %q does not name %s", v.name, c.name, err, sk)
						}
					case v.name != "Peek" && v.name != "Settle" && r.Allowed:
						admitted += r.Granted
					}
				}
				// Many takes: never more than Rate.
				for range 50 {
					r, err := l.Allow(ctx, 1, lim.For(key))
					if err == nil && r.Allowed {
						admitted += r.Granted
					}
				}
				if admitted > lim.Rate {
					t.Errorf("a %s value: %d units admitted in one window, Rate %d", c.name, admitted, lim.Rate)
				}
				if c.name != "list" && c.name != "persisted" {
					if d, err := rdb.PTTL(ctx, sk).Result(); err == nil && d == -1 {
						t.Errorf("a %s value: the library left %s without a TTL", c.name, sk)
					}
				}
				// Reset clears it.
				if err := l.Reset(ctx, key); err != nil {
					t.Errorf("Reset after a %s value: %v", c.name, err)
				}
				if r, err := l.Allow(ctx, 1, lim.For(key)); err != nil || !r.Allowed {
					t.Errorf("after Reset of a %s value: %+v %v", c.name, r, err)
				}
			}
			_ = rdb.Del(ctx, fwStateKey(prefix, "v-list")).Err()
			fwTTLs(t, rdb, prefix, "end")
		})
	}
}

// TestFwAttackHugeInteger: an integer at or above 2^53 with a TTL: the lone
// take reads it as a Lua number (a double), whose low bits are lost, and
// admits where the state's own load would report it.
func TestFwAttackHugeInteger(t *testing.T) {
	for _, where := range []string{"mini", "real"} {
		t.Run(where, func(t *testing.T) {
			var rdb redis.UniversalClient
			if where == "mini" {
				_, rdb = redistest.Mini(t)
			} else {
				rdb = redistest.Real(t)
			}
			prefix := fwPrefix(t)
			fwCleanup(t, rdb, prefix)
			ctx := context.Background()
			l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
			lim := fwLimit(10, time.Minute)
			sk := fwStateKey(prefix, "h")
			if err := rdb.Set(ctx, sk, strconv.FormatInt(1<<62, 10), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			admitted, errs := 0, 0
			var lastErr error
			for range 1000 {
				r, err := l.Allow(ctx, 1, lim.For("h"))
				if err != nil {
					errs++
					lastErr = err
					continue
				}
				if r.Allowed {
					admitted++
				}
			}
			if admitted > lim.Rate {
				t.Fatalf("a key holding 2^62 (a value redlimit did not write) admitted %d of 1000 lone takes, Rate %d (%d errors, last %v)", admitted, lim.Rate, errs, lastErr)
			}
			if lastErr != nil && !strings.Contains(lastErr.Error(), sk) {
				t.Fatalf("error does not name the key: %v", lastErr)
			}
		})
	}
}

// TestFwAttackLimitChangeReal: 4 Limiters hammer one key while its Limit
// changes mid-window: the Rate lowered, the Period lengthened or
// shortened. Per window (as its ResetAfter names it) never more than the
// higher Rate; no outage longer than one old window.
func TestFwAttackLimitChangeReal(t *testing.T) {
	admin := redistest.Real(t)
	prefix := fwPrefix(t)
	fwCleanup(t, admin, prefix)
	ctx := context.Background()
	changes := []struct {
		name     string
		from, to core.Limit
	}{
		{"lowered", fwLimit(60, 200*time.Millisecond), fwLimit(15, 200*time.Millisecond)},
		{"raised", fwLimit(15, 200*time.Millisecond), fwLimit(60, 200*time.Millisecond)},
		{"lengthened", fwLimit(30, 100*time.Millisecond), fwLimit(30, 400*time.Millisecond)},
		{"shortened", fwLimit(30, 400*time.Millisecond), fwLimit(30, 100*time.Millisecond)},
	}
	var ls []*core.Limiter
	var clients []*redis.Client
	for range 4 {
		c := redistest.Real(t)
		clients = append(clients, c)
		ls = append(ls, fwNew(t, c, core.WithPrefix(prefix), core.WithTimeout(5*time.Second)))
	}
	for _, ch := range changes {
		t.Run(ch.name, func(t *testing.T) {
			var cur atomic.Pointer[core.Limit]
			from, to := ch.from, ch.to
			cur.Store(&from)
			higher := max(from.Rate, to.Rate)
			oldP := from.Period
			type adm struct{ t0, t1, reset, at int64 }
			var mu sync.Mutex
			var adms []adm
			var switched atomic.Int64
			stop := time.Now().Add(900 * time.Millisecond)
			var wg sync.WaitGroup
			for i, l := range ls {
				for w := range 4 {
					wg.Go(func() {
						for time.Now().Before(stop) {
							lim := *cur.Load()
							t0, err := redisMicros(ctx, clients[i])
							if err != nil {
								t.Error(err)
								return
							}
							r, err := l.Allow(ctx, 1+w%2, lim.For(ch.name))
							t1, _ := redisMicros(ctx, clients[i])
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								mu.Lock()
								for range r.Granted {
									adms = append(adms, adm{t0, t1, r.ResetAfter.Microseconds(), t1})
								}
								mu.Unlock()
							}
						}
					})
				}
			}
			// Change the Limit in the middle of a window, after 500 ms.
			time.Sleep(500 * time.Millisecond)
			now, _ := redisMicros(ctx, admin)
			P := oldP.Microseconds()
			if off := now % P; off < P/4 || off > 3*P/4 {
				time.Sleep(time.Duration((P/2-off+P)%P) * time.Microsecond)
			}
			s, _ := redisMicros(ctx, admin)
			switched.Store(s)
			cur.Store(&to)
			wg.Wait()
			// Per window as named by ResetAfter: the candidate ends are
			// multiples of the shorter period, plus 1 ms.
			step := min(from.Period, to.Period).Microseconds()
			byEnd, slow := map[int64]int{}, 0
			for _, a := range adms {
				end, ok := fwEnd(a.t0, a.t1, a.reset, step)
				if !ok {
					slow++
					continue
				}
				byEnd[end]++
			}
			if slow > len(adms)/10 {
				t.Fatalf("%d of %d admissions name no single window (calls slower than a window)", slow, len(adms))
			}
			for e, n := range byEnd {
				if n > higher {
					t.Errorf("window ending %d: %d admitted, higher Rate %d", e, n, higher)
				}
			}
			// Outage: the longest gap between admissions after the switch.
			var times []int64
			for _, a := range adms {
				times = append(times, a.at)
			}
			slices.Sort(times)
			gap := int64(0)
			for i := 1; i < len(times); i++ {
				if times[i] > switched.Load() {
					gap = max(gap, times[i]-times[i-1])
				}
			}
			// (Half a second for a goroutine descheduled on a busy machine.)
			if limit := max(from.Period, to.Period).Microseconds() + 500000; gap > limit {
				t.Errorf("after the change, no admission for %dµs (old window %v)", gap, oldP)
			}
			t.Logf("%d admissions in %d windows; longest gap after the change %dµs", len(adms), len(byEnd), gap)
			fwTTLs(t, admin, prefix, ch.name)
		})
	}
}

// TestFwAttackStaggeredSpread backs WithStaggeredWindows' "each key's
// windows start at an offset of its own ... the same on every instance":
// on the real Redis (miniredis without REDIS_URL), 200 keys of one
// 1-minute Limit taken at one instant reset at many instants, not one;
// two Limiters that stagger agree on every key's window (the second
// refuses a full key until the same end); and a Limiter that does not
// stagger counts apart, as documented.
func TestFwAttackStaggeredSpread(t *testing.T) {
	ctx := context.Background()
	var rdb redis.UniversalClient
	if os.Getenv("REDIS_URL") != "" {
		rdb = redistest.Real(t)
	} else {
		_, rdb = redistest.Mini(t)
	}
	prefix := fwPrefix(t)
	fwCleanup(t, rdb, prefix)
	a := fwNew(t, rdb, core.WithPrefix(prefix), core.WithStaggeredWindows(), core.WithTimeout(5*time.Second))
	b := fwNew(t, rdb, core.WithPrefix(prefix), core.WithStaggeredWindows(), core.WithTimeout(5*time.Second))
	plain := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
	lim := fwLimit(3, time.Minute)
	resets := map[time.Duration]bool{}
	for i := range 200 {
		key := fmt.Sprintf("k%d", i)
		r, err := a.Allow(ctx, 3, lim.For(key))
		if err != nil || !r.Allowed {
			t.Fatalf("%s: %+v, %v", key, r, err)
		}
		resets[r.ResetAfter.Truncate(time.Second)] = true
		if i%20 == 0 {
			other, err := b.Allow(ctx, 1, lim.For(key))
			if err != nil || other.Allowed {
				t.Fatalf("%s: another staggering instance admitted past a full window: %+v, %v", key, other, err)
			}
			if d := other.RetryAfter - r.ResetAfter; d < -time.Second || d > time.Second {
				t.Fatalf("%s: the other instance waits %v, this one's window ends in %v", key, other.RetryAfter, r.ResetAfter)
			}
			if p, err := plain.Peek(ctx, lim.For(key)); err != nil || p.Remaining != 3 {
				t.Fatalf("%s: an unstaggered Limiter sees %+v, %v; want its own, untouched window", key, p, err)
			}
		}
	}
	if len(resets) < 30 {
		t.Fatalf("200 staggered keys reset at only %d distinct seconds of a minute", len(resets))
	}
	fwTTLs(t, rdb, prefix, "staggered")
}

// fwGaveBack refunds taken under rules after the window of the first Rule
// was filled with fill units, and returns what that Rule's Peek then finds
// left: the units a stale refund gave back into a window that never took
// them (0 when it gave nothing).
func fwGaveBack(t *testing.T, l *core.Limiter, fill int, taken core.Result, rules ...core.Rule) int {
	t.Helper()
	ctx := context.Background()
	if r, err := l.Allow(ctx, fill, rules[0]); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if err := l.Refund(ctx, taken); err != nil {
		t.Fatal(err)
	}
	p, err := l.Peek(ctx, rules[0])
	if err != nil {
		t.Fatal(err)
	}
	return p.Remaining
}

// fwEnd is the window end (µs, a multiple of step) that an admission made
// between Redis times t0 and t1 with ResetAfter reset names: Redis keeps a
// key through the ms its expiry names, so t + ResetAfter is that end plus
// up to 1 ms. false when the bracket holds more than one end: a call
// slower than a window, on a stalled machine, which names none.
func fwEnd(t0, t1, reset, step int64) (int64, bool) {
	lo, hi := t0+reset-1000, t1+reset
	var ends []int64
	for e := (lo-1000)/step*step + 1000; e <= hi; e += step {
		if e >= lo {
			ends = append(ends, e)
		}
	}
	if len(ends) != 1 {
		return 0, false
	}
	return ends[0], true
}
