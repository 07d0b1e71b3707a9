package core

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// polRequest is the smallest Request: a peer address and headers.
type polRequest struct {
	ctx    context.Context
	remote string
	header http.Header
}

func (r polRequest) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}
func (r polRequest) RemoteAddr() string        { return r.remote }
func (r polRequest) Header(name string) string { return r.header.Get(name) }
func (r polRequest) Method() string            { return http.MethodGet }
func (r polRequest) Route() string             { return "/v1/things" }

func polFrom(ip string) polRequest { return polRequest{remote: ip + ":40000", header: http.Header{}} }

// polDecide decides r and returns the decision with the headers it writes.
func polDecide(p *Policy, r Request) (Decision, http.Header) {
	d := p.Decide(r)
	h := http.Header{}
	d.WriteHeaders(h.Set)
	return d, h
}

func polNew(t *testing.T, p Policy) *Policy {
	t.Helper()
	pp, err := NewPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return pp
}

// polCeilUnix is t in Unix seconds, rounded up.
func polCeilUnix(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Second) - 1) / int64(time.Second)
}

// polCheckHeaders compares the headers named in want ("" = absent).
func polCheckHeaders(t *testing.T, step string, h http.Header, want map[string]string) {
	t.Helper()
	for name, w := range want {
		if got := h.Get(name); got != w {
			t.Errorf("%s: %s = %q, want %q", step, name, got, w)
		}
	}
}

