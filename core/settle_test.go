package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// Guards: "a charge above that is charged as that debt, never refused"
// (Settle's godoc). Before, a report above the largest charge the bucket's
// arithmetic took was refused with ErrInvalidCost, and HTTP's Finish
// dropped it: 2^40 on 1000/min was free while 2^20 refused the key.
func TestSettleLargeChargeNeverFree(t *testing.T) {
	mr, _, l := miniLimiter(t)
	ctx := context.Background()
	lim := PerMinute(1000)
	waits := map[int]time.Duration{}
	for _, used := range []int{1 << 20, 1 << 40, 1<<40 + 1, 1 << 62} {
		key := "large-" + time.Duration(used).String()
		taken, err := l.Allow(ctx, 10, lim.For(key))
		if err != nil || !taken.Allowed {
			t.Fatalf("AllowN: %+v, %v", taken, err)
		}
		if _, err := l.Settle(ctx, taken, used); err != nil {
			t.Fatalf("Settle(used %d): %v", used, err)
		}
		r, err := l.Allow(ctx, 1, lim.For(key))
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			t.Errorf("used %d: the next request was admitted", used)
		}
		waits[used] = r.RetryAfter
	}
	if waits[1<<40] < waits[1<<20] || waits[1<<62] < waits[1<<40] {
		t.Errorf("waits after a settle fall as the report grows: %v", waits)
	}
	_ = mr
}

// Guards: the same, on a Limit whose largest charge was 1.3 x its
// capacity (99991 per 24h, the case).
func TestSettleLargeChargeDailyBucket(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	lim := Limit{Rate: 99991, Period: 24 * time.Hour}
	var last time.Duration
	for _, used := range []int{120000, 140000, 1 << 30, 1 << 62} {
		key := "daily-" + time.Duration(used).String()
		taken, err := l.Allow(ctx, 1000, lim.For(key))
		if err != nil {
			t.Fatal(err)
		}
		res, err := l.Settle(ctx, taken, used)
		if err != nil {
			t.Fatalf("Settle(used %d): %v", used, err)
		}
		if res.Remaining != 0 {
			t.Errorf("Settle(used %d): Remaining %d, want 0", used, res.Remaining)
		}
		r, err := l.Peek(ctx, lim.For(key))
		if err != nil {
			t.Fatal(err)
		}
		if r.RetryAfter < last {
			t.Errorf("used %d: wait %v, less than a smaller report's %v", used, r.RetryAfter, last)
		}
		last = r.RetryAfter
	}
}

// Guards: "used < 0 is ErrInvalidCost" (Settle's godoc): a negative report
// gave back units never taken.
func TestSettleNegativeUsed(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	for _, a := range []Algorithm{TokenBucket, SlidingWindow, SlidingWindowCounter, FixedWindow, LeakyBucket} {
		lim := with(PerMinute(100), a)
		key := "neg-" + a.String()
		taken, err := l.Allow(ctx, 10, lim.For(key))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Settle(ctx, taken, -50); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: Settle(used -50) = %v, want ErrInvalidCost", a, err)
		}
		// The receipt as a decision under several Rules gives it: Settle's
		// path for them.
		several := Result{Allowed: true, Granted: taken.Granted, Rules: []Result{taken}}
		if _, err := l.Settle(ctx, several, -50); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: Settle(used -50) of a receipt of Rules = %v, want ErrInvalidCost", a, err)
		}
		r, err := l.Peek(ctx, lim.For(key))
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining != 90 {
			t.Errorf("%s: Remaining %d after the refused settles, want 90", a, r.Remaining)
		}
	}
}

