package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// testRequest is the smallest Request: a peer address and headers.
type testRequest struct {
	ctx    context.Context
	remote string
	header http.Header
	route  string
}

func (r testRequest) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}
func (r testRequest) RemoteAddr() string          { return r.remote }
func (r testRequest) Header(name string) []string { return r.header.Values(name) }
func (r testRequest) Method() string              { return http.MethodGet }
func (r testRequest) Route() string               { return r.route }

// from is a request from ip, with headers as name, value pairs.
func from(ip string, kv ...string) testRequest {
	r := testRequest{remote: ip + ":40000", header: http.Header{}, route: "/v1/things"}
	for i := 0; i+1 < len(kv); i += 2 {
		r.header.Set(kv[i], kv[i+1])
	}
	return r
}

// decide decides r and returns the decision with the headers it writes.
func decide(p *Policy, r Request) (Decision, http.Header) {
	d := p.testDecide(r)
	h := http.Header{}
	d.writeHeaders(h)
	return d, h
}

// prefixOf is a key prefix unique to the test.
func prefixOf(t testing.TB) string {
	return fmt.Sprintf("rltest:%s:%d", t.Name(), time.Now().UnixNano())
}

// newLimiter is a quiet Limiter with a patient timeout: tests check
// decisions, not latency, on a machine that runs every package's tests at
// once. Its local fallback is off, so that a Redis fault reaches the fail
// policy; the tests of the fallback turn it on (opts come later).
func newLimiter(t testing.TB, rdb redis.UniversalClient, opts ...core.Option) *core.Limiter {
	t.Helper()
	base := []core.Option{core.WithLogger(nil), core.WithTimeout(10 * time.Second), core.WithPrefix(prefixOf(t)), core.WithLocalFallback(0, 0)}
	l, err := core.New(rdb, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mini is a Limiter on a fresh miniredis whose clock stands still.
func mini(t testing.TB) (*miniredis.Miniredis, *redis.Client, *core.Limiter) {
	mr, rdb := redistest.Mini(t)
	return mr, rdb, newLimiter(t, rdb)
}

func mustNew(t testing.TB, cfg Config) *Policy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ceilUnix is t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Second) - 1) / int64(time.Second)
}

// checkHeaders compares the headers named in want ("" = absent).
func checkHeaders(t *testing.T, step string, h http.Header, want map[string]string) {
	t.Helper()
	for name, w := range want {
		if got := h.Get(name); got != w {
			t.Errorf("%s: %s = %q, want %q", step, name, got, w)
		}
	}
}

// scripts is a redis.Hook that counts script calls.
type scripts struct{ n atomic.Int64 }

func (s *scripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" || name == "fcall" {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (s *scripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// observed records what an Observer is told.
type observed struct {
	mu        sync.Mutex
	decisions []Decision
}

func (o *observed) Observe(d Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.decisions = append(o.decisions, d)
}

// setter is a HeaderWriter that hands every Set to a function, and reads
// nothing back.
type setter func(name, value string)

func (s setter) Get(string) string      { return "" }
func (s setter) Set(name, value string) { s(name, value) }

// testDecide is the decision Serve makes, without its handler: the tests
// then drive attach and finish as Serve would.
func (p *Policy) testDecide(r Request) Decision { return p.decideRequest(r, 0, false) }

// testCheck is Check's decision, without writing headers.
func (p *Policy) testCheck(r Request, n int) Decision { return p.decideRequest(r, n, true) }

// countFailed counts the requests that failed: failed logins, say.
func countFailed(status int) bool { return status >= 400 }
