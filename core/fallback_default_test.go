package core

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// shipped is the default local fallback as New applies it, read before
// TestMain turns it off for the other suites.
var shipped = defaultFallback

// TestDefaultFallbackIsOn backs WithLocalFallback's "Default: on,
// instances learned, maxKeys 4096": a Limiter made with no option decides
// in process while Redis is down. Before issue 34 the default was off, and
// httplimit's default FailOpen served every such request with no limit.
func TestDefaultFallbackIsOn(t *testing.T) {
	if shipped == nil || shipped.instances != 0 || shipped.maxKeys != 4096 {
		t.Fatalf("default fallback %+v, want on, instances learned, 4096 keys", shipped)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	l := opsNew(t, rdb, WithLocalFallback(0, 4096))
	if got := l.fallback.instances.Load(); got != assumedFleet {
		t.Errorf("instances before Redis ever answered: %d, want the assumed %d", got, assumedFleet)
	}
	// PerMinute(10) among 64 assumed instances: one unit per 6.4 minutes.
	ctx := context.Background()
	r, err := l.Allow(ctx, 1, PerMinute(10).For("k"))
	if err != nil || !r.Allowed || !r.Fallback {
		t.Fatalf("first Allow with Redis down: %+v, %v; want admitted in process", r, err)
	}
	if r, err = l.Allow(ctx, 1, PerMinute(10).For("k")); err != nil || r.Allowed || r.RetryAfter < 6*time.Minute {
		t.Errorf("second Allow: %+v, %v; want refused for 6.4 minutes", r, err)
	}
	off := opsNew(t, rdb, WithLocalFallback(0, 0))
	if _, err := off.Allow(ctx, 1, PerMinute(10).For("k")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("WithLocalFallback(0, 0) with Redis down: %v, want ErrUnavailable (the fail policy's)", err)
	}
}

// TestDefaultFallbackLearnsFleet backs "0 learns it from Redis while Redis
// answers" (WithLocalFallback): three Limiters on one Redis each count
// three, the fleet's key expires (no key lives for ever), and a Limiter
// closed leaves the fleet at the others' next count.
func TestDefaultFallbackLearnsFleet(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	var fleet []*Limiter
	for range 3 {
		fleet = append(fleet, opsNew(t, rdb, WithLocalFallback(0, 16)))
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for _, l := range fleet {
		for l.fallback.instances.Load() != 3 || l.fleet == nil {
			if time.Now().After(deadline) {
				t.Fatalf("instances %d, want 3 learned", l.fallback.instances.Load())
			}
			l.fleet.count(ctx, rdb, l.fallback)
		}
	}
	if ttl := mr.TTL("ratelimit:fleet"); ttl <= 0 || ttl > fleetTTL {
		t.Errorf("fleet key TTL %v, want within (0, %v]", ttl, fleetTTL)
	}
	_ = fleet[2].Close()
	for fleet[0].fallback.instances.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after a Close: instances %d, want 2", fleet[0].fallback.instances.Load())
		}
		fleet[0].fleet.count(ctx, rdb, fleet[0].fallback)
	}
	mr.FastForward(fleetTTL + time.Second)
	if mr.Exists("ratelimit:fleet") {
		t.Errorf("the fleet's key outlived its TTL")
	}
}

// TestDegradedLoggedOncePerSecond backs "logged at most once a second per
// reason" (docs/operations.md): on a controlled clock, a thousand
// decisions without Redis in one second log one line per reason, and the
// next second's line says how many went unlogged.
func TestDegradedLoggedOncePerSecond(t *testing.T) {
	logs := &records{}
	log := slog.New(logs)
	l := &Limiter{log: func() *slog.Logger { return log }}
	at := time.Unix(1e9, 0)
	l.degraded.now = func() time.Time { return at }
	for i := range 1000 {
		at = at.Add(time.Millisecond / 2)
		l.degraded.note(l, i%2, errDown)
	}
	wantRecords(t, logs.take(), "WARN redis did not decide", "WARN redis did not decide")
	at = at.Add(time.Second)
	l.degraded.note(l, degradedFallback, errDown)
	wantRecords(t, logs.take(), "WARN redis did not decide")
	if got := l.degraded.missed[degradedError].Load(); got != 499 {
		t.Errorf("unlogged errors: %d, want 499", got)
	}
}
