package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

var sliding3h = core.Limit{Algorithm: core.SlidingWindow, Rate: 3, Period: time.Hour}

// TestLayersXRateLimitHeaders: the X-RateLimit headers report the
// strictest layer (frozen miniredis clock).
func TestLayersXRateLimitHeaders(t *testing.T) {
	type step struct {
		outcome Outcome
		headers map[string]string
		reset   time.Duration // X-RateLimit-Reset - Redis' clock
	}
	tests := []struct {
		name   string
		limit  core.Limit
		layers []core.Limit
		steps  []step
	}{
		{"the hourly layer is strictest", core.PerSecond(10), []core.Limit{sliding3h}, []step{
			{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "Retry-After": ""}, time.Hour},
			{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1"}, time.Hour},
			{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0"}, time.Hour},
			{OutcomeDenied, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "Retry-After": "3600"}, time.Hour},
		}},
		{"the per-second layer is strictest", core.PerSecond(3), []core.Limit{{Algorithm: core.SlidingWindow, Rate: 100, Period: time.Hour}}, []step{
			{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2"}, time.Second / 3},
			{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1"}, 2 * time.Second / 3},
			{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0"}, time.Second},
			{OutcomeDenied, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "Retry-After": "1"}, time.Second},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, l := mini(t)
			p := mustNew(t, Config{Limiter: l, Limit: tt.limit, Layers: tt.layers})
			for i, s := range tt.steps {
				step := "step " + strconv.Itoa(i)
				d, h := decide(p, from("192.0.2.1"))
				if d.Outcome != s.outcome {
					t.Fatalf("%s: outcome %v (err %v), want %v", step, d.Outcome, d.Err, s.outcome)
				}
				if got, want := len(d.layers)-1, len(tt.layers); got != want {
					t.Errorf("%s: %d further layer results, want %d", step, got, want)
				}
				checkHeaders(t, step, h, s.headers)
				reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
				if err != nil {
					t.Fatalf("%s: X-RateLimit-Reset %q: %v", step, h.Get("X-RateLimit-Reset"), err)
				}
				// Reset is the epoch second, rounded up, when ResetAfter ends,
				// on Redis' clock, which stands still: the same on every run.
				if want := ceilUnix(redistest.Epoch.Add(s.reset)); reset != want {
					t.Errorf("%s: X-RateLimit-Reset %d, want %d (Redis' clock + %v, rounded up)", step, reset, want, s.reset)
				}
			}
		})
	}
}

// TestLayersIETFHeaders: the IETF fields list every layer as its own
// policy, "<Name>-<i>", with q/w and r/t (frozen miniredis clock); a
// refused layer's t is its Retry-After.
func TestLayersIETFHeaders(t *testing.T) {
	_, _, l := mini(t)
	hourly := core.Limit{Algorithm: core.SlidingWindow, Rate: 2, Period: time.Hour}
	tests := []struct {
		name    string
		cfg     Config
		steps   []map[string]string
		outcome []Outcome
	}{
		{
			name: "ietf",
			cfg:  Config{Limiter: l, Limit: core.PerSecond(10), Layers: []core.Limit{hourly}, Headers: Headers{IETF{}}},
			steps: []map[string]string{
				{
					"RateLimit-Policy":  `"http-0";q=10;w=1, "http-1";q=2;w=3600`,
					"RateLimit":         `"http-0";r=9;t=1, "http-1";r=1;t=3600`,
					"X-RateLimit-Limit": "",
				},
				{
					"RateLimit-Policy": `"http-0";q=10;w=1, "http-1";q=2;w=3600`,
					"RateLimit":        `"http-0";r=8;t=1, "http-1";r=0;t=3600`,
				},
				{ // denied by layer 1: nothing taken, so layer 0 still has 8
					"RateLimit-Policy": `"http-0";q=10;w=1, "http-1";q=2;w=3600`,
					"RateLimit":        `"http-0";r=8;t=1, "http-1";r=0;t=3600`,
					"Retry-After":      "3600",
				},
			},
			outcome: []Outcome{OutcomeAllowed, OutcomeAllowed, OutcomeDenied},
		},
		{
			name: "both, named, three layers",
			cfg: Config{Limiter: l, Name: "api", Limit: core.PerSecond(10), Headers: Headers{XRateLimit{}, IETF{}},
				Layers: []core.Limit{{Algorithm: core.FixedWindow, Rate: 50, Period: time.Minute}, core.PerHour(1000)}},
			steps: []map[string]string{
				{
					"RateLimit-Policy": `"api-0";q=10;w=1, "api-1";q=50;w=60, "api-2";q=1000;w=3600`,
					// (t=56: a fixed window's wait, 55s and the 1 ms a Redis
					// keeps its key through its expiry's, rounded up.)
					"RateLimit":             `"api-0";r=9;t=1, "api-1";r=49;t=56, "api-2";r=999;t=4`,
					"X-RateLimit-Limit":     "10",
					"X-RateLimit-Remaining": "9",
				},
			},
			outcome: []Outcome{OutcomeAllowed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, tt.cfg)
			for i, want := range tt.steps {
				d, h := decide(p, from("192.0.2.2"))
				if d.Outcome != tt.outcome[i] {
					t.Fatalf("step %d: outcome %v (err %v), want %v", i, d.Outcome, d.Err, tt.outcome[i])
				}
				checkHeaders(t, "step "+strconv.Itoa(i), h, want)
			}
		})
	}
}

// TestIETFtIsRetryAfter: a refused response's RateLimit t is its
// Retry-After, as the draft asks, for every algorithm; it used to be the
// time until the quota is whole (t=10 with Retry-After: 2; for the sliding
// window counter t=19 beside w=10).
func TestIETFtIsRetryAfter(t *testing.T) {
	for a := core.TokenBucket; a <= core.LeakyBucket; a++ {
		t.Run(a.String(), func(t *testing.T) {
			_, _, l := mini(t)
			limit := core.Limit{Algorithm: a, Rate: 5, Period: 10 * time.Second, MaxDelay: time.Hour}
			p := mustNew(t, Config{Limiter: l, Limit: limit, Headers: Headers{IETF{}}, MaxWait: time.Nanosecond})
			var d Decision
			var h http.Header
			for range 6 {
				if d, h = decide(p, from("192.0.2.3")); d.Outcome == OutcomeDenied {
					break
				}
			}
			if d.Outcome != OutcomeDenied {
				t.Fatalf("6 requests at once under 5 per 10s: %v, want a denial", d.Outcome)
			}
			want := ";t=" + h.Get("Retry-After")
			if got := h.Get("RateLimit"); h.Get("Retry-After") == "" || !strings.HasSuffix(got, want) {
				t.Errorf("RateLimit %q with Retry-After %q: want t to be the Retry-After", got, h.Get("Retry-After"))
			}
		})
	}
}

// TestGlobalCeiling: a Scope without a Key (a ceiling on the whole Policy)
// denies once its ceiling is reached across different keys, reports itself
// in the headers while it is the strictest, and a request it refuses
// counts in no key (Config.Scopes: "refused, counted in none").
func TestGlobalCeiling(t *testing.T) {
	ctx := context.Background()
	_, rdb, l := mini(t)
	perKey := core.PerHour(100)
	p := mustNew(t, Config{Limiter: l, Limit: perKey, Scopes: []Scope{{Name: "global", Limit: sliding3h}}, Headers: Headers{XRateLimit{}, IETF{}}})
	for i, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"} {
		d, h := decide(p, from(ip))
		want := OutcomeAllowed
		if i >= 3 {
			want = OutcomeDenied
		}
		if d.Outcome != want {
			t.Fatalf("request %d from %s: %v (err %v), want %v", i+1, ip, d.Outcome, d.Err, want)
		}
		if want == OutcomeDenied {
			checkHeaders(t, ip, h, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "Retry-After": "3600",
				"RateLimit": `"http-0";r=100;t=0, "http-global";r=0;t=3600`})
		} else {
			// The ceiling, with less left than the key, is the strictest.
			checkHeaders(t, ip, h, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": strconv.Itoa(2 - i)})
		}
	}
	// The Global's log (a sorted set, "<prefix>:{http|global}:sw3") holds
	// the three admissions, which share an entry of their instant: denials
	// take nothing.
	keys, err := rdb.Keys(ctx, "*{http|global}:sw3").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the Global's log: %q, %v", keys, err)
	}
	entries, err := rdb.ZRange(ctx, keys[0], 0, -1).Result()
	units := 0
	for _, e := range entries {
		var s, w int
		_, _ = fmt.Sscanf(e, "%d %d", &s, &w)
		units += w
	}
	if err != nil || units != 3 {
		t.Errorf("global log holds %d units (%q), %v; want 3", units, entries, err)
	}
	// A request the ceiling refuses has used nothing of its key's quota.
	r, err := l.Peek(ctx, perKey.For("http:ip:192.0.2.5"))
	if err != nil || r.Remaining != 100 {
		t.Errorf("key of a request the ceiling refused: %+v, %v; want Remaining 100", r, err)
	}
}

