// Package conformance is the shared behaviour suite of the HTTP adapters:
// one table of scenarios (statuses, each header, body bytes, which keys
// Redis saw), written once, that every adapter runs through its framework's
// own test facility by plugging in an Adapter.
//
// Run runs the table on miniredis (controlled clock) and, when REDIS_URL is
// set, on that real Redis (skipped with a message otherwise, failed under
// CI).
package conformance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Req is what the framework-typed hooks of a scenario read. Each adapter
// builds it from its own request type inside its own hook types
// (func(*gin.Context) ..., func(echo.Context) ...), so the scenarios exercise
// each adapter's glue between those hooks and httplimit.
type Req struct {
	// Path is the URL path.
	Path string
	// Header returns a request header, "" if absent.
	Header func(name string) string
}

// Config is one middleware's configuration: the shared httplimit.Config,
// and hooks in the vocabulary of the scenarios that each adapter maps onto
// its framework (see Adapter).
type Config struct {
	// Config is the Policy's; Run sets its Limiter and Observers.
	httplimit.Config

	// KeyFunc keys through the framework: its own key hook where it has
	// one (Fiber's KeyGenerator, Echo's IdentifierExtractor), else a
	// KeyFunc that reads the framework's request (ginlimit.Context, ...).
	KeyFunc func(Req) (string, error)
	// LimitFunc and Cost read the framework's request through the
	// adapter's accessor.
	LimitFunc func(Req) (core.Limit, bool)
	Cost      func(Req) int
	// Skip is the adapter's own skip hook (Next, Skipper, WithSkip).
	Skip func(Req) bool
	// Deny is the adapter's own deny hook: it answers with the status and
	// body it returns (as text/plain).
	Deny func(Req, httplimit.Decision) (status int, body string)
	// Check is the Policy of GET /upload, whose handler calls the adapter's
	// Check at the cost of its X-Cost header; Run sets its Limiter.
	Check *httplimit.Config
	// Inside is what the handler of GET /inside answers: Run makes it a
	// request through the same app (from the same peer, to GET /), so that
	// a limit on requests in flight sees the outer one hold its permit.
	Inside func() string
}

// Policies compiles cfg into the Policy of the middleware (the hooks
// mapped through native, the adapter's accessor; KeyFunc only when the
// adapter has no key hook of its own) and the Policy of GET /upload.
func Policies(t *testing.T, cfg Config, native func(httplimit.Request) Req, keyHook bool) (mw, check *httplimit.Policy) {
	t.Helper()
	hc := cfg.Config
	if f := cfg.KeyFunc; f != nil && !keyHook {
		hc.Key = func(r httplimit.Request) (string, error) { return f(native(r)) }
	}
	if f := cfg.LimitFunc; f != nil {
		hc.LimitFunc = func(r httplimit.Request, _ string) (core.Limit, bool) { return f(native(r)) }
	}
	if f := cfg.Cost; f != nil {
		hc.Cost = func(r httplimit.Request) int { return f(native(r)) }
	}
	mw, err := httplimit.New(hc)
	if err != nil {
		t.Fatalf("httplimit.New: %v", err)
	}
	cc := httplimit.Config{Limiter: hc.Limiter, Name: "upload", Limit: core.PerMinute(1000)}
	if cfg.Check != nil {
		cc = *cfg.Check
		cc.Limiter = hc.Limiter
	}
	cc.Observers = hc.Observers
	if check, err = httplimit.New(cc); err != nil {
		t.Fatalf("httplimit.New (check): %v", err)
	}
	return mw, check
}

// RoundTrip serves one request through the adapter's app and returns the
// response with its body readable.
type RoundTrip func(*http.Request) *http.Response