// Guards: Result's "a receipt carries its Rules": a refund gives back to
// the key it took from only (before, a receipt of key a refunded under
// key b gave b units it never took: 150 admitted in a 100/min window),
// and a Result made by hand, which names no Rule, is ErrInvalidCost.
func TestReceiptGivesBackToItsOwnKey(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	for _, a := range Algorithms() {
		lim := with(PerMinute(100), a)
		if a == Concurrency {
			lim = InFlight(1)
		}
		a, b := "own-"+a.String(), "other-"+a.String()
		taken, err := l.Allow(ctx, 1, lim.For(a))
		if err != nil || !taken.Allowed {
			t.Fatalf("%s: Allow: %+v, %v", lim, taken, err)
		}
		for range lim.Capacity() {
			if _, err := l.Allow(ctx, 1, lim.For(b)); err != nil {
				t.Fatal(err)
			}
		}
		several := Result{Allowed: true, Granted: taken.Granted, Rules: []Result{taken}}
		if err := l.Refund(ctx, several); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: Refund of a hand-made receipt = %v, want ErrInvalidCost", lim, err)
		}
		if err := l.Refund(ctx, taken); err != nil {
			t.Errorf("%s: Refund: %v", lim, err)
		}
		if r, err := l.Peek(ctx, lim.For(b)); err != nil || lim.Algorithm != Concurrency && r.Remaining != 0 {
			t.Errorf("%s: key b after a's refund: %+v, %v; want 0 remaining", lim, r, err)
		}
		if r, err := l.Peek(ctx, lim.For(a)); err != nil || r.Remaining != lim.Capacity() {
			t.Errorf("%s: key a after its refund: %+v, %v; want %d remaining", lim, r, err, lim.Capacity())
		}
	}
}

// Guards: a receipt of one Rule of several is no receipt of another Rule
// of its key, alone or with the Rules' receipts swapped (Result's "a
// receipt whose Granted was changed is refused" and the check of layers).
func TestReceiptOfAnotherLayerRefused(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	layers := []Rule{PerSecond(10).For("k2"), PerMinute(100).For("k2")}
	res, err := l.Allow(ctx, 1, layers...)
	if err != nil || !res.Allowed || !res.Rules[1].Allowed {
		t.Fatalf("Allow under two Rules: %+v, %v", res, err)
	}
	lt := res.Rules
	if err := l.Refund(ctx, lt[1]); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("Refund of rule 1 as a plain Allow's = %v, want ErrInvalidCost", err)
	}
	swapped := res
	swapped.Rules = []Result{lt[1], lt[0]}
	if _, err := l.Settle(ctx, swapped, 5); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("Settle with the Rules' receipts swapped = %v, want ErrInvalidCost", err)
	}
	if err := l.Refund(ctx, lt[0]); err != nil {
		t.Errorf("Refund of rule 0 as a plain Allow's (the same state) = %v, want nil", err)
	}
	second := res
	second.Rules = []Result{{}, lt[1]}
	if err := l.Refund(ctx, second); err != nil {
		t.Errorf("Refund of rule 1 alone = %v, want nil", err)
	}
}

// settleSweepLimits are the Limits TestSettleSweep walks: small ones, the
// issue's daily bucket, and ones at the edges of each algorithm's exact
// arithmetic (the largest Rate, the longest Period, a scaled capacity
// near 2^50, a bucket whose debt the 142-year bound cuts short).
func settleSweepLimits() []Limit {
	const maxP = maxPeriod * time.Microsecond
	var out []Limit
	for _, a := range []Algorithm{TokenBucket, SlidingWindow, SlidingWindowCounter, FixedWindow, LeakyBucket} {
		for _, lim := range []Limit{
			PerSecond(10), PerMinute(1000), {Rate: 99991, Period: 24 * time.Hour},
			{Rate: maxRate, Period: time.Second}, {Rate: 1, Period: time.Microsecond}, {Rate: 1, Period: maxP},
			{Rate: 7, Period: 3 * time.Microsecond, Burst: maxRate},       // a scale of 1: one charge of 2^49
			{Rate: 1, Period: 1 << 40 * time.Microsecond, Burst: 1 << 10}, // refills in 2^50µs
			{Rate: 1, Period: 1 << 41 * time.Microsecond, Burst: 1 << 10}, // in ticks of 10µs
			{Rate: 1 << 20, Period: 1 << 30 * time.Microsecond},           // a counter near 2^50
		} {
			lim.Algorithm = a
			if a != TokenBucket && a != LeakyBucket {
				lim.Burst = 0
			}
			if lim.Validate() == nil {
				out = append(out, lim)
			}
		}
	}
	return append(out, Limit{Algorithm: FixedWindow, Rate: 10, Calendar: Daily},
		PerMonth(maxRate, nil), Limit{Algorithm: FixedWindow, Rate: 1, Calendar: Weekly})
}