// TestGlobalOnlyAfterLayersAdmit: on one Redis, a request is one script
// call, its key's layers and the ceiling decided together; a denied one
// too.
func TestGlobalOnlyAfterLayersAdmit(t *testing.T) {
	for _, withLayers := range []bool{false, true} {
		t.Run("layers="+strconv.FormatBool(withLayers), func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			var count scripts
			rdb.AddHook(&count)
			l := newLimiter(t, rdb)
			global := core.Limit{Algorithm: core.SlidingWindow, Rate: 100, Period: time.Hour}
			cfg := Config{Limiter: l, Limit: core.PerHour(10), Scopes: []Scope{{Name: "global", Limit: global}}}
			if withLayers {
				cfg.Layers = []core.Limit{{Algorithm: core.SlidingWindow, Rate: 2, Period: time.Hour}}
			} else {
				cfg.Limit = core.Limit{Algorithm: core.SlidingWindow, Rate: 2, Period: time.Hour}
			}
			p := mustNew(t, cfg)
			for i := range 2 {
				if d := p.testDecide(from("198.51.100.1")); d.Outcome != OutcomeAllowed {
					t.Fatalf("request %d: %v (err %v), want allowed", i+1, d.Outcome, d.Err)
				}
			}
			for i := range 5 {
				before := count.n.Load()
				if d := p.testDecide(from("198.51.100.1")); d.Outcome != OutcomeDenied {
					t.Fatalf("denied request %d: %v (err %v), want denied", i+1, d.Outcome, d.Err)
				}
				if got := count.n.Load() - before; got != 1 {
					t.Errorf("denied request %d made %d script calls, want 1 (one decision of every rule)", i+1, got)
				}
			}
		})
	}
}

