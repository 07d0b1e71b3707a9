package core

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// downLimiter is a Limiter whose Redis never answers, with the local
// fallback on.
func downLimiter(t *testing.T, instances, maxKeys int) *Limiter {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	// The breaker opens at once: the calls below then skip Redis.
	return opsNew(t, rdb, WithLocalFallback(instances, maxKeys), WithBreaker(1, time.Hour))
}

// TestFallbackKeyRotationFlood: however many keys rotate through the
// fallback, none is admitted more than its share. An LRU of buckets capped
// at maxKeys forgot the oldest key's bucket, which came back full: 101 keys
// through a cap of 100 admitted 10 of 10 per key at 5 per minute.
func TestFallbackKeyRotationFlood(t *testing.T) {
	ctx := context.Background()
	limit := PerMinute(5)
	flood := 100000
	if !redistest.Long() {
		flood = 10000
		redistest.Reduced(t, "the key-rotation flood cut to 10000 keys")
	}
	for _, keys := range []int{100, 101, 1000, flood} {
		t.Run(fmt.Sprintf("%d keys", keys), func(t *testing.T) {
			l := downLimiter(t, 1, 100)
			admitted := make([]int, keys)
			for range 10 {
				for k := range keys {
					r, err := l.Allow(ctx, 1, limit.For(fmt.Sprintf("rotating:%d", k)))
					if err != nil {
						t.Fatal(err)
					}
					if !r.Fallback {
						t.Fatalf("a decision with Redis down does not say Fallback: %+v", r)
					}
					if r.Allowed {
						admitted[k]++
					}
				}
			}
			total := 0
			for k, n := range admitted {
				if n > 5 {
					t.Fatalf("key %d admitted %d times in 10 rounds, above its share of 5", k, n)
				}
				total += n
			}
			// Up to maxKeys active keys, a key shares all its cells with
			// others about once in 400: nearly every key gets its whole
			// share. A flood is denied more, never admitted more.
			t.Logf("%d keys x 10 rounds: %d admitted (%.2f per key, share 5)", keys, total, float64(total)/float64(keys))
			if keys <= 100 && total < 5*keys*95/100 {
				t.Errorf("%d admitted, want nearly every key's share (%d)", total, 5*keys)
			}
		})
	}
}

// TestFallbackShare: each of n instances gets 1/n of the capacity and of the
// rate, and the share refills at its own rate.
func TestFallbackShare(t *testing.T) {
	s := newSketch(4, 10)
	limit := PerSecond(100) // 25 per second per instance
	now := s.start.Add(time.Second)
	admitted := 0
	for range 100 {
		r, err := s.allowOne("k", limit, 1, false, now)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted++
		}
	}
	if admitted != 25 {
		t.Errorf("%d admitted at once, want the share 25", admitted)
	}
	r, _ := s.allowOne("k", limit, 1, false, now)
	if r.Allowed || r.RetryAfter != 40*time.Millisecond {
		t.Errorf("26th: %+v, want denied for 40ms (25 per second)", r)
	}
	if r, _ := s.allowOne("k", limit, 1, false, now.Add(40*time.Millisecond)); !r.Allowed {
		t.Errorf("after RetryAfter: %+v, want admitted", r)
	}
	if r, _ := s.allowOne("k", limit, 30, true, now.Add(2*time.Second)); !r.Allowed || r.Granted != 25 {
		t.Errorf("AllowAtMost(30) when whole: %+v, want 25 granted", r)
	}
}

// TestFallbackCostAboveShare backs WithLocalFallback's "A cost above what
// an instance's share admits at once (its share of the Capacity, rounded
// down; for a window, (w+1)/2 rounded down) can never pass and is refused
// with ErrInvalidCost": refused at once, not denied with a RetryAfter that
// Wait would loop on.
func TestFallbackCostAboveShare(t *testing.T) {
	ctx := context.Background()
	l := downLimiter(t, 4, 10)
	limit := PerSecond(100) // share 25
	if r, err := l.Allow(ctx, 25, limit.For("k")); err != nil || !r.Allowed {
		t.Fatalf("AllowN(25) = %+v, %v; want admitted", r, err)
	}
	if _, err := l.Allow(ctx, 26, limit.For("k")); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("AllowN(26) above the share = %v, want ErrInvalidCost", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := l.Wait(wctx, 26, limit.For("k")); !errors.Is(err, ErrInvalidCost) || time.Since(start) > time.Second {
		t.Errorf("WaitN(26) = %v after %v; want ErrInvalidCost at once", err, time.Since(start))
	}
	if _, err := l.Allow(ctx, 26, PerSecond(1000).For("k"), limit.For("k")); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("Allow(26) above rule 1's share = %v, want ErrInvalidCost", err)
	}
	// A window's share of 25 admits (25+1)/2 = 13 at once.
	window := Limit{Algorithm: SlidingWindow, Rate: 100, Period: time.Second}
	if r, err := l.Allow(ctx, 13, window.For("w")); err != nil || !r.Allowed {
		t.Errorf("AllowN(13) of %v = %+v, %v; want admitted", window, r, err)
	}
	if _, err := l.Allow(ctx, 14, window.For("w")); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("AllowN(14) of %v = %v, want ErrInvalidCost", window, err)
	}
}