// settleSweepUsed are the reports TestSettleSweep makes after taking
// granted under lim: every edge of the charge's bound (most, the largest
// charge; the windows' 2^40), of the 2^53 guard and of int, in order.
func settleSweepUsed(lim Limit, granted int) []int {
	pl, err := newPlan([]Limit{lim}, layer0, layer0, false)
	if err != nil {
		panic(err)
	}
	most := int(pl.mostCharged())
	used := []int{0, 1, granted - 1, granted, granted + 1, lim.Capacity(), 2 * lim.Capacity(), 4*lim.Capacity() + 1,
		granted + most - 1, granted + most, granted + most + 1, 1 << 40, 1<<40 + 1, 1 << 49, 1<<49 + granted + 1,
		1 << 53, 1<<53 + 1, 1 << 62, math.MaxInt64 - 1, math.MaxInt64}
	slices.Sort(used)
	return slices.Compact(used)
}

// Guards: "No used is too large: a larger one never leaves the key a
// shorter wait" and "used < 0 is ErrInvalidCost" (Settle's godoc), for
// every algorithm and calendar, from 0 to MaxInt64. Each report is
// settled on a fresh key at one Redis instant, then a Peek reads what it
// left: RetryAfter and ResetAfter never fall and Remaining never rises as
// used grows, no wait overflows a Duration, and only a negative used is
// refused (which leaves the key as it was).
func TestSettleSweep(t *testing.T) {
	_, _, l := miniLimiter(t)
	l.clock = func() time.Time { return redistest.Epoch }
	sweepSettle(t, l, true)
}

// TestRealSettleSweep runs the sweep on a real Redis, whose Lua is not
// miniredis': its clock runs, so a wait may fall by the time the step
// took, and Remaining (which a window's end restores) is not compared.
func TestRealSettleSweep(t *testing.T) {
	rdb := redistest.Real(t)
	prefix := realPrefix(t)
	cleanupPrefix(t, rdb, prefix)
	sweepSettle(t, opsNew(t, rdb, WithPrefix(prefix), opsPatient), false)
}

