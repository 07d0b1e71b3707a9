package core

import (
	"context"
	"errors"
	"testing"
	"time"
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
		taken, err := l.AllowN(ctx, key, lim, 10)
		if err != nil || !taken.Allowed {
			t.Fatalf("AllowN: %+v, %v", taken, err)
		}
		if _, err := l.Settle(ctx, key, lim, taken, used); err != nil {
			t.Fatalf("Settle(used %d): %v", used, err)
		}
		r, err := l.Allow(ctx, key, lim)
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
		taken, err := l.AllowN(ctx, key, lim, 1000)
		if err != nil {
			t.Fatal(err)
		}
		res, err := l.Settle(ctx, key, lim, taken, used)
		if err != nil {
			t.Fatalf("Settle(used %d): %v", used, err)
		}
		if res.Remaining != 0 {
			t.Errorf("Settle(used %d): Remaining %d, want 0", used, res.Remaining)
		}
		r, err := l.Peek(ctx, key, lim)
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
		taken, err := l.AllowN(ctx, key, lim, 10)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Settle(ctx, key, lim, taken, -50); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: Settle(used -50) = %v, want ErrInvalidCost", a, err)
		}
		if _, err := l.SettleLayers(ctx, key, []Limit{lim}, []Result{taken}, -50); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: SettleLayers(used -50) = %v, want ErrInvalidCost", a, err)
		}
		r, err := l.Peek(ctx, key, lim)
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining != 90 {
			t.Errorf("%s: Remaining %d after the refused settles, want 90", a, r.Remaining)
		}
	}
}

// Guards: "one of another key, Algorithm or layer is refused with
// ErrInvalidCost" (Refund's godoc): a receipt of key a refunded on key b
// gave b units it never took (150 admitted in a 100/min window).
func TestReceiptOfAnotherStateRefused(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	for _, a := range Algorithms() {
		lim := with(PerMinute(100), a)
		if a == Concurrency {
			lim = InFlight(1)
		}
		a, b := "own-"+a.String(), "other-"+a.String()
		taken, err := l.Allow(ctx, a, lim)
		if err != nil || !taken.Allowed {
			t.Fatalf("%s: Allow: %+v, %v", lim, taken, err)
		}
		for range lim.Capacity() {
			if _, err := l.Allow(ctx, b, lim); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Refund(ctx, b, lim, taken); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: Refund on another key = %v, want ErrInvalidCost", lim, err)
		}
		if _, err := l.Settle(ctx, b, lim, taken, 0); lim.Algorithm != Concurrency && !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: Settle on another key = %v, want ErrInvalidCost", lim, err)
		}
		if err := l.RefundLayers(ctx, b, []Limit{lim}, []Result{taken}); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: RefundLayers on another key = %v, want ErrInvalidCost", lim, err)
		}
		if r, err := l.Peek(ctx, b, lim); err != nil || lim.Algorithm != Concurrency && r.Remaining != 0 {
			t.Errorf("%s: key b after the refused refunds: %+v, %v; want 0 remaining", lim, r, err)
		}
		// Its own key takes it.
		if err := l.Refund(ctx, a, lim, taken); err != nil {
			t.Errorf("%s: Refund on its own key: %v", lim, err)
		}
	}
}

// Guards: the same across algorithms and layers of one key, and "A Limit
// whose Rate, Period or Burst changed since the take still takes its
// receipts" (Refund's godoc).
func TestReceiptOfAnotherAlgorithmOrLayerRefused(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	tb, fw := PerMinute(100), with(PerMinute(100), FixedWindow)
	taken, err := l.Allow(ctx, "k", tb)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, "k", fw, taken); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("Refund under another Algorithm = %v, want ErrInvalidCost", err)
	}
	if err := l.Refund(ctx, "k", PerMinute(200), taken); err != nil {
		t.Errorf("Refund under a changed Rate = %v, want nil", err)
	}
	layers := []Limit{PerSecond(10), PerMinute(100)}
	lt, err := l.AllowLayers(ctx, "k2", layers, 1)
	if err != nil || !lt[1].Allowed {
		t.Fatalf("AllowLayers: %+v, %v", lt, err)
	}
	if err := l.Refund(ctx, "k2", layers[1], lt[1]); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("Refund of layer 1 as a plain Allow's = %v, want ErrInvalidCost", err)
	}
	if _, err := l.SettleLayers(ctx, "k2", layers, []Result{lt[1], lt[0]}, 5); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("SettleLayers with the layers' receipts swapped = %v, want ErrInvalidCost", err)
	}
	if err := l.Refund(ctx, "k2", layers[0], lt[0]); err != nil {
		t.Errorf("Refund of layer 0 as a plain Allow's (the same state) = %v, want nil", err)
	}
	if err := l.RefundLayers(ctx, "k2", layers, []Result{{}, lt[1]}); err != nil {
		t.Errorf("RefundLayers of layer 1 alone = %v, want nil", err)
	}
}
