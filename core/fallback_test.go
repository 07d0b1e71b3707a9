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
					r, err := l.Allow(ctx, fmt.Sprintf("rotating:%d", k), limit)
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

// TestFallbackCostAboveShare: a cost above the instance's share can never
// pass in fallback, so it is refused at once with ErrInvalidCost, not
// denied with a RetryAfter that Wait would loop on.
func TestFallbackCostAboveShare(t *testing.T) {
	ctx := context.Background()
	l := downLimiter(t, 4, 10)
	limit := PerSecond(100) // share 25
	if r, err := l.AllowN(ctx, "k", limit, 25); err != nil || !r.Allowed {
		t.Fatalf("AllowN(25) = %+v, %v; want admitted", r, err)
	}
	if _, err := l.AllowN(ctx, "k", limit, 26); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("AllowN(26) above the share = %v, want ErrInvalidCost", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := l.WaitN(wctx, "k", limit, 26); !errors.Is(err, ErrInvalidCost) || time.Since(start) > time.Second {
		t.Errorf("WaitN(26) = %v after %v; want ErrInvalidCost at once", err, time.Since(start))
	}
	if _, err := l.AllowLayers(ctx, "k", []Limit{PerSecond(1000), limit}, 26); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("AllowLayers(26) above layer 1's share = %v, want ErrInvalidCost", err)
	}
}

// TestFallbackLayersAllOrNothing: in fallback, as in Redis, a layered
// request that one layer denies takes nothing from the others.
func TestFallbackLayersAllOrNothing(t *testing.T) {
	ctx := context.Background()
	l := downLimiter(t, 1, 10)
	layers := []Limit{PerMinute(10), PerHour(3)}
	for i := range 3 {
		rs, err := l.AllowLayers(ctx, "k", layers, 1)
		if err != nil || !rs[0].Allowed || !rs[1].Allowed || rs[0].Granted != 1 {
			t.Fatalf("request %d: %+v, %v; want admitted", i, rs, err)
		}
	}
	for i := range 5 {
		rs, err := l.AllowLayers(ctx, "k", layers, 1)
		if err != nil || rs[1].Allowed || rs[0].Granted != 0 || rs[1].Granted != 0 {
			t.Fatalf("denied request %d: %+v, %v; want the hourly layer to deny, nothing granted", i, rs, err)
		}
		if rs[0].Remaining != 7 {
			t.Fatalf("denied request %d: the per-minute layer reports %d remaining, want 7: a denial took from it", i, rs[0].Remaining)
		}
	}
	// The per-minute layer kept its 7: a plain decision sees them.
	if r, err := l.AllowN(ctx, "k", layers[0], 7); err != nil || !r.Allowed {
		t.Errorf("AllowN(7) on layer 0 = %+v, %v; want admitted", r, err)
	}
}

// allowOne decides one request of key under limit in the sketch alone.
func (s *sketch) allowOne(key string, limit Limit, n int, atMost bool, now time.Time) (Result, error) {
	pl, err := newPlan([]Limit{limit}, layer0)
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