// TestLayersWaitLeakyDelay: an admitted request waits out the Delay of a
// LeakyBucket layer even when another layer is reported as the strictest:
// shaping must not depend on which layer has the least Remaining.
func TestLayersWaitLeakyDelay(t *testing.T) {
	_, _, l := mini(t) // frozen clock: the queue does not drain
	shaper := core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Second, Burst: 10}
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"leaky bucket is layer 0", Config{Limiter: l, Name: "a", Limit: shaper, Layers: []core.Limit{core.PerHour(2)}}},
		{"leaky bucket is layer 1", Config{Limiter: l, Name: "b", Limit: core.PerHour(2), Layers: []core.Limit{shaper}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, tt.cfg)
			if d := p.testDecide(from("192.0.2.9")); d.Outcome != OutcomeAllowed {
				t.Fatalf("first request: %v (err %v)", d.Outcome, d.Err)
			}
			start := time.Now()
			d := p.testDecide(from("192.0.2.9"))
			waited := time.Since(start)
			if d.Outcome != OutcomeAllowed {
				t.Fatalf("second request: %v (err %v)", d.Outcome, d.Err)
			}
			if d.Result.Delay != 100*time.Millisecond {
				t.Fatalf("Delay %v, want 100ms (one unit queued ahead)", d.Result.Delay)
			}
			if waited < 90*time.Millisecond {
				t.Errorf("Decide returned after %v, want it to wait the leaky bucket layer's Delay", waited)
			}
		})
	}
}

