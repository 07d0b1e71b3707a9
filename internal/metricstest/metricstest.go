// Package metricstest drives a real httplimit.Policy for the tests of the
// metrics packages, so each checks its exporter against the same decisions.
package metricstest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Series names the series PolicyRun checks, in the exporter's own notation
// (each with the labels policy="api", algorithm="token_bucket" and, for
// decisions, outcome).
type Series struct {
	Allowed, Denied, FailedOpen, RedisErrors, Duration string
}

// PolicyRun decides four requests with a Policy named "api" of 2 per second
// on miniredis, Redis closed before the last, and after each checks the
// series that read returns: two allowed, one denied, one failed open with
// one Redis error, and one duration sample per decision.
func PolicyRun(t *testing.T, obs httplimit.Observer, s Series, read func(t *testing.T) map[string]float64) {
	t.Helper()
	mr, rdb := redistest.Mini(t)
	// A patient timeout: the first call loads the script into miniredis'
	// Lua, which under -race on a busy machine can outlast the default
	// 50ms. Redis closed fails at once (connection refused).
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p, err := httplimit.New(httplimit.Config{Name: "api", Limiter: l, Limit: core.PerSecond(2), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	r := request{t.Context()}
	steps := []struct {
		name    string
		before  func()
		outcome httplimit.Outcome
		want    map[string]float64
	}{
		{"first", nil, httplimit.OutcomeAllowed, map[string]float64{s.Allowed: 1, s.Denied: 0, s.FailedOpen: 0, s.RedisErrors: 0, s.Duration: 1}},
		{"second", nil, httplimit.OutcomeAllowed, map[string]float64{s.Allowed: 2, s.Denied: 0, s.FailedOpen: 0, s.RedisErrors: 0, s.Duration: 2}},
		{"third", nil, httplimit.OutcomeDenied, map[string]float64{s.Allowed: 2, s.Denied: 1, s.FailedOpen: 0, s.RedisErrors: 0, s.Duration: 3}},
		{"redis gone", mr.Close, httplimit.OutcomeFailedOpen, map[string]float64{s.Allowed: 2, s.Denied: 1, s.FailedOpen: 1, s.RedisErrors: 1, s.Duration: 4}},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		d := p.Decide(r)
		if d.Outcome != st.outcome {
			t.Fatalf("%s: Outcome = %v (err %v), want %v", st.name, d.Outcome, d.Err, st.outcome)
		}
		got := read(t)
		for k, w := range st.want {
			if g := got[k]; g != w {
				t.Errorf("%s: %s = %v, want %v", st.name, k, g, w)
			}
		}
	}
}

// request is an httplimit.Request from one client.
type request struct{ ctx context.Context }

func (r request) Context() context.Context  { return r.ctx }
func (r request) RemoteAddr() string        { return "192.0.2.1:1234" }
func (r request) Header(name string) []string { return nil }
func (r request) Method() string            { return "GET" }
func (r request) Route() string             { return "/" }

// ErrRedis is a Redis failure for events that report one.
var ErrRedis = errors.New("core: redis: connection refused")

// Match reports every series of want that got does not have at that value,
// and every nonzero series got has that want does not name (histogram sums
// aside: their values are checked only where want names them).
func Match(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && g != 0 && !strings.Contains(k, "_sum{") {
			t.Errorf("unexpected series %s = %v", k, g)
		}
	}
}

// EvictingLimiter returns a Limiter on a redis-server of its own started
// with a maxmemory and maxmemory-policy volatile-lru, which may evict the
// Limiter's keys: its Health says so once Ping has run.
func EvictingLimiter(t *testing.T) *core.Limiter {
	t.Helper()
	s := redistest.StartServer(t, "--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru")
	l, err := core.New(s.Client(t, nil), core.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if h, err := l.Ping(t.Context()); err != nil || !h.MayEvict {
		t.Fatalf("Ping on a volatile-lru Redis: %+v, %v; want MayEvict", h, err)
	}
	return l
}
