// Package redlimittest runs redlimit on an in-process Redis (miniredis)
// whose clock the test controls, so an application's limits are tested
// without a Redis server and without sleeping:
//
//	r := redlimittest.Start(t)
//	handler := newServer(r.NewLimiter()) // the application, with its policies
//	// ... five logins get 401, the sixth 429 ...
//	r.Advance(time.Minute) // the window passes, without waiting
//
// The scripts run on miniredis' Lua, which decides as Redis does; test
// against a real Redis too where Redis itself matters (timeouts, Cluster,
// memory).
package redlimittest

import (
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/clock"
)

// Epoch is where the clock of every Redis from Start begins: a fixed
// instant, so a test's numbers are the same on every run.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Redis is an in-process Redis for one test, with a clock that moves only
// when the test says so.
type Redis struct {
	tb  testing.TB
	mr  *miniredis.Miniredis
	rdb *redis.Client

	mu  sync.Mutex
	now time.Time
}

// Start starts a Redis whose clock stands at Epoch, and a client for it;
// both are closed when the test ends.
func Start(tb testing.TB) *Redis {
	tb.Helper()
	mr := miniredis.RunT(tb)
	mr.SetTime(Epoch)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = rdb.Close() })
	return &Redis{tb: tb, mr: mr, rdb: rdb, now: Epoch}
}

// Client is a client of r, for an application that makes its own Limiter
// or uses Redis for more than limits.
func (r *Redis) Client() *redis.Client { return r.rdb }

// NewLimiter returns a Limiter on r, with opts. It differs from
// core.New's defaults in five ways, so that a test sees each decision as
// it is made: no logger (core.WithLogger(nil)); no circuit breaker
// (core.WithBreaker(0, 0)), so decisions succeed again as soon as Up is
// called; a timeout of 5s (core.WithTimeout), since an in-process Lua
// under -race on a busy machine can be slower than the 100ms a real Redis
// is given; a local fallback of one instance (core.WithLocalFallback(1,
// 4096)), the test's process, not a fleet counted in the background,
// which a test that calls Down at once may beat; and r's clock as the
// application clock, so calendar Limits find their windows on it. Options
// given here come after those and override them. An invalid option fails
// the test.
func (r *Redis) NewLimiter(opts ...core.Option) *core.Limiter {
	r.tb.Helper()
	l, err := core.New(r.rdb, append([]core.Option{core.WithLogger(nil), core.WithBreaker(0, 0), core.WithTimeout(5 * time.Second),
		core.WithLocalFallback(1, 4096), clock.With[core.Option](r.Now)}, opts...)...)
	if err != nil {
		r.tb.Fatalf("redlimittest: %v", err)
	}
	return l
}

// Now is the time on r's clock.
func (r *Redis) Now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

// Advance moves r's clock forward by d, expiring the keys whose TTL ends
// on the way. Quotas refill and windows pass as if d had gone by. The
// Limiter's own memory (WithDenyCache, WithLeases, WithLocalFallback) runs
// on the process' clock, which Advance does not move: leave those off in
// tests that Advance.
func (r *Redis) Advance(d time.Duration) {
	if d < 0 {
		r.tb.Fatalf("redlimittest: Advance(%v): the clock never moves back", d)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = r.now.Add(d)
	r.mr.SetTime(r.now)
	r.mr.FastForward(d)
}

// Down makes every command fail, as an unreachable Redis would, until Up.
// The error is the one a replica without its master answers; the
// Limiter's local fallback then decides (httplimit.Config.FailClosed
// answers 503 instead), on the process' clock, which Advance does not
// move.
func (r *Redis) Down() { r.mr.SetError("MASTERDOWN redlimittest: Redis is down") }

// Up ends Down.
func (r *Redis) Up() { r.mr.SetError("") }
