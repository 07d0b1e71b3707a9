// Package metricstest drives a real httplimit.Policy for the tests of the
// metrics packages, so each checks its exporter against the same decisions.
package metricstest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttplimit"
)

// Series names the series PolicyRun checks, in the exporter's own notation
// (each with the labels policy="api", algorithm="token_bucket" and, for
// decisions, outcome; Denied also refused_by="0", the Limit).
type Series struct {
	Allowed, Denied, FailedOpen, NearLimit, RedisErrors, Duration string
}

// PolicyRun decides four requests with a Policy named "api" of 2 per second
// on miniredis, Redis closed before the last, and after each checks the
// series that read returns: two allowed, the second near the limit (none
// left of 2), one denied, one failed open with one Redis error, and one
// duration sample per decision.
func PolicyRun(t *testing.T, obs httplimit.Observer, s Series, read func(t *testing.T) map[string]float64) {
	t.Helper()
	mr, rdb := redistest.Mini(t)
	// A patient timeout: the first call loads the script into miniredis'
	// Lua, which under -race on a busy machine can outlast the default
	// 100ms. Redis closed fails at once (connection refused). The local
	// fallback is off: the failed-open series is what this checks.
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second), core.WithLocalFallback(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	p, err := httplimit.New(httplimit.Config{Name: "api", Limiter: l, Limit: core.PerSecond(2), Observers: []httplimit.Observer{obs}})
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
		{"first", nil, httplimit.OutcomeAllowed, map[string]float64{s.Allowed: 1, s.Denied: 0, s.FailedOpen: 0, s.NearLimit: 0, s.RedisErrors: 0, s.Duration: 1}},
		{"second", nil, httplimit.OutcomeAllowed, map[string]float64{s.Allowed: 2, s.Denied: 0, s.FailedOpen: 0, s.NearLimit: 1, s.RedisErrors: 0, s.Duration: 2}},
		{"third", nil, httplimit.OutcomeDenied, map[string]float64{s.Allowed: 2, s.Denied: 1, s.FailedOpen: 0, s.NearLimit: 1, s.RedisErrors: 0, s.Duration: 3}},
		{"redis gone", mr.Close, httplimit.OutcomeFailedOpen, map[string]float64{s.Allowed: 2, s.Denied: 1, s.FailedOpen: 1, s.NearLimit: 1, s.RedisErrors: 1, s.Duration: 4}},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		d := Serve(p, r)
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

func (r request) Context() context.Context    { return r.ctx }
func (r request) RemoteAddr() string          { return "192.0.2.1:1234" }
func (r request) Header(name string) []string { return nil }
func (r request) Method() string              { return "GET" }
func (r request) Route() string               { return "/" }

// ErrRedis is a Redis failure for events that report one: as core's,
// it matches core.ErrUnavailable.
var ErrRedis = fmt.Errorf("%w: connection refused", core.ErrUnavailable)

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

// Outcomes are the names of every httplimit.Outcome, read from String
// (which names an undefined one "Outcome(N)"): what a help text that
// lists the outcomes must name.
func Outcomes() []string {
	var names []string
	for o := httplimit.Outcome(0); !strings.HasPrefix(o.String(), "Outcome("); o++ {
		names = append(names, o.String())
	}
	return names
}

// NearLimitCase is a decision and whether the near-limit count takes it.
type NearLimitCase struct {
	Name     string
	Decision httplimit.Decision // of policy "api"
	Near     bool
}

// NearLimitCases pin the rule both exporters document: an allowed
// request counts when 5 × Result.Remaining <= Decision.Limit's capacity.
var NearLimitCases = []NearLimitCase{
	{"capacity 10, 3 left", allowed(core.PerMinute(10), 3), false},
	{"capacity 10, 2 left: the edge counts", allowed(core.PerMinute(10), 2), true},
	{"capacity 10, none left", allowed(core.PerMinute(10), 0), true},
	{"capacity 4, 1 left", allowed(core.PerMinute(4), 1), false},
	{"capacity 4, none left", allowed(core.PerMinute(4), 0), true},
	{"the capacity is the Burst: 20 of rate 1, 5 left", allowed(core.Limit{Rate: 1, Period: time.Second, Burst: 20}, 5), false},
	{"the capacity is the Burst: 20 of rate 1, 4 left", allowed(core.Limit{Rate: 1, Period: time.Second, Burst: 20}, 4), true},
	{"leaky bucket, queue 4 of 5 full", allowed(core.Limit{Algorithm: core.LeakyBucket, Rate: 5, Period: time.Second}, 1), true},
	{"a large capacity, a fifth left", allowed(core.PerSecond(5_000_000), 1_000_000), true},
	{"a large capacity, a fifth and one left", allowed(core.PerSecond(5_000_000), 1_000_001), false},
	{"denied", with(allowed(core.PerMinute(10), 0), httplimit.OutcomeDenied, core.Result{RetryAfter: time.Second}), false},
	{"refused for its InFlight permit", with(allowed(core.PerMinute(10), 1), httplimit.OutcomeInFlight, core.Result{Remaining: 1, RetryAfter: time.Second}), false},
	{"canceled while it waited", with(allowed(core.PerMinute(10), 0), httplimit.OutcomeCanceled, core.Result{Allowed: true, Delay: time.Second}), false},
	{"failed open", with(allowed(core.PerMinute(10), 0), httplimit.OutcomeFailedOpen, core.Result{}), false},
	{"a fallback decision: this instance's share", with(allowed(core.PerMinute(10), 0), httplimit.OutcomeAllowed, core.Result{Allowed: true, Granted: 1, Fallback: true}), false},
	{"no Limit (a Decision made by hand)", allowed(core.Limit{}, 0), false},
}

func allowed(l core.Limit, remaining int) httplimit.Decision {
	return httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed, Limit: l,
		Result: core.Result{Allowed: true, Granted: 1, Remaining: remaining}}
}