// TestDryRunNeverDenies: a dry run decides and counts, sends the rate-limit
// headers, but lets every request through, even one it cannot key.
func TestDryRunNeverDenies(t *testing.T) {
	_, _, l := mini(t)
	for _, layers := range [][]core.Limit{nil, {core.PerHour(100)}} {
		t.Run("layers="+strconv.Itoa(len(layers)), func(t *testing.T) {
			p := mustNew(t, Config{Limiter: l, Name: "dry" + strconv.Itoa(len(layers)), Limit: core.PerHour(2),
				Layers: layers, DryRun: true, Headers: Headers{XRateLimit{}, IETF{}}})
			for i := range 5 {
				d, h := decide(p, from("203.0.113.1"))
				want := OutcomeAllowed
				if i >= 2 {
					want = OutcomeDenied
				}
				if d.Outcome != want {
					t.Errorf("request %d: outcome %v, want %v (a dry run still decides)", i+1, d.Outcome, want)
				}
				if !d.Proceed() || d.Status() != 0 || d.Body() != nil {
					t.Errorf("request %d: Proceed %v, Status %d, Body %q; want it to proceed", i+1, d.Proceed(), d.Status(), d.Body())
				}
				checkHeaders(t, "request "+strconv.Itoa(i+1), h, map[string]string{
					"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": strconv.Itoa(max(0, 1-i)), "Retry-After": "",
				})
				if h.Get("RateLimit") == "" || h.Get("RateLimit-Policy") == "" {
					t.Errorf("request %d: IETF headers missing: %v", i+1, h)
				}
			}
		})
	}
	p := mustNew(t, Config{Limiter: l, Limit: core.PerHour(2), Key: KeyByHeader("X-API-Key"), DryRun: true})
	if d := p.testDecide(from("203.0.113.1")); d.Outcome != OutcomeNoKey || !d.Proceed() {
		t.Errorf("a dry run of a request without a key: %v, Proceed %v; want no_key that proceeds", d.Outcome, d.Proceed())
	}
}

// TestInvalidCostFailsClosed: a cost that can never be admitted is a
// caller error: the request does not proceed even with FailOpen, and
// nothing is taken.
func TestInvalidCostFailsClosed(t *testing.T) {
	tests := []struct {
		name    string
		cost    int
		layers  []core.Limit
		limitFn func(Request) (core.Limit, bool)
		wantErr error
	}{
		{"zero cost", 0, nil, nil, core.ErrInvalidCost},
		{"negative cost", -5, nil, nil, core.ErrInvalidCost},
		{"cost above capacity", 11, nil, nil, core.ErrInvalidCost},
		{"zero cost, layers", 0, []core.Limit{core.PerHour(100)}, nil, core.ErrInvalidCost},
		{"cost above a layer's capacity", 6, []core.Limit{core.PerHour(5)}, nil, core.ErrInvalidCost},
		{"invalid limit from LimitFunc", 1, nil, func(Request) (core.Limit, bool) { return core.Limit{Rate: -1, Period: time.Second}, true }, core.ErrInvalidLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr, _, l := mini(t)
			var obs observed
			cfg := Config{Limiter: l, Limit: core.PerSecond(10), Layers: tt.layers,
				Cost: func(Request) int { return tt.cost }, Observers: []Observer{&obs}}
			if tt.limitFn != nil {
				cfg.LimitFunc = func(r Request, _ string) (core.Limit, bool) { return tt.limitFn(r) }
			}
			p := mustNew(t, cfg)
			d, h := decide(p, from("192.0.2.1"))
			if d.Outcome != OutcomeFailedClosed || d.Proceed() || d.Status() != http.StatusServiceUnavailable {
				t.Errorf("outcome %v, Proceed %v, Status %d; want failed closed, not proceeding, 503", d.Outcome, d.Proceed(), d.Status())
			}
			if !errors.Is(d.Err, tt.wantErr) || d.redisFault() {
				t.Errorf("Err %v, RedisFault %v; want %v, not a Redis fault", d.Err, d.redisFault(), tt.wantErr)
			}
			if h.Get("X-RateLimit-Limit") != "" {
				t.Errorf("headers %v: want no rate-limit headers on a failure", h)
			}
			if keys := mr.Keys(); len(keys) != 0 {
				t.Errorf("an invalid request wrote %v", keys)
			}
		})
	}
}

