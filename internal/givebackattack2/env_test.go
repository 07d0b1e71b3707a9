package givebackattack2

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// env is a miniredis whose clock only the test moves (redistest.SetTime:
// a step forward also counts TTLs down; a step back moves the clock only),
// and Limiters on it.
type env struct {
	t   *testing.T
	mr  *miniredis.Miniredis
	t0  time.Time
	now time.Duration
	log []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	mr, _ := redistest.Mini(t)
	e := &env{t: t, mr: mr, t0: redistest.Epoch.Add(250 * time.Millisecond)}
	redistest.SetTime(mr, e.t0)
	return e
}

// client is a fresh client of e's miniredis (db: its database).
func (e *env) client(db int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.mr.Addr(), DB: db, ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: time.Minute})
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// limiter is a Limiter on rdb with prefix, no fallback, no breaker.
func (e *env) limiter(rdb redis.UniversalClient, prefix string, extra ...core.Option) *core.Limiter {
	e.t.Helper()
	opts := append([]core.Option{core.WithPrefix(prefix), core.WithLogger(nil), core.WithLocalFallback(0, 0),
		core.WithBreaker(0, 0), core.WithTimeout(time.Minute)}, extra...)
	l, err := core.New(rdb, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

// at sets the clock to t0 + d: forward or back.
func (e *env) at(d time.Duration) {
	e.now = d
	redistest.SetTime(e.mr, e.t0.Add(d))
}

func (e *env) adv(d time.Duration) { e.at(e.now + d) }

func (e *env) logf(format string, args ...any) {
	e.log = append(e.log, fmt.Sprintf("t=%v ", e.now)+fmt.Sprintf(format, args...))
}

func (e *env) history() string { return strings.Join(e.log, "\n") }

// allow is l.Allow that must not fail.
func (e *env) allow(l *core.Limiter, n int, rules ...core.Rule) core.Result {
	e.t.Helper()
	r, err := l.Allow(context.Background(), n, rules...)
	if err != nil {
		e.t.Fatal(err)
	}
	var keys []string
	for _, r := range rules {
		keys = append(keys, r.Key)
	}
	e.logf("take %d from %v: allowed %v, Remaining %d", n, keys, r.Allowed, r.Remaining)
	if !r.Allowed {
		e.t.Fatalf("take %d from %v denied\n%s", n, keys, e.history())
	}
	return r
}

// above compares user with twin, read under lim in one call, and returns
// by how many units (Remaining) and scaled µs (ResetAfter) user stands
// above twin, the state without the units given back (0, 0: not above).
func above(t *testing.T, l *core.Limiter, lim core.Limit, user, twin string) (units int, level time.Duration, u, w core.Result) {
	t.Helper()
	r, err := l.Peek(context.Background(), lim.For(user), lim.For(twin))
	if err != nil {
		t.Fatal(err)
	}
	u, w = r.Rules[0], r.Rules[1]
	return u.Remaining - w.Remaining, w.ResetAfter - u.ResetAfter, u, w
}

// check fails t when user stands above twin.
func (e *env) check(l *core.Limiter, lim core.Limit, user, twin, what string) int {
	e.t.Helper()
	units, lvl, u, w := above(e.t, l, lim, user, twin)
	if units > 0 || lvl > 0 {
		e.t.Errorf("%s: %s at Remaining %d (ResetAfter %v), %d units above %s, the state without the units given back, at Remaining %d (ResetAfter %v)\n%s",
			what, user, u.Remaining, u.ResetAfter, units, twin, w.Remaining, w.ResetAfter, e.history())
	}
	return units
}

var buckets = []core.Algorithm{core.TokenBucket, core.LeakyBucket}