// TestFallbackLayersAllOrNothing: in fallback, as in Redis, a layered
// request that one layer denies takes nothing from the others.
func TestFallbackLayersAllOrNothing(t *testing.T) {
	ctx := context.Background()
	l := downLimiter(t, 1, 10)
	layers := []Limit{PerMinute(10), PerHour(3)}
	for i := range 3 {
		res, err := l.Allow(ctx, 1, layers[0].For("k"), layers[1].For("k"))
		if err != nil || !res.Allowed || !res.Rules[0].Allowed || !res.Rules[1].Allowed || res.Rules[0].Granted != 1 {
			t.Fatalf("request %d: %+v, %v; want admitted", i, res, err)
		}
	}
	for i := range 5 {
		res, err := l.Allow(ctx, 1, layers[0].For("k"), layers[1].For("k"))
		if err != nil || res.Allowed || len(res.Rules) != 2 {
			t.Fatalf("denied request %d: %+v, %v; want denied, with a Result per Rule", i, res, err)
		}
		rs := res.Rules
		if rs[1].Allowed || rs[0].Granted != 0 || rs[1].Granted != 0 {
			t.Fatalf("denied request %d: %+v; want the hourly layer to deny, nothing granted", i, res)
		}
		if rs[0].Remaining != 7 {
			t.Fatalf("denied request %d: the per-minute layer reports %d remaining, want 7: a denial took from it", i, rs[0].Remaining)
		}
	}
	// The per-minute layer kept its 7: a plain decision sees them.
	if r, err := l.Allow(ctx, 7, layers[0].For("k")); err != nil || !r.Allowed {
		t.Errorf("AllowN(7) on layer 0 = %+v, %v; want admitted", r, err)
	}
}

// allowOne decides one request of key under limit in the sketch alone.
func (s *sketch) allowOne(key string, limit Limit, n int, atMost bool, now time.Time) (Result, error) {
	pl, err := newPlan([]Limit{limit}, layer0, layer0, false)
	if err != nil {
		return Result{}, err
	}
	mode := modeConsume
	if atMost {
		mode = modeAtMost
	}
	var out [1]Result
	err = s.decide([]string{key}, &request{key: key, pl: pl, n: n, mode: mode}, now, out[:])
	return out[0], err
}

// TestFallbackShareBelowOneUnitServed backs WithLocalFallback's bounds
// for a share below one unit (docs/limits.md, "The local fallback") and
// Concurrency's local rule. 10 per minute on 20 instances (half a unit
// each) was refused with Redis' error before (issue 34: under FailOpen,
// 115,972 of 115,972 requests were served with no limit): now each
// instance admits one unit per 2 minutes, and says so in RetryAfter.
// InFlight(1) on 20 instances holds one permit here, which a Refund gives
// back; InFlight(100), 5.
func TestFallbackShareBelowOneUnitServed(t *testing.T) {
	ctx := context.Background()
	l := downLimiter(t, 20, 16)
	small := Limit{Algorithm: SlidingWindow, Rate: 10, Period: time.Minute}
	if r, err := l.Allow(ctx, 1, small.For("k")); err != nil || !r.Allowed || !r.Fallback {
		t.Fatalf("first Allow: %+v, %v; want admitted in process", r, err)
	}
	r, err := l.AllowAtMost(ctx, 3, small.For("k"))
	if err != nil || r.Allowed || !r.Fallback || r.RetryAfter < time.Minute || r.RetryAfter > 2*time.Minute {
		t.Errorf("AllowAtMost(3) after it: %+v, %v; want refused for up to 2 minutes (a unit per 20 x 1m / 10)", r, err)
	}
	if r, err := l.AllowAtMost(ctx, 3, small.For("other")); err != nil || r.Granted != 1 {
		t.Errorf("AllowAtMost(3) of a fresh key: %+v, %v; want 1 granted", r, err)
	}
	for _, tc := range []struct{ rate, share int }{{1, 1}, {100, 5}} {
		key := fmt.Sprint("p", tc.rate)
		var held []Result
		for range tc.share {
			r, err := l.Allow(ctx, 1, InFlight(tc.rate).For(key))
			if err != nil || !r.Allowed || !r.Fallback {
				t.Fatalf("InFlight(%d): %+v, %v; want a permit in process", tc.rate, r, err)
			}
			held = append(held, r)
		}
		if r, err := l.Allow(ctx, 1, InFlight(tc.rate).For(key)); err != nil || r.Allowed || r.RetryAfter <= 0 {
			t.Errorf("InFlight(%d) beyond %d: %+v, %v; want refused", tc.rate, tc.share, r, err)
		}
		if r, err := l.Renew(ctx, held[0]); err != nil || !r.Allowed {
			t.Errorf("Renew of a fallback permit: %+v, %v; want kept", r, err)
		}
		if err := l.Refund(ctx, held[0]); err != nil {
			t.Errorf("Refund of a fallback permit: %v", err)
		}
		if r, err := l.Allow(ctx, 1, InFlight(tc.rate).For(key)); err != nil || !r.Allowed {
			t.Errorf("InFlight(%d) after a Refund: %+v, %v; want the permit back", tc.rate, r, err)
		}
	}
}

// TestFallbackEveryAlgorithmNamesItsBound fails when an algorithm's row
// (algorithm.go) leaves out what the local fallback holds its keys to: a
// new rate algorithm would otherwise be held to the permits rule without
// anyone deciding so. Only an algorithm whose requests name permits
// (Concurrency) gets the permits rule.
func TestFallbackEveryAlgorithmNamesItsBound(t *testing.T) {
	for _, a := range Algorithms() {
		row := &algorithms[a]
		if row.ids != (row.local == localPermits) {
			t.Errorf("%v: ids %v, local fallback bound %d: want localBucket or localWindow exactly for the algorithms without permits",
				a, row.ids, row.local)
		}
	}
	if calendarWindow.local != localWindow {
		t.Errorf("calendar windows: local fallback bound %d, want localWindow", calendarWindow.local)
	}
}