// Adapter plugs a framework into the suite.
type Adapter struct {
	// New builds an app with the middlewares of cfgs (their Policies, see
	// Policies) chained in front of each limited route, cfgs[0] outermost.
	// The limited routes, in the framework's own syntax: GET / (and HEAD /,
	// through the same handler, as the framework serves a HEAD of a GET
	// route), GET /search, GET /healthz and GET /items/:id, and /any for
	// every method (the framework's any-method route: ServeMux's pattern
	// without a method, Any, All), each answering 200 "ok"; GET /login,
	// answering 401 "bad password"; GET /spend, whose handler reports the
	// cost in its X-Used header with Policy.ReportCost to cfgs[0]'s
	// Policy and answers 200 "ok", or 200 "unsettled" when ReportCost
	// returns false; GET /inside, answering 200 with what cfgs[0].Inside
	// returns; GET /panic, whose handler panics, and which the app answers
	// 500 "panicked" from a recover of its own outside the middleware (as
	// a framework's recovery middleware would). Without the middleware:
	// GET /upload, whose handler calls the adapter's Check with cfgs[0]'s
	// check Policy at the cost in X-Cost and answers 200 "stored" when it
	// passes, and GET /reset, whose handler calls the adapter's Reset with
	// cfgs[0]'s Policy and answers 204. It returns how to serve
	// a request through the app, with the framework's own test facility;
	// the request's context must reach the middleware as the request
	// context httplimit sees.
	New func(t *testing.T, cfgs []Config) RoundTrip
	// ItemsPattern is the framework's spelling of the route pattern of
	// GET /items/:id ("/items/{id}" for net/http), and RoutePrefix what
	// its patterns of GET routes begin with as the middleware sees them
	// ("GET " for net/http's ServeMux, where a pattern may name a method).
	ItemsPattern, RoutePrefix string
}

// Run runs every scenario against a, on miniredis and on real Redis.
func Run(t *testing.T, a Adapter) {
	t.Run("miniredis", func(t *testing.T) {
		for _, sc := range Scenarios {
			t.Run(sc.Name, func(t *testing.T) {
				t.Parallel()
				runScenario(t, a, sc, newMini(t, sc.stops()))
			})
		}
	})
	t.Run("redis", func(t *testing.T) {
		rdb := realRedis(t)
		for _, sc := range Scenarios {
			t.Run(sc.Name, func(t *testing.T) {
				t.Parallel()
				runScenario(t, a, sc, newReal(t, rdb, sc.stops()))
			})
		}
	})
}

// recorder collects what the Observer was told.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Observe(d httplimit.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, d.Outcome.String())
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	events := r.events
	r.events = nil
	return events
}

// limitHeaders are the headers the middleware may write; a step lists
// those it expects, and every other one must be absent.
var limitHeaders = []string{
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After",
}

func runScenario(t *testing.T, a Adapter, sc Scenario, env *backend) {
	rec := &recorder{}
	cfgs := make([]Config, len(sc.Configs))
	trips := make([]RoundTrip, len(sc.Configs))
	for i, cfg := range sc.Configs {
		cfg.Limiter = env.limiter
		cfg.Observers = []httplimit.Observer{rec}
		handler := i
		if sc.Stack {
			handler = 0
		}
		cfg.Inside = func() string {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = "192.0.2.1:1234"
			resp := trips[handler](req)
			_ = resp.Body.Close()
			return fmt.Sprintf("inside: %d %s", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		cfgs[i] = cfg
	}
	if sc.Stack {
		trips = []RoundTrip{a.New(t, cfgs)}
	} else {
		for i, cfg := range cfgs {
			trips[i] = a.New(t, []Config{cfg})
		}
	}
	for i, st := range sc.Steps {
		if st.StopRedis {
			env.stop()
		}
		req := st.request(a)
		ctx := req.Context()
		if st.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, st.Timeout)
			req = req.WithContext(ctx)
			defer cancel()
		}
		before := time.Now()
		resp := trips[st.Handler](req)
		after := time.Now()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("step %d: reading body: %v", i, err)
		}
		_ = resp.Body.Close()
		st.Want.check(t, fmt.Sprintf("step %d (%s %s)", i, st.method(), req.URL.Path), resp, string(body), rec.take(), before, after, env.exact)
	}
	if !sc.stops() {
		got := env.keys(t)
		want := make([]string, len(sc.Keys))
		for i, k := range sc.Keys {
			k = strings.ReplaceAll(k, "/items/:id", a.ItemsPattern)
			want[i] = strings.ReplaceAll(k, "{route}", a.RoutePrefix)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("keys Redis saw: got %q, want %q", got, want)
		}
	}
}