// TestPolicyLayersXRateLimitHeaders: the X-RateLimit headers report the
// strictest layer (frozen miniredis clock).
func TestPolicyLayersXRateLimitHeaders(t *testing.T) {
	tests := []struct {
		name   string
		limit  Limit
		layers []Limit
		steps  []struct {
			outcome Outcome
			headers map[string]string
			reset   time.Duration // X-RateLimit-Reset - now, to within a second
		}
	}{
		{
			name:   "the hourly layer is strictest",
			limit:  PerSecond(10),
			layers: []Limit{{Algorithm: SlidingWindow, Rate: 3, Period: time.Hour}},
			steps: []struct {
				outcome Outcome
				headers map[string]string
				reset   time.Duration
			}{
				{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "Retry-After": ""}, time.Hour},
				{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1"}, time.Hour},
				{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0"}, time.Hour},
				{OutcomeDenied, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "Retry-After": "3600"}, time.Hour},
			},
		},
		{
			name:   "the per-second layer is strictest",
			limit:  PerSecond(3),
			layers: []Limit{{Algorithm: SlidingWindow, Rate: 100, Period: time.Hour}},
			steps: []struct {
				outcome Outcome
				headers map[string]string
				reset   time.Duration
			}{
				{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2"}, time.Second / 3},
				{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1"}, 2 * time.Second / 3},
				{OutcomeAllowed, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0"}, time.Second},
				{OutcomeDenied, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "Retry-After": "1"}, time.Second},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			l := New(rdb, WithPrefix(opsPrefix(t)), opsPatient)
			p := polNew(t, Policy{Limiter: l, Limit: tt.limit, Layers: tt.layers})
			for i, s := range tt.steps {
				step := "step " + strconv.Itoa(i)
				before := time.Now()
				d, h := polDecide(p, polFrom("192.0.2.1"))
				after := time.Now()
				if d.Outcome != s.outcome {
					t.Fatalf("%s: outcome %v (err %v), want %v", step, d.Outcome, d.Err, s.outcome)
				}
				if got, want := len(d.Layers), 1+len(tt.layers); got != want {
					t.Errorf("%s: %d layer results, want %d", step, got, want)
				}
				polCheckHeaders(t, step, h, s.headers)
				reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
				if err != nil {
					t.Fatalf("%s: X-RateLimit-Reset %q: %v", step, h.Get("X-RateLimit-Reset"), err)
				}
				// Reset is the epoch second, rounded up, when ResetAfter ends;
				// the ResetAfter of a decision made between before and after
				// ends between these two.
				lo, hi := polCeilUnix(before.Add(s.reset-time.Millisecond)), polCeilUnix(after.Add(s.reset+time.Millisecond))
				if reset < lo || reset > hi {
					t.Errorf("%s: X-RateLimit-Reset %d, want %d..%d (now + %v, rounded up)", step, reset, lo, hi, s.reset)
				}
			}
		})
	}
}

// TestPolicyLayersIETFHeaders: the IETF fields list every layer as its own
// policy, "<Name>-<i>", with q/w and r/t (frozen miniredis clock).
func TestPolicyLayersIETFHeaders(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := New(rdb, WithPrefix(opsPrefix(t)), opsPatient)
	hourly := Limit{Algorithm: SlidingWindow, Rate: 2, Period: time.Hour}
	tests := []struct {
		name    string
		policy  Policy
		steps   []map[string]string
		outcome []Outcome
	}{
		{
			name:   "ietf",
			policy: Policy{Limiter: l, Limit: PerSecond(10), Layers: []Limit{hourly}, Headers: HeadersIETF},
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
				{ // denied by layer 1: nothing consumed, so layer 0 still has 8
					"RateLimit-Policy": `"http-0";q=10;w=1, "http-1";q=2;w=3600`,
					"RateLimit":        `"http-0";r=8;t=1, "http-1";r=0;t=3600`,
					"Retry-After":      "3600",
				},
			},
			outcome: []Outcome{OutcomeAllowed, OutcomeAllowed, OutcomeDenied},
		},
		{
			name: "both, named, three layers",
			policy: Policy{Limiter: l, Name: "api", Limit: PerSecond(10), Headers: HeadersBoth,
				Layers: []Limit{{Algorithm: FixedWindow, Rate: 50, Period: time.Minute}, PerHour(1000)}},
			steps: []map[string]string{
				{
					"RateLimit-Policy":      `"api-0";q=10;w=1, "api-1";q=50;w=60, "api-2";q=1000;w=3600`,
					"RateLimit":             `"api-0";r=9;t=1, "api-1";r=49;t=55, "api-2";r=999;t=4`,
					"X-RateLimit-Limit":     "10",
					"X-RateLimit-Remaining": "9",
				},
			},
			outcome: []Outcome{OutcomeAllowed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := polNew(t, tt.policy)
			for i, want := range tt.steps {
				d, h := polDecide(p, polFrom("192.0.2.2"))
				if d.Outcome != tt.outcome[i] {
					t.Fatalf("step %d: outcome %v (err %v), want %v", i, d.Outcome, d.Err, tt.outcome[i])
				}
				polCheckHeaders(t, "step "+strconv.Itoa(i), h, want)
			}
		})
	}
}

// TestPolicyGlobalCeiling: the Global denies once its ceiling is reached
// across different keys, and reports itself in the headers.
func TestPolicyGlobalCeiling(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := New(rdb, WithPrefix(opsPrefix(t)), opsPatient)
	global := Limit{Algorithm: SlidingWindow, Rate: 3, Period: time.Hour}
	perKey := PerHour(100)
	p := polNew(t, Policy{Limiter: l, Limit: perKey, Global: &global})
	ips := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"}
	for i, ip := range ips {
		d, h := polDecide(p, polFrom(ip))
		want := OutcomeAllowed
		if i >= 3 {
			want = OutcomeDenied
		}
		if d.Outcome != want {
			t.Fatalf("request %d from %s: %v (err %v), want %v", i+1, ip, d.Outcome, d.Err, want)
		}
		if want == OutcomeDenied {
			polCheckHeaders(t, ip, h, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "Retry-After": "3600"})
		} else {
			polCheckHeaders(t, ip, h, map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99"})
		}
	}
	n, err := rdb.ZCard(ctx, redisKey(l.prefix, "http|global", SlidingWindow)).Result()
	if err != nil || n != 3 {
		t.Errorf("global log holds %d, %v; want 3 (denials take nothing)", n, err)
	}
	// As documented, a request the Global denies has used its key's quota.
	r, err := l.Peek(ctx, "http:ip:192.0.2.5", perKey)
	if err != nil || r.Remaining != 99 {
		t.Errorf("key of a request the Global denied: %+v, %v; want Remaining 99", r, err)
	}
}

// TestPolicyGlobalOnlyAfterLayersAdmit: requests their key's layers deny
// never reach the Global: one Redis command each, and the Global's state
// counts only the admitted.
func TestPolicyGlobalOnlyAfterLayersAdmit(t *testing.T) {
	ctx := context.Background()
	for _, withLayers := range []bool{false, true} {
		t.Run("layers="+strconv.FormatBool(withLayers), func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			var count opsCounter
			rdb.AddHook(&count)
			l := New(rdb, WithPrefix(opsPrefix(t)), opsPatient)
			global := Limit{Algorithm: SlidingWindow, Rate: 100, Period: time.Hour}
			pol := Policy{Limiter: l, Limit: PerHour(10), Global: &global}
			if withLayers {
				pol.Layers = []Limit{{Algorithm: SlidingWindow, Rate: 2, Period: time.Hour}}
			} else {
				pol.Limit = Limit{Algorithm: SlidingWindow, Rate: 2, Period: time.Hour}
			}
			p := polNew(t, pol)
			for i := range 2 {
				if d := p.Decide(polFrom("198.51.100.1")); d.Outcome != OutcomeAllowed {
					t.Fatalf("request %d: %v (err %v), want allowed", i+1, d.Outcome, d.Err)
				}
			}
			for i := range 5 {
				before := count.cmds.Load()
				d := p.Decide(polFrom("198.51.100.1"))
				if d.Outcome != OutcomeDenied {
					t.Fatalf("denied request %d: %v (err %v), want denied", i+1, d.Outcome, d.Err)
				}
				if got := count.cmds.Load() - before; got != 1 {
					t.Errorf("denied request %d sent %d Redis commands, want 1 (the key's decision only)", i+1, got)
				}
			}
			n, err := rdb.ZCard(ctx, redisKey(l.prefix, "http|global", SlidingWindow)).Result()
			if err != nil || n != 2 {
				t.Errorf("global log holds %d, %v; want 2 (only the admitted)", n, err)
			}
		})
	}
}