func with(d httplimit.Decision, o httplimit.Outcome, r core.Result) httplimit.Decision {
	d.Outcome, d.Result = o, r
	return d
}

// NearLimitRun decides 12 requests of one client with a Policy named "api"
// of 10 per minute (a token bucket: capacity 10) and InFlight 1, on a
// miniredis whose clock stands still, and after each checks near, the
// exporter's near-limit series: the requests that leave 9 to 3 units do
// not count, those that leave 2, 1 and 0 do; a request refused for its
// InFlight permit does not, nor does the denial at the end.
func NearLimitRun(t *testing.T, obs httplimit.Observer, near string, read func(t *testing.T) map[string]float64) {
	t.Helper()
	_, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	last := new(LastDecision)
	p, err := httplimit.New(httplimit.Config{Name: "api", Limiter: l, Limit: core.PerMinute(10), InFlight: 1, Observers: []httplimit.Observer{obs, last}})
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		outcome   httplimit.Outcome
		remaining int  // when allowed
		hold      bool // keep the request in flight
		release   bool // the held request ends first
		near      float64
	}
	var steps []step
	for left := 9; left >= 3; left-- {
		steps = append(steps, step{httplimit.OutcomeAllowed, left, false, false, 0})
	}
	steps = append(steps,
		step{httplimit.OutcomeAllowed, 2, true, false, 1},
		step{httplimit.OutcomeInFlight, 0, false, false, 1},
		step{httplimit.OutcomeAllowed, 1, false, true, 2},
		step{httplimit.OutcomeAllowed, 0, false, false, 3},
		step{httplimit.OutcomeDenied, 0, false, false, 3},
	)
	r := request{t.Context()}
	var release func()
	for i, st := range steps {
		if st.release {
			release()
		}
		var d httplimit.Decision
		if st.hold {
			release = Hold(t, p, r)
			d = last.Get()
		} else {
			d = Serve(p, r)
		}
		if d.Outcome != st.outcome || st.outcome == httplimit.OutcomeAllowed && d.Result.Remaining != st.remaining {
			t.Fatalf("request %d: %v with %d left (err %v), want %v with %d", i+1, d.Outcome, d.Result.Remaining, d.Err, st.outcome, st.remaining)
		}
		if got := read(t)[near]; got != st.near {
			t.Errorf("request %d (%v, %d left): %s = %v, want %v", i+1, d.Outcome, d.Result.Remaining, near, got, st.near)
		}
	}
}

