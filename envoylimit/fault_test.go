package envoylimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestRedisDown: a request the Limiter cannot decide is refused, or with
// EnvoyFailureMode answered UNAVAILABLE for Envoy to decide; one the
// Limiter's fallback decides is answered as it decided. Each is counted
// as a Redis error.
func TestRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	fast := []core.Option{core.WithTimeout(100 * time.Millisecond), core.WithBreaker(0, 0)}
	reg := prometheus.NewRegistry()
	closed := start(t, rdb, map[string]string{"s.yaml": simple}, Config{Metrics: reg}, fast...)
	envoy := start(t, rdb, map[string]string{"s.yaml": simple}, Config{EnvoyFailureMode: true}, fast...)
	local := start(t, rdb, map[string]string{"s.yaml": simple}, Config{}, append(fast, core.WithLocalFallback(1, 100))...)
	for _, r := range []*rig{closed, envoy, local} {
		if got := spell(r.ask(t, "s", d("k=a"))); got != "OK; OK 9/10" {
			t.Fatalf("with Redis up: %s", got)
		}
	}
	srv.Kill()
	if got := spell(closed.ask(t, "s", d("k=a"), d("unknown=1"))); got != "OVER; OVER 0/10; OK" {
		t.Errorf("Redis down, by default: %s; want refused", got)
	}
	if got := testutil.ToFloat64(closed.srv.metrics.errors.WithLabelValues("redis_error")); got != 1 {
		t.Errorf("should_rate_limit_error{err_type=redis_error} = %v, want 1", got)
	}
	if _, err := envoy.try("s", 0, d("k=a")); status.Code(err) != codes.Unavailable {
		t.Errorf("Redis down, EnvoyFailureMode: %v; want UNAVAILABLE", err)
	}
	// The fallback's share is this one instance's: the whole limit, about
	// half of it at once (core.WithLocalFallback).
	n := 0
	for range 12 {
		if resp := local.ask(t, "s", d("k=a")); resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			n++
		}
	}
	if n < 1 || n > 10 {
		t.Errorf("Redis down, local fallback: %d of 12 admitted; want the fallback's bound, 1 to 10", n)
	}
	if got := spell(closed.ask(t, "s", d("unknown=1"))); got != "OK; OK" {
		t.Errorf("Redis down, no limit to ask: %s", got)
	}
}

// TestCanceled: a caller that gives up gets its own status back, and the
// request counts nowhere it was not admitted.
func TestCanceled(t *testing.T) {
	_, rdb := redistest.Mini(t)
	r := start(t, rdb, map[string]string{"s.yaml": simple}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "s", Descriptors: []*rlv3.RateLimitDescriptor{d("k=a")}})
	if status.Code(err) != codes.Canceled {
		t.Errorf("a canceled call: %v; want Canceled", err)
	}
}

// TestAllOrNothingConcurrent: many clients at once, each request naming a
// shared key and a key of its client's, the shared one with a different
// hits_addend so that a request is two calls of the Limiter: exactly as
// many units as the shared limit holds are admitted, and each client's key
// counts exactly its client's admitted requests, none of the refused.
func TestAllOrNothingConcurrent(t *testing.T) {
	for _, tt := range []struct {
		name string
		rdb  func(testing.TB) redis.UniversalClient
	}{
		{"miniredis", func(t testing.TB) redis.UniversalClient { _, c := redistest.Mini(t); return c }},
		{"redis", func(t testing.TB) redis.UniversalClient { return redistest.Real(t) }},
		{"cluster", func(t testing.TB) redis.UniversalClient { return redistest.Cluster(t) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rdb := tt.rdb(t)
			clearOfHourEnd(t, rdb)
			r := start(t, rdb, map[string]string{"c.yaml": `domain: c
descriptors:
  - key: shared
    rate_limit: {unit: hour, requests_per_unit: 300}
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1000}
`}, Config{})
			const clients, each = 16, 40
			var admitted [clients]atomic.Int64
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					for range each {
						resp, err := r.try("c", 0, d(fmt.Sprintf("client=%d+1", c)), d("shared=all+3")) // the client's call first: a refusal gives it back
						if err != nil {
							t.Error(err)
							return
						}
						if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
							admitted[c].Add(1)
						}
					}
				})
			}
			wg.Wait()
			var total int64
			for c := range clients {
				n := admitted[c].Load()
				total += n
				if got := r.ask(t, "c", d(fmt.Sprintf("client=%d+0", c))).GetStatuses()[0].GetLimitRemaining(); int64(1000-got) != n {
					t.Errorf("client %d: %d admitted, its key counts %d", c, n, 1000-got)
				}
			}
			if total != 100 {
				t.Errorf("%d requests of 3 units admitted under a limit of 300; want exactly 100", total)
			}
		})
	}
}