// TestPolicyLayersWaitLeakyDelay: an admitted request waits out the Delay
// of a LeakyBucket layer even when another layer is reported as the
// strictest: shaping must not depend on which layer has the least
// Remaining.
func TestPolicyLayersWaitLeakyDelay(t *testing.T) {
	_, rdb := redistest.Mini(t) // frozen clock: the queue does not drain
	l := New(rdb, WithPrefix(opsPrefix(t)), opsPatient)
	shaper := Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, Burst: 10}
	tests := []struct {
		name   string
		policy Policy
	}{
		{"leaky bucket is layer 0", Policy{Limiter: l, Name: "a", Limit: shaper, Layers: []Limit{PerHour(2)}}},
		{"leaky bucket is layer 1", Policy{Limiter: l, Name: "b", Limit: PerHour(2), Layers: []Limit{shaper}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := polNew(t, tt.policy)
			if d := p.Decide(polFrom("192.0.2.9")); d.Outcome != OutcomeAllowed {
				t.Fatalf("first request: %v (err %v)", d.Outcome, d.Err)
			}
			start := time.Now()
			d := p.Decide(polFrom("192.0.2.9"))
			waited := time.Since(start)
			if d.Outcome != OutcomeAllowed {
				t.Fatalf("second request: %v (err %v)", d.Outcome, d.Err)
			}
			var delay time.Duration
			for _, r := range d.Layers {
				delay = max(delay, r.Delay)
			}
			if delay != 100*time.Millisecond {
				t.Fatalf("layers' largest Delay %v, want 100ms (one unit queued ahead)", delay)
			}
			if waited < 90*time.Millisecond {
				t.Errorf("Decide returned after %v, want it to wait the leaky bucket layer's Delay %v (Result reported: %+v)", waited, delay, d.Result)
			}
		})
	}
}