// DirectRun makes 70 decisions on l outside any Policy, then two calls
// with Redis (mr) closed, and returns what read then returns: 30 Allow of
// a token bucket of 20 (20 allowed, 5 of them near the limit, 10 denied),
// 10 AllowAtMost of a fixed window of 10 (10 allowed, 3 near), 20 Wait of
// a token bucket of 15 (15 allowed, 4 near; 5 denied, their deadline too
// near), 10 requests through a nethttplimit Transport named transport of
// 10 a minute (10 allowed, 3 near), then an Allow that fails (a Redis
// fault: failed_closed) and a Refund that fails. The exporter must have
// been given l (WithLimiter).
func DirectRun(t *testing.T, l *core.Limiter, mr *miniredis.Miniredis, read func(t *testing.T) map[string]float64, transport string) map[string]float64 {
	t.Helper()
	ctx := context.Background()
	var receipt core.Result
	for i := range 30 {
		r, err := l.Allow(ctx, 1, core.PerMinute(20).For("direct:allow"))
		if err != nil || r.Allowed != (i < 20) {
			t.Fatalf("Allow %d: %+v, %v", i, r, err)
		}
		if i == 0 {
			receipt = r
		}
	}
	for i := range 10 {
		if r, err := l.AllowAtMost(ctx, 1, core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Minute}.For("direct:atmost")); err != nil || !r.Allowed {
			t.Fatalf("AllowAtMost %d: %+v, %v", i, r, err)
		}
	}
	for i := range 20 {
		wctx, cancel := context.WithTimeout(ctx, time.Second) // miniredis' clock stands still: no token comes back
		r, err := l.Wait(wctx, 1, core.PerMinute(15).For("direct:wait"))
		cancel()
		if i < 15 && (err != nil || !r.Allowed) || i >= 15 && !errors.Is(err, core.ErrWaitExceedsDeadline) {
			t.Fatalf("Wait %d: %+v, %v", i, r, err)
		}
	}
	tr, err := nethttplimit.NewTransport(nethttplimit.TransportConfig{Limiter: l, Limit: core.PerMinute(10), Name: transport,
		Base: roundTrip(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		resp, err := (&http.Client{Transport: tr}).Get("http://api.example/")
		if err != nil {
			t.Fatalf("request %d through the Transport: %v", i, err)
		}
		_ = resp.Body.Close()
	}
	mr.Close()
	if _, err := l.Allow(ctx, 1, core.PerMinute(20).For("direct:allow")); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("Allow with Redis closed: %v, want ErrUnavailable", err)
	}
	if err := l.Refund(ctx, receipt); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("Refund with Redis closed: %v, want ErrUnavailable", err)
	}
	return read(t)
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Serve decides r under p as a middleware does, its handler answering 200
// at once.
func Serve(p *httplimit.Policy, r httplimit.Request) httplimit.Decision {
	return p.Serve(r, http.Header{}, func(context.Context, bool) int { return http.StatusOK })
}

// Hold serves r under p with a handler that runs, in flight, until the
// returned release has been called; r must proceed.
func Hold(t *testing.T, p *httplimit.Policy, r httplimit.Request) (release func()) {
	t.Helper()
	running, end, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		p.Serve(r, http.Header{}, func(context.Context, bool) int {
			close(running)
			<-end
			return http.StatusOK
		})
	}()
	select {
	case <-running:
	case <-done:
		t.Fatal("Hold: the request did not proceed")
	}
	return func() { close(end); <-done }
}

// LastDecision is an httplimit.Observer that keeps the last decision.
type LastDecision struct {
	mu sync.Mutex
	d  httplimit.Decision
}

func (o *LastDecision) Observe(d httplimit.Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.d = d
}

// Get returns the last decision observed.
func (o *LastDecision) Get() httplimit.Decision {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.d
}