// TestUnkeyedRefused: a request the key function cannot key is refused
// with 400 and a body that says why, never served unlimited by default, and
// never shares one bucket with the others; ServeUnkeyed serves it, on
// purpose. It used to fail open: leaving the header out beat the limit.
// It backs the README's "a flood of them never reaches Redis" and
// decideRequest's "calls no hook of the user's": Cost and LimitFunc count
// their calls, a hook the script calls (the Limiter's own background
// commands, a health check, a library load, are not the requests').
func TestUnkeyedRefused(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	decisions := &scripts{}
	rdb.AddHook(decisions) // before the Limiter's background work begins
	l := newLimiter(t, rdb)
	var obs observed
	var hooks atomic.Int64
	cost := func(Request) int { hooks.Add(1); return 1 }
	limitFunc := func(Request, string) (core.Limit, bool) { hooks.Add(1); return core.PerMinute(1), true }
	for _, tt := range []struct {
		name string
		key  KeyFunc
		req  testRequest
	}{
		{"no header", KeyByHeader("X-API-Key"), from("192.0.2.1")},
		{"no peer address", nil, testRequest{remote: "@", header: http.Header{}}},
		{"no route", KeyByRoute(), testRequest{remote: "192.0.2.1:1", header: http.Header{}}},
		{"empty key", func(Request) (string, error) { return "", nil }, from("192.0.2.1")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(1), Key: tt.key, Observers: []Observer{&obs}, Cost: cost, LimitFunc: limitFunc})
			for range 3 {
				d, h := decide(p, tt.req)
				if d.Outcome != OutcomeNoKey || d.Proceed() || d.Status() != http.StatusBadRequest || d.redisFault() {
					t.Fatalf("%v, Proceed %v, Status %d, RedisFault %v (err %v); want no_key, refused with 400",
						d.Outcome, d.Proceed(), d.Status(), d.redisFault(), d.Err)
				}
				if got, want := string(d.Body()), "{\"error\":\"missing rate limit key\"}\n"; got != want {
					t.Errorf("body %q, want %q", got, want)
				}
				if len(h) != 0 {
					t.Errorf("headers %v: want none", h)
				}
			}
			serve := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(1), Key: tt.key, ServeUnkeyed: true, Cost: cost, LimitFunc: limitFunc})
			for range 3 {
				if d := serve.testDecide(tt.req); d.Outcome != OutcomeNoKey || !d.Proceed() {
					t.Errorf("ServeUnkeyed: %v, Proceed %v; want no_key, served", d.Outcome, d.Proceed())
				}
			}
		})
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("unkeyable requests wrote %q to Redis", keys)
	}
	if n := decisions.n.Load(); n != 0 {
		t.Errorf("unkeyable requests made %d script calls, want 0", n)
	}
	if n := hooks.Load(); n != 0 {
		t.Errorf("unkeyable requests called Cost or LimitFunc %d times, want 0", n)
	}
	for _, d := range obs.decisions {
		if d.Outcome != OutcomeNoKey {
			t.Errorf("observed %v, want no_key", d.Outcome)
		}
	}
}

// TestNoRouteWarnsOnce backs issue 17's "the first refusal of this kind is
// logged once, naming the fix": a KeyByRoute mounted before routing (chi's
// r.Use) refuses every request, and the log says so once, not per request.
func TestNoRouteWarnsOnce(t *testing.T) {
	_, rdb := redistest.Mini(t)
	var logged redistest.LogBuffer // the Limiter's loader logs from its own goroutine
	l := newLimiter(t, rdb, core.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(1), Key: KeyByRoute()})
	for range 5 {
		if d := p.testDecide(testRequest{remote: "192.0.2.1:1", header: http.Header{}}); d.Outcome != OutcomeNoKey || !errors.Is(d.Err, errNoRoute) {
			t.Fatalf("a request with no route: %v (%v), want no_key with errNoRoute", d.Outcome, d.Err)
		}
	}
	out := logged.String()
	if n := strings.Count(out, "KeyByRoute found no route"); n != 1 {
		t.Errorf("warned %d times for 5 requests, want once; log:\n%s", n, out)
	}
	if !strings.Contains(out, "r.With") {
		t.Errorf("the warning does not name the fix (r.With): %s", out)
	}
}