// TestPolicyDryRunNeverDenies: a dry run decides and counts, sends the
// rate-limit headers, but lets every request through.
func TestPolicyDryRunNeverDenies(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := New(rdb, WithPrefix(opsPrefix(t)), opsPatient)
	for _, layers := range [][]Limit{nil, {PerHour(100)}} {
		t.Run("layers="+strconv.Itoa(len(layers)), func(t *testing.T) {
			p := polNew(t, Policy{Limiter: l, Name: "dry" + strconv.Itoa(len(layers)), Limit: PerHour(2),
				Layers: layers, DryRun: true, Headers: HeadersBoth})
			for i := range 5 {
				d, h := polDecide(p, polFrom("203.0.113.1"))
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
				remaining := strconv.Itoa(max(0, 1-i))
				polCheckHeaders(t, "request "+strconv.Itoa(i+1), h, map[string]string{
					"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": remaining, "Retry-After": "",
				})
				if h.Get("RateLimit") == "" || h.Get("RateLimit-Policy") == "" {
					t.Errorf("request %d: IETF headers missing: %v", i+1, h)
				}
			}
		})
	}
}

// TestPolicyInvalidCostFailsClosed: a cost that can never be admitted is a
// caller error: the request does not proceed even with FailOpen, and
// nothing is consumed.
func TestPolicyInvalidCostFailsClosed(t *testing.T) {
	tests := []struct {
		name    string
		cost    int
		layers  []Limit
		limitFn func(Request) (Limit, bool)
		wantErr error
	}{
		{"zero cost", 0, nil, nil, ErrInvalidCost},
		{"negative cost", -5, nil, nil, ErrInvalidCost},
		{"cost above capacity", 11, nil, nil, ErrInvalidCost},
		{"zero cost, layers", 0, []Limit{PerHour(100)}, nil, ErrInvalidCost},
		{"cost above a layer's capacity", 6, []Limit{PerHour(5)}, nil, ErrInvalidCost},
		{"invalid limit from LimitFunc", 1, nil, func(Request) (Limit, bool) { return Limit{Rate: -1, Period: time.Second}, true }, ErrInvalidLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr, rdb := redistest.Mini(t)
			var reported error
			p := polNew(t, Policy{Limiter: New(rdb, WithPrefix(opsPrefix(t)), opsPatient), Limit: PerSecond(10), Layers: tt.layers,
				LimitFunc: tt.limitFn, Fail: FailOpen, Cost: func(Request) int { return tt.cost },
				OnError: func(_ Request, err error) { reported = err }})
			d, h := polDecide(p, polFrom("192.0.2.1"))
			if d.Outcome != OutcomeFailedClosed || d.Proceed() || d.Status() != http.StatusServiceUnavailable {
				t.Errorf("outcome %v, Proceed %v, Status %d; want failed closed, not proceeding, 503", d.Outcome, d.Proceed(), d.Status())
			}
			if !errors.Is(d.Err, tt.wantErr) || !errors.Is(reported, tt.wantErr) {
				t.Errorf("Err %v, OnError told %v; want %v", d.Err, reported, tt.wantErr)
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

func TestPolicyLayersGlobalValidated(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := New(rdb)
	bad := Limit{Rate: 0, Period: time.Second}
	tests := []struct {
		name    string
		policy  Policy
		wantMsg string
	}{
		{"bad layer", Policy{Limiter: l, Limit: PerSecond(1), Layers: []Limit{PerHour(5), bad}}, "Policy.Layers[1]"},
		{"bad global", Policy{Limiter: l, Limit: PerSecond(1), Global: &bad}, "Policy.Global"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPolicy(tt.policy)
			if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("NewPolicy = %v, want ErrInvalidLimit naming %s", err, tt.wantMsg)
			}
		})
	}
}

// TestPolicyKeyFirst: the first key function that yields a key wins; the
// rest are not consulted; with none, the last error is reported.
func TestPolicyKeyFirst(t *testing.T) {
	user := func(r Request) (string, error) {
		if v := r.Header("X-User"); v != "" {
			return "user:" + v, nil
		}
		return "", nil // no user: let the next one try
	}
	apiKey := KeyByHeader("X-API-Key", nil)
	errBoom := errors.New("boom")
	failing := func(Request) (string, error) { return "", errBoom }
	req := func(remote string, kv ...string) polRequest {
		r := polRequest{remote: remote, header: http.Header{}}
		for i := 0; i+1 < len(kv); i += 2 {
			r.header.Set(kv[i], kv[i+1])
		}
		return r
	}
	tests := []struct {
		name    string
		keys    []KeyFunc
		req     polRequest
		want    string
		wantErr bool
	}{
		{"user first", []KeyFunc{user, apiKey, KeyByIP(nil)}, req("192.0.2.1:1", "X-User", "alice", "X-API-Key", "k1"), "user:alice", false},
		{"then API key", []KeyFunc{user, apiKey, KeyByIP(nil)}, req("192.0.2.1:1", "X-API-Key", "k1"), "h:X-Api-Key:k1", false},
		{"then IP", []KeyFunc{user, apiKey, KeyByIP(nil)}, req("192.0.2.1:1"), "ip:192.0.2.1", false},
		{"an error is passed over", []KeyFunc{failing, KeyByIP(nil)}, req("192.0.2.1:1"), "ip:192.0.2.1", false},
		{"none yields: last error", []KeyFunc{user, apiKey}, req("192.0.2.1:1"), "", true},
		{"none yields, failing last", []KeyFunc{apiKey, failing}, req("192.0.2.1:1"), "", true},
		{"no functions", nil, req("192.0.2.1:1"), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := KeyFirst(tt.keys...)(tt.req)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("KeyFirst = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if _, err := KeyFirst(apiKey, failing)(req("192.0.2.1:1")); !errors.Is(err, errBoom) {
		t.Errorf("KeyFirst error = %v, want the last one (boom)", err)
	}

	// Through a Policy: one user from two addresses shares one quota; a
	// request no key function can key fails (open) and is reported.
	_, rdb := redistest.Mini(t)
	var reported error
	p := polNew(t, Policy{Limiter: New(rdb, WithPrefix(opsPrefix(t)), opsPatient), Limit: PerHour(1),
		Key: KeyFirst(user, apiKey), OnError: func(_ Request, err error) { reported = err }})
	if d := p.Decide(req("192.0.2.1:1", "X-User", "bob")); d.Outcome != OutcomeAllowed {
		t.Errorf("bob from .1: %v, want allowed", d.Outcome)
	}
	if d := p.Decide(req("192.0.2.2:1", "X-User", "bob")); d.Outcome != OutcomeDenied {
		t.Errorf("bob from .2: %v, want denied (same user, same quota)", d.Outcome)
	}
	if d := p.Decide(req("192.0.2.2:1", "X-API-Key", "k9")); d.Outcome != OutcomeAllowed {
		t.Errorf("an API key from .2: %v, want allowed (its own quota)", d.Outcome)
	}
	d := p.Decide(req("192.0.2.3:1"))
	if d.Outcome != OutcomeFailedOpen || !d.Proceed() || reported == nil {
		t.Errorf("unkeyable request: %v, Proceed %v, reported %v; want failed open and reported", d.Outcome, d.Proceed(), reported)
	}
}

// polEvents records what an Observer is told.
type polEvents struct{ events []Event }

func (o *polEvents) Observe(e Event) { o.events = append(o.events, e) }

// TestPolicyRedisFault: only a Limiter that could not reach Redis is a
// Redis fault; a request the key function cannot key, or a cost that can
// never pass, is not, so metrics of Redis errors stay true.
func TestPolicyRedisFault(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	var obs polEvents
	p := polNew(t, Policy{Limiter: New(rdb, WithPrefix(opsPrefix(t)), opsPatient), Limit: PerSecond(5),
		Key: KeyByHeader("X-API-Key", nil), Observer: &obs,
		Cost: func(r Request) int {
			if r.Header("X-Cost") != "" {
				return 100
			}
			return 1
		}})
	withKey := polFrom("192.0.2.1")
	withKey.header.Set("X-API-Key", "k")
	huge := polFrom("192.0.2.1")
	huge.header.Set("X-API-Key", "k")
	huge.header.Set("X-Cost", "yes")

	p.Decide(withKey)
	p.Decide(polFrom("192.0.2.1")) // no key
	p.Decide(huge)                 // cost above capacity
	mr.Close()
	p.Decide(withKey) // Redis gone
	tests := []struct {
		name    string
		outcome Outcome
		fault   bool
	}{
		{"allowed", OutcomeAllowed, false},
		{"unkeyable", OutcomeFailedOpen, false},
		{"cost above capacity", OutcomeFailedClosed, false},
		{"redis gone", OutcomeFailedOpen, true},
	}
	if len(obs.events) != len(tests) {
		t.Fatalf("observed %d events, want %d", len(obs.events), len(tests))
	}
	for i, tt := range tests {
		if got := obs.events[i]; got.Outcome != tt.outcome || got.RedisFault != tt.fault {
			t.Errorf("%s: Outcome %v RedisFault %v (err %v), want %v %v", tt.name, got.Outcome, got.RedisFault, got.Err, tt.outcome, tt.fault)
		}
	}
}

// TestPolicyEmptyKey: a key function that finds nothing must not put every
// such request into one shared bucket.
func TestPolicyEmptyKey(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	p := polNew(t, Policy{Limiter: New(rdb, WithPrefix(opsPrefix(t)), opsPatient), Limit: PerSecond(1),
		Key: func(Request) (string, error) { return "", nil }})
	for _, ip := range []string{"192.0.2.1", "192.0.2.2"} {
		d := p.Decide(polFrom(ip))
		if d.Outcome != OutcomeFailedOpen || !errors.Is(d.Err, ErrEmptyKey) {
			t.Errorf("%s: Outcome %v, err %v; want failed_open with ErrEmptyKey", ip, d.Outcome, d.Err)
		}
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("empty keys wrote %q to Redis, want nothing", keys)
	}
}

// TestPolicyDryRunNeverBlocks: a dry run serves the request even when it
// would fail closed.
func TestPolicyDryRunNeverBlocks(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	p := polNew(t, Policy{Limiter: New(rdb, WithPrefix(opsPrefix(t)), opsPatient), Limit: PerSecond(1),
		Fail: FailClosed, DryRun: true})
	mr.Close()
	d := p.Decide(polFrom("192.0.2.1"))
	if d.Outcome != OutcomeFailedClosed || !d.Proceed() || d.Status() != 0 {
		t.Errorf("Outcome %v, Proceed %v, Status %d; want failed_closed that still proceeds", d.Outcome, d.Proceed(), d.Status())
	}
	// A served request carries no Retry-After: it would tell the client to
	// wait for an answer it already has.
	d.WriteHeaders(func(name, value string) {
		t.Errorf("a dry run that proceeds wrote %s: %s", name, value)
	})
	if s := d.RetryAfter(); s != 0 {
		t.Errorf("RetryAfter() = %d, want 0 for a request that proceeds", s)
	}
}

// TestPolicyLeakyDefaultWait: without MaxWait or MaxDelay, a leaky bucket
// may hold a request as long as a full queue takes to drain, so all of
// Burst is usable, and no longer.
func TestPolicyLeakyDefaultWait(t *testing.T) {
	p := &Policy{}
	tests := []struct {
		name  string
		limit Limit
		want  time.Duration
	}{
		{"burst = rate", Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second}, time.Second},
		{"burst 5x rate", Limit{Algorithm: LeakyBucket, Rate: 2, Period: time.Second, Burst: 10}, 5 * time.Second},
		{"own MaxDelay kept", Limit{Algorithm: LeakyBucket, Rate: 2, Period: time.Second, MaxDelay: time.Second}, time.Second},
		{"not leaky", Limit{Rate: 2, Period: time.Second}, 0},
	}
	for _, tt := range tests {
		if got := p.capWait(tt.limit).MaxDelay; got != tt.want {
			t.Errorf("%s: MaxDelay %v, want %v", tt.name, got, tt.want)
		}
	}
	p.MaxWait = 2 * time.Second
	if got := p.capWait(tests[1].limit).MaxDelay; got != 2*time.Second {
		t.Errorf("MaxWait 2s: MaxDelay %v, want 2s", got)
	}
}