func sweepSettle(t *testing.T, l *Limiter, exact bool) {
	ctx := context.Background()
	for li, lim := range settleSweepLimits() {
		granted := min(lim.Capacity(), 10)
		var prev Result
		var prevUsed int
		var prevPeek time.Time // when prev's Peek was sent
		for ui, used := range append([]int{math.MinInt, -1}, settleSweepUsed(lim, granted)...) {
			key := fmt.Sprintf("sweep-%d-%d", li, ui)
			taken, err := l.Allow(ctx, granted, lim.For(key))
			if err != nil || !taken.Allowed {
				t.Fatalf("%s: AllowN(%d) = %+v, %v", lim, granted, taken, err)
			}
			_, err = l.Settle(ctx, taken, used)
			if used < 0 {
				if !errors.Is(err, ErrInvalidCost) {
					t.Errorf("%s: Settle(used %d) = %v, want ErrInvalidCost", lim, used, err)
				}
				if p, err := l.Peek(ctx, lim.For(key)); err != nil || exact && p.Remaining != taken.Remaining {
					t.Errorf("%s: after a refused Settle(used %d): %+v, %v; want Remaining %d", lim, used, p, err, taken.Remaining)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: Settle(used %d): %v", lim, used, err)
				continue
			}
			peek := time.Now()
			p, err := l.Peek(ctx, lim.For(key))
			if err != nil {
				t.Errorf("%s: Peek after Settle(used %d): %v", lim, used, err)
				continue
			}
			if p.RetryAfter < 0 || p.ResetAfter < 0 || p.ResetAfter > maxDebtWait*time.Microsecond+time.Duration(maxPeriod)*time.Microsecond*2 {
				t.Errorf("%s: after Settle(used %d): %+v, a wait out of range", lim, used, p)
			}
			slack := time.Duration(0)
			if !exact {
				// (And 2 ms more: a fixed window's waits, read from its
				// key's expiry, may run up to 2 ms past the exact one,
				// which a 1 ms window reached meanwhile does not.)
				slack = time.Since(prevPeek) + 3*time.Millisecond
			}
			if used > 0 && (p.RetryAfter+slack < prev.RetryAfter || p.ResetAfter+slack < prev.ResetAfter || exact && p.Remaining > prev.Remaining) {
				t.Errorf("%s: after Settle(used %d): Remaining %d, RetryAfter %v, ResetAfter %v; after used %d: %d, %v, %v",
					lim, used, p.Remaining, p.RetryAfter, p.ResetAfter, prevUsed, prev.Remaining, prev.RetryAfter, prev.ResetAfter)
			}
			prev, prevUsed, prevPeek = p, used, peek
		}
	}
}

// Guards: the same for Settle under several Rules of one key (each with
// its bounds on a debt), where one n reaches Rules of different bounds: a bucket whose
// bound is above 2^40 beside a window, and the daily bucket
// beside a minute's.
func TestSettleLayersSweep(t *testing.T) {
	_, _, l := miniLimiter(t)
	l.clock = func() time.Time { return redistest.Epoch }
	ctx := context.Background()
	sets := [][]Limit{
		{PerMinute(1000), with(PerHour(1000), FixedWindow)},
		{{Rate: 99991, Period: 24 * time.Hour}, with(PerMinute(1000), SlidingWindow)},
		{{Rate: 7, Period: 3 * time.Microsecond, Burst: maxRate}, with(PerSecond(10), SlidingWindowCounter), with(PerSecond(10), LeakyBucket)},
	}
	for si, limits := range sets {
		prev := make([]Result, len(limits))
		for ui, used := range settleSweepUsed(limits[0], 10) {
			key := fmt.Sprintf("layers-%d-%d", si, ui)
			rules := opsRules(key, limits)
			taken, err := l.Allow(ctx, 10, rules...)
			if err != nil || !taken.Allowed || !taken.Rules[0].Allowed {
				t.Fatalf("set %d: Allow = %+v, %v", si, taken, err)
			}
			if _, err := l.Settle(ctx, taken, used); err != nil {
				t.Errorf("set %d: Settle(used %d): %v", si, used, err)
				continue
			}
			for i, lim := range limits {
				p := opsPeekLayer(t, l, key, limits, i)
				if ui > 0 && (p.RetryAfter < prev[i].RetryAfter || p.Remaining > prev[i].Remaining) {
					t.Errorf("set %d rule %d (%s): after Settle(used %d): %+v; after a smaller report: %+v", si, i, lim, used, p, prev[i])
				}
				prev[i] = p
			}
		}
	}
}

// Guards the bound Settle's godoc states for a bucket: its deepest debt
// is at most 2^52 scaled units, at least 4 times its Capacity unless that
// refills in more than 2^52µs, refills (from the debt to full) within
// 2^52µs, and is reached by one charge of at most 2^49 units (whose code
// Lua holds exactly); and the worked figures: about 75 billion units (142
// years) for PerMinute(1000), 521249 (5.2 days) for 99991 per 24 hours.
func TestDeepestDebt(t *testing.T) {
	for _, lim := range settleSweepLimits() {
		p, err := lim.params()
		if err != nil || !lim.row().burst {
			continue
		}
		full := p.capacity * p.period
		refill := func(scaled int64) float64 { return float64(scaled) / float64(p.rate) * float64(p.tick) }
		switch {
		case p.debt < 0 || p.debt > maxDebt:
			t.Errorf("%s: debt %d scaled units, want 0 to 2^52", lim, p.debt)
		case p.debt < 4*full && refill(4*full+full) <= maxDebtWait:
			t.Errorf("%s: debt %d scaled units, less than 4 x Capacity (%d)", lim, p.debt, 4*full)
		case refill(full+p.debt) > maxDebtWait+float64(p.tick):
			t.Errorf("%s: a debt of %d refills in %.0fµs, more than 2^52", lim, p.debt, refill(full+p.debt))
		case p.mostCharged(lim.row()) > maxCharge || p.mostCharged(lim.row())*p.period < full+p.debt:
			t.Errorf("%s: the largest charge %d does not reach the debt %d, or is over 2^49", lim, p.mostCharged(lim.row()), p.debt)
		}
	}
	for _, c := range []struct {
		lim   Limit
		units int64
		wait  time.Duration
	}{
		{PerMinute(1000), 75059992789, 1250999*time.Hour + 52*time.Minute},
		{Limit{Rate: 99991, Period: 24 * time.Hour}, 521249, 125*time.Hour + 6*time.Minute},
	} {
		p, _ := c.lim.params()
		units := p.debt / p.period
		wait := time.Duration(float64(p.debt)/float64(p.rate)*float64(p.tick)) * time.Microsecond
		if units != c.units || wait.Truncate(time.Minute) != c.wait {
			t.Errorf("%s: deepest debt %d units, %v; want %d, %v", c.lim, units, wait, c.units, c.wait)
		}
	}
}

// TestReceiptBindsAmountLimiterAndDecision backs Result's "a receipt is
// accepted only as it was returned": a receipt whose Granted was raised,
// one of another Limiter (another prefix, on the same Redis), and a
// Peek's or a denial's Result given a Granted are refused with
// ErrInvalidCost, under Refund and Settle, and give nothing back. Before,
// each was accepted (a receipt raised from 1 to 10 gave 10 back).
func TestReceiptBindsAmountLimiterAndDecision(t *testing.T) {
	ctx := context.Background()
	_, rdb, l := miniLimiter(t)
	other, err := New(rdb, WithPrefix("other"), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	lim := PerHour(10)
	rule := lim.For("k")
	taken, err := l.Allow(ctx, 1, rule)
	if err != nil || !taken.Allowed {
		t.Fatal(taken, err)
	}
	for range 8 {
		if _, err := l.Allow(ctx, 1, rule); err != nil {
			t.Fatal(err)
		}
	}
	denied, _ := l.Allow(ctx, 5, rule)
	peek, _ := l.Peek(ctx, rule)
	if denied.Allowed {
		t.Fatal("want a denial")
	}
	raised := taken
	raised.Granted = 10
	denied.Granted, peek.Granted = 5, 5
	for _, c := range []struct {
		name string
		l    *Limiter
		r    Result
	}{
		{"a raised Granted", l, raised},
		{"another Limiter's", other, taken},
		{"a denial's", l, denied},
		{"a Peek's", l, peek},
	} {
		if err := c.l.Refund(ctx, c.r); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("Refund of %s receipt: %v, want ErrInvalidCost", c.name, err)
		}
		if _, err := c.l.Settle(ctx, c.r, 0); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("Settle of %s receipt: %v, want ErrInvalidCost", c.name, err)
		}
	}
	if got := remaining(t, l, lim, "k"); got != 1 {
		t.Errorf("after the refused receipts %d left, want 1", got)
	}
	if err := l.Refund(ctx, taken); err != nil || remaining(t, l, lim, "k") != 2 {
		t.Errorf("the receipt as returned: %v, %d left; want 2", err, remaining(t, l, lim, "k"))
	}
}