// TestDecisionKey backs Decision.Key's doc: it is what the key function
// returned, for every outcome that had a key, and "" for a request that
// could not be keyed.
func TestDecisionKey(t *testing.T) {
	_, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(1)})
	for i, want := range []Outcome{OutcomeAllowed, OutcomeDenied} {
		if d := p.testDecide(from("192.0.2.7")); d.Outcome != want || d.Key != "ip:192.0.2.7" {
			t.Errorf("request %d: %v with Key %q, want %v with Key %q", i+1, d.Outcome, d.Key, want, "ip:192.0.2.7")
		}
	}
	byHeader := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(1), Key: KeyByHeader("x-api-key")})
	if d := byHeader.testDecide(from("192.0.2.7", "X-Api-Key", "k1")); d.Key != "h:X-Api-Key:k1" {
		t.Errorf("KeyByHeader: Key %q, want %q", d.Key, "h:X-Api-Key:k1")
	}
	if d := byHeader.testDecide(from("192.0.2.7")); d.Outcome != OutcomeNoKey || d.Key != "" {
		t.Errorf("no header: %v with Key %q, want no_key with no Key", d.Outcome, d.Key)
	}
}

// TestRedisFault: only a Limiter that could not reach Redis is a Redis
// fault; so metrics of Redis errors stay true.
func TestRedisFault(t *testing.T) {
	mr, _, l := mini(t)
	var obs observed
	p := mustNew(t, Config{Limiter: l, Limit: core.PerSecond(5), Observers: []Observer{&obs},
		Cost: func(r Request) int {
			if len(r.Header("X-Cost")) > 0 {
				return 100
			}
			return 1
		}})
	p.testDecide(from("192.0.2.1"))
	p.testDecide(testRequest{remote: "@", header: http.Header{}}) // no key
	p.testDecide(from("192.0.2.1", "X-Cost", "yes"))              // cost above capacity
	mr.Close()
	p.testDecide(from("192.0.2.1")) // Redis gone
	want := []struct {
		outcome Outcome
		fault   bool
	}{{OutcomeAllowed, false}, {OutcomeNoKey, false}, {OutcomeFailedClosed, false}, {OutcomeFailedOpen, true}}
	if len(obs.decisions) != len(want) {
		t.Fatalf("observed %d decisions, want %d", len(obs.decisions), len(want))
	}
	for i, w := range want {
		if d := obs.decisions[i]; d.Outcome != w.outcome || d.redisFault() != w.fault || d.Policy != "http" {
			t.Errorf("decision %d: %v, RedisFault %v (err %v), policy %q; want %v, %v", i, d.Outcome, d.redisFault(), d.Err, d.Policy, w.outcome, w.fault)
		}
	}
}

// TestDryRunNeverBlocks: a dry run serves the request even when it would
// fail closed, without a Retry-After.
func TestDryRunNeverBlocks(t *testing.T) {
	mr, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerSecond(1), FailClosed: true, DryRun: true})
	mr.Close()
	d := p.testDecide(from("192.0.2.1"))
	if d.Outcome != OutcomeFailedClosed || !d.Proceed() || d.Status() != 0 {
		t.Errorf("Outcome %v, Proceed %v, Status %d; want failed_closed that still proceeds", d.Outcome, d.Proceed(), d.Status())
	}
	d.writeHeaders(setter(func(name, value string) {
		t.Errorf("a dry run that proceeds wrote %s: %s", name, value)
	}))
}

// TestLeakyDefaultWait: without MaxWait or MaxDelay, a leaky bucket may
// hold a request as long as a full queue takes to drain, so all of Burst is
// usable, and no longer.
func TestLeakyDefaultWait(t *testing.T) {
	p := &Policy{}
	leaky := func(rate, burst int, maxDelay time.Duration) core.Limit {
		return core.Limit{Algorithm: core.LeakyBucket, Rate: rate, Period: time.Second, Burst: burst, MaxDelay: maxDelay}
	}
	tests := []struct {
		name  string
		limit core.Limit
		want  time.Duration
	}{
		{"burst = rate", leaky(10, 0, 0), time.Second},
		{"burst 5x rate", leaky(2, 10, 0), 5 * time.Second},
		{"own MaxDelay kept", leaky(2, 0, time.Second), time.Second},
		{"not leaky", core.Limit{Rate: 2, Period: time.Second}, 0},
	}
	for _, tt := range tests {
		if got := p.capWait(tt.limit).MaxDelay; got != tt.want {
			t.Errorf("%s: MaxDelay %v, want %v", tt.name, got, tt.want)
		}
	}
	p.maxWait = 2 * time.Second
	if got := p.capWait(tests[1].limit).MaxDelay; got != 2*time.Second {
		t.Errorf("MaxWait 2s: MaxDelay %v, want 2s", got)
	}
}