func (st Step) method() string {
	if st.Method == "" {
		return http.MethodGet
	}
	return st.Method
}

func (st Step) request(a Adapter) *http.Request {
	path := st.Path
	if path == "" {
		path = "/"
	}
	req := httptest.NewRequest(st.method(), path, nil)
	req.RemoteAddr = st.Remote
	if req.RemoteAddr == "" {
		req.RemoteAddr = "192.0.2.1:1234"
	}
	for k, v := range st.Header {
		// A "\n" in a value sends each part as its own header line.
		for _, line := range strings.Split(v, "\n") {
			req.Header.Add(k, line)
		}
	}
	return req
}

func (w Want) check(t *testing.T, step string, resp *http.Response, body string, events []string, before, after time.Time, exact bool) {
	t.Helper()
	if resp.StatusCode != w.Status {
		t.Errorf("%s: status: got %d, want %d (body %q)", step, resp.StatusCode, w.Status, body)
	}
	if body != w.Body {
		t.Errorf("%s: body: got %q, want %q", step, body, w.Body)
	}
	if w.ContentType != "" {
		// Charset values are case-insensitive (Echo sends UTF-8).
		if got := resp.Header.Get("Content-Type"); !strings.EqualFold(got, w.ContentType) {
			t.Errorf("%s: Content-Type: got %q, want %q", step, got, w.ContentType)
		}
	}
	for _, name := range limitHeaders {
		got, present := resp.Header.Get(name), len(resp.Header.Values(name)) > 0
		if n := len(resp.Header.Values(name)); n > 1 {
			t.Errorf("%s: %s sent %d times: %q", step, name, n, resp.Header.Values(name))
		}
		if name == "X-RateLimit-Reset" {
			w.checkReset(t, step, got, present, before, after, exact)
			continue
		}
		want, expected := w.Header[name]
		switch {
		case !expected && present:
			t.Errorf("%s: %s: got %q, want it absent", step, name, got)
		case expected && !present:
			t.Errorf("%s: %s: absent, want %q", step, name, want)
		case expected && want != Any && got != want:
			t.Errorf("%s: %s: got %q, want %q", step, name, got, want)
		}
	}
	wantEvents := []string{}
	if w.Event != "" {
		wantEvents = strings.Split(w.Event, ",")
	}
	if events == nil {
		events = []string{}
	}
	if !slices.Equal(events, wantEvents) {
		t.Errorf("%s: observed outcomes: got %q, want %q", step, events, wantEvents)
	}
	if took := after.Sub(before); took < w.MinTook || (w.MaxTook > 0 && took > w.MaxTook) {
		t.Errorf("%s: took %v, want between %v and %v", step, took, w.MinTook, w.MaxTook)
	}
}

// checkReset checks X-RateLimit-Reset: Unix epoch seconds when the quota is
// whole again, rounded up. On miniredis the clock stands still at
// redistest.Epoch, so the value is exact; on real Redis time moves between
// steps, by at most slack.
func (w Want) checkReset(t *testing.T, step, got string, present bool, before, after time.Time, exact bool) {
	t.Helper()
	switch {
	case w.ResetIn == 0:
		if present {
			t.Errorf("%s: X-RateLimit-Reset: got %q, want it absent", step, got)
		}
		return
	case !present:
		t.Errorf("%s: X-RateLimit-Reset absent, want it", step)
		return
	case w.ResetIn == AnyReset:
		return
	}
	reset, err := strconv.ParseInt(got, 10, 64)
	if err != nil {
		t.Errorf("%s: X-RateLimit-Reset %q is not an integer", step, got)
		return
	}
	slack := time.Duration(0)
	if exact {
		// The headers count from the decision's instant, Redis' clock.
		before, after = redistest.Epoch, redistest.Epoch
	} else {
		slack = 2 * time.Second
	}
	lo, hi := ceilUnix(before.Add(w.ResetIn-slack)), ceilUnix(after.Add(w.ResetIn))
	if reset < lo || reset > hi {
		t.Errorf("%s: X-RateLimit-Reset: got %d, want between %d and %d (now + %v, in epoch seconds rounded up)", step, reset, lo, hi, w.ResetIn)
	}
}

func ceilUnix(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Second) - 1) / int64(time.Second)
}