// TestCountIf: only failures count; a request needs a free unit to pass
// and holds it while in flight, so concurrent requests never pass beyond
// the limit, and successes give theirs back.
func TestCountIf(t *testing.T) {
	for _, limit := range []core.Limit{
		core.PerMinute(3),
		{Algorithm: core.FixedWindow, Rate: 3, Period: time.Minute},
		{Algorithm: core.SlidingWindowCounter, Rate: 3, Period: time.Minute},
		{Algorithm: core.SlidingWindow, Rate: 3, Period: time.Minute},
	} {
		t.Run(limit.Algorithm.String(), func(t *testing.T) {
			_, _, l := mini(t)
			p := mustNew(t, Config{Limiter: l, Limit: limit, CountIf: countFailed})
			serve := func(status int) Outcome {
				d := p.testDecide(from("192.0.2.1"))
				if d.Proceed() && d.wantsFinish() {
					d.finish(status)
				}
				return d.Outcome
			}
			for i := range 10 {
				if got := serve(http.StatusOK); got != OutcomeAllowed {
					t.Fatalf("success %d: %v, want allowed: successes do not count", i, got)
				}
			}
			for i := range 3 {
				if got := serve(http.StatusUnauthorized); got != OutcomeAllowed {
					t.Fatalf("failure %d: %v, want allowed", i, got)
				}
			}
			if got := serve(http.StatusOK); got != OutcomeDenied {
				t.Errorf("after 3 failures: %v, want denied", got)
			}
		})
	}

	// 20 concurrent logins, all failing, under 5 per minute: at most 5 reach
	// the handler, however they interleave.
	_, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(5), CountIf: countFailed})
	var mu sync.Mutex
	reached := 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			d := p.testDecide(from("192.0.2.7"))
			if !d.Proceed() {
				return
			}
			mu.Lock()
			reached++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // checking the password
			d.finish(http.StatusUnauthorized)
		})
	}
	wg.Wait()
	if reached > 5 {
		t.Errorf("%d concurrent failing logins reached the handler, want at most 5", reached)
	}
}

// TestConfigErrors: New names what it cannot use.
func TestConfigErrors(t *testing.T) {
	_, _, l := mini(t)
	bad := core.Limit{Rate: 0, Period: time.Second}
	eight := make([]core.Limit, 8)
	for i := range eight {
		eight[i] = core.PerHour(i + 1)
	}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.Limiter"},
		{Config{Limiter: l, Limit: bad}, "Config.Limit"},
		{Config{Limiter: l, Layers: []core.Limit{core.PerHour(5), bad}}, "Config.Layers[1]"},
		{Config{Limiter: l, Layers: eight}, "at most 7 Limits beside"},
		{Config{Limiter: l, Scopes: []Scope{{Name: "global", Limit: bad}}}, "Config.Scopes[0] (global).Limit"},
		{Config{Limiter: l, Scopes: []Scope{{Limit: core.PerHour(5)}}}, "Config.Scopes[0].Name"},
		{Config{Limiter: l, Scopes: []Scope{{Name: "org", Limit: core.PerHour(5)}, {Name: "org", Limit: core.PerHour(5)}}}, "used twice"},
		{Config{Limiter: l, Scopes: []Scope{{Name: "a b", Limit: core.PerHour(5)}}}, "Config.Scopes[0].Name"},
		{Config{Limiter: l, Scopes: []Scope{{Name: "inflight", Limit: core.PerHour(5)}}}, "Config.Scopes[0].Name"},
		{Config{Limiter: l, Layers: eight[:6], Scopes: []Scope{{Name: "org", Limit: core.PerHour(5)}, {Name: "all", Limit: core.PerHour(5)}}}, "at most 7"},
		{Config{Limiter: l, InFlight: -1}, "Config.InFlight"},
		{Config{Limiter: l, InFlight: 1 << 21}, "Config.InFlight"},
		{Config{Limiter: l, InFlight: 2, InFlightLease: -time.Second}, "Config.InFlightLease"},
		{Config{Limiter: l, InFlight: 2, Layers: eight[:7]}, "at most 6 Limits beside"},
		{Config{Limiter: l, Headers: Headers{nil}}, "Config.Headers[0]"},
		{Config{Limiter: l, MaxWait: -time.Second}, "Config.MaxWait"},
	} {
		if p, err := New(tt.cfg); err == nil || p != nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, %v; want an error naming %s", tt.cfg, p, err, tt.want)
		}
	}
	p := mustNew(t, Config{Limiter: l})
	if p.limit != core.PerSecond(10) || p.name != "http" {
		t.Errorf("defaults: limit %v, name %q; want 10/s and http", p.limit, p.name)
	}
}

// TestText: the enums and Headers have text forms, for flags and config
// files.
func TestText(t *testing.T) {
	for _, tt := range []struct {
		text string
		want Headers
	}{
		{"xratelimit", Headers{XRateLimit{}}},
		{"ietf", Headers{IETF{}}},
		{"both", Headers{XRateLimit{}, IETF{}}},
		{"xratelimit,ietf", Headers{XRateLimit{}, IETF{}}},
		{"none", Headers{}},
	} {
		var h Headers
		if err := h.UnmarshalText([]byte(tt.text)); err != nil || fmt.Sprint(h) != fmt.Sprint(tt.want) || h == nil {
			t.Errorf("Headers.UnmarshalText(%q) = %v, %v; want %v", tt.text, h, err, tt.want)
		}
	}
	var h Headers
	if err := h.UnmarshalText([]byte("github")); err == nil {
		t.Error(`Headers.UnmarshalText("github"): no error`)
	}
	if b, err := (Headers{XRateLimit{}, IETF{}}).MarshalText(); err != nil || string(b) != "xratelimit,ietf" {
		t.Errorf("Headers.MarshalText = %q, %v", b, err)
	}
	if _, err := (Headers{XRateLimit{Limit: "L"}}).MarshalText(); err == nil {
		t.Error("renamed headers marshaled to text")
	}
	if s := OutcomeNoKey.String(); s != "no_key" {
		t.Errorf("OutcomeNoKey.String() = %q", s)
	}
}

// TestRenamedHeaders: XRateLimit's fields rename its headers.
func TestRenamedHeaders(t *testing.T) {
	_, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerHour(2), Headers: Headers{XRateLimit{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining"}}})
	_, h := decide(p, from("192.0.2.1"))
	checkHeaders(t, "renamed", h, map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "X-RateLimit-Limit": ""})
	if h.Get("X-RateLimit-Reset") == "" {
		t.Error("the Reset header lost its default name")
	}
}

// TestBodies: every refusal has its body, ending in a newline.
func TestBodies(t *testing.T) {
	for _, tt := range []struct {
		d    Decision
		want string
	}{
		{Decision{Outcome: OutcomeDenied, Result: core.Result{RetryAfter: 1500 * time.Millisecond}}, "{\"error\":\"rate limit exceeded\",\"retry_after\":2}\n"},
		{Decision{Outcome: OutcomeFailedClosed}, "{\"error\":\"rate limiter unavailable\"}\n"},
		{Decision{Outcome: OutcomeNoKey}, "{\"error\":\"missing rate limit key\"}\n"},
		{Decision{Outcome: OutcomeCanceled}, "{\"error\":\"request canceled\"}\n"},
		{Decision{Outcome: OutcomeAllowed}, ""},
	} {
		if got := string(tt.d.Body()); got != tt.want {
			t.Errorf("%v: body %q, want %q", tt.d.Outcome, got, tt.want)
		}
	}
}

// TestReset: a Policy forgets a request's key in every layer, and only its.
func TestReset(t *testing.T) {
	_, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerHour(1), Layers: []core.Limit{core.PerHour(5)}})
	for _, ip := range []string{"192.0.2.1", "192.0.2.2"} {
		if d := p.testDecide(from(ip)); d.Outcome != OutcomeAllowed {
			t.Fatalf("%s: %v", ip, d.Outcome)
		}
	}
	if err := p.Reset(from("192.0.2.1")); err != nil {
		t.Fatal(err)
	}
	if d := p.testDecide(from("192.0.2.1")); d.Outcome != OutcomeAllowed {
		t.Errorf("after Reset: %v, want allowed", d.Outcome)
	}
	if d := p.testDecide(from("192.0.2.2")); d.Outcome != OutcomeDenied {
		t.Errorf("another key after Reset: %v, want still denied", d.Outcome)
	}
	if err := p.Reset(testRequest{remote: "@", header: http.Header{}}); err == nil {
		t.Error("Reset of a request without a key: no error")
	}
}
