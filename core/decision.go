package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Request is what the decision step reads from an HTTP request. Each adapter
// implements it over its framework's request type; all the logic that turns a
// request into a decision and a response lives here, once.
type Request interface {
	// Context is the request's context: it bounds the decision and any wait.
	Context() context.Context
	// RemoteAddr is the peer's address, "ip:port" as net/http gives it.
	RemoteAddr() string
	// Header returns every line of the named request header joined with
	// ", " (HeaderValue does this for an http.Header), "" if absent.
	Header(name string) string
	// Method is the HTTP method.
	Method() string
	// Route is the matched route pattern ("/users/:id"), or "" where the
	// framework has not matched one yet (middleware wrapping a whole mux).
	Route() string
}

// KeyFunc returns the key a request is limited by. An error (or an empty key)
// means the request cannot be keyed; the Policy then applies its fail policy
// and reports the error.
type KeyFunc func(Request) (string, error)

// KeyByIP keys requests by client IP as c resolves it (see ClientIP). A nil
// c is the secure default: the peer address, IPv6 grouped by /64.
func KeyByIP(c *ClientIP) KeyFunc {
	if c == nil {
		c = &ClientIP{}
	}
	return func(r Request) (string, error) {
		ip, err := c.Key(r.RemoteAddr(), r.Header)
		return "ip:" + ip, err
	}
}

// KeyByHeader keys requests by the value of a header (an API key, a tenant),
// and requests without it by fallback (typically KeyByIP), or refuses them
// when fallback is nil. Values are bounded by the Limiter, which hashes keys
// longer than MaxKeyLen.
func KeyByHeader(name string, fallback KeyFunc) KeyFunc {
	prefix := "h:" + http.CanonicalHeaderKey(name) + ":"
	return func(r Request) (string, error) {
		if v := r.Header(name); v != "" {
			return prefix + v, nil
		}
		if fallback == nil {
			return "", fmt.Errorf("core: request has no %s header", name)
		}
		return fallback(r)
	}
}

// KeyFirst keys a request by the first of keys that yields a non-empty key
// without error (a user ID, else an API key, else the client IP), and
// reports the last error when none does.
func KeyFirst(keys ...KeyFunc) KeyFunc {
	return func(r Request) (string, error) {
		err := errNoKeys
		for _, k := range keys {
			var key string
			if key, err = k(r); err == nil && key != "" {
				return key, nil
			}
		}
		return "", err
	}
}

// KeyByRoute keys requests by method and route pattern, so each route has
// one limit shared by all clients. It never falls back to the URL path,
// which a client could vary to get a fresh limit: mount the middleware where
// the framework knows the route, or the request fails as unkeyable.
func KeyByRoute() KeyFunc {
	return func(r Request) (string, error) {
		route := r.Route()
		if route == "" {
			return "", errNoRoute
		}
		return "route:" + r.Method() + " " + route, nil
	}
}

var (
	errNoRoute = errors.New("core: KeyByRoute: no route pattern for this request; mount the middleware on the routes")
	errNoKeys  = errors.New("core: KeyFirst has no key functions")
)

// HeaderValue returns every line of header name in h joined with ", ", as
// Request.Header must: a proxy may add its own X-Forwarded-For line instead
// of appending to the client's.
func HeaderValue(h http.Header, name string) string {
	v := h.Values(name)
	switch len(v) {
	case 0:
		return ""
	case 1:
		return v[0]
	}
	return strings.Join(v, ", ")
}

// FailPolicy says what a request gets when the Limiter fails (Redis down,
// slower than the timeout, or the key function failing).
type FailPolicy uint8

const (
	// FailOpen serves the request, without rate-limit headers. Default.
	FailOpen FailPolicy = iota
	// FailClosed answers 503 with Retry-After: 1.
	FailClosed
)

// ParseFailPolicy parses "open" or "closed".
func ParseFailPolicy(s string) (FailPolicy, error) {
	switch s {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return 0, fmt.Errorf("core: unknown fail policy %q, want open or closed", s)
}

// HeaderStyle selects the rate-limit response headers.
type HeaderStyle uint8

const (
	// HeadersXRateLimit sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix epoch seconds when the quota is whole again,
	// as GitHub does). Default.
	HeadersXRateLimit HeaderStyle = iota
	// HeadersIETF sends the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers (structured fields; t is seconds
	// until the quota is whole again).
	HeadersIETF
	// HeadersBoth sends both sets.
	HeadersBoth
	// HeadersNone sends neither; denials still carry Retry-After.
	HeadersNone
)

// ParseHeaderStyle parses "xratelimit", "ietf", "both" or "none".
func ParseHeaderStyle(s string) (HeaderStyle, error) {
	for i, name := range [...]string{"xratelimit", "ietf", "both", "none"} {
		if s == name {
			return HeaderStyle(i), nil
		}
	}
	return 0, fmt.Errorf("core: unknown header style %q, want xratelimit, ietf, both or none", s)
}

// Policy is the shared decision step of the HTTP adapters: it keys a
// request, asks the Limiter, waits out a LeakyBucket delay, applies the fail
// policy, and says what to answer. Build one with NewPolicy.
type Policy struct {
	// Limiter decides. Required.
	Limiter *Limiter
	// Name namespaces the keys of this policy, so two middlewares on one app
	// never share counters by accident, and names the IETF policy.
	// Default: "http".
	Name string
	// Limit applies to every request, unless LimitFunc chooses another.
	// Required, even with LimitFunc: it is the fallback.
	Limit Limit
	// LimitFunc, if set, chooses the Limit per request (a tenant's tier, an
	// override); its second result false means "use Limit". The state
	// belongs to the key, not to the Limit: requests of one key under
	// different Limits share it, as after a change of Limit, so a generous
	// Limit refills what a strict one spent. For routes with limits of
	// their own, put the route in the key (Request.Route), or mount one
	// middleware per route, each with its own Name.
	LimitFunc func(Request) (Limit, bool)
	// Layers are further limits on the same key, decided atomically with
	// Limit in one round trip (e.g. Limit 10 per second, Layers 1000 per
	// hour): a request is admitted only if all admit, and consumes from all.
	// Headers report the strictest layer; the IETF fields list every layer
	// as its own policy ("<Name>-0", "<Name>-1", ...). Default: none.
	Layers []Limit
	// Global, if set, is a ceiling shared by all keys (e.g. 5000 per second
	// for the whole API). It is decided after the key's layers admit, as a
	// separate round trip on its own key: on a Redis Cluster one key for
	// everyone lives on one shard, so checking it only for requests the
	// key's layers admit keeps that shard's load to the admitted rate. A
	// request the Global denies has still used its key's quota.
	// Default: none.
	Global *Limit
	// Key chooses the key. Default: KeyByIP(ClientIP).
	Key KeyFunc
	// ClientIP resolves client addresses for the default key. Default: nil,
	// the peer address (see ClientIP).
	ClientIP *ClientIP
	// Cost, if set, says how many units a request costs. Default: 1.
	Cost func(Request) int
	// Headers selects the response headers. Default: HeadersXRateLimit.
	Headers HeaderStyle
	// Fail is what happens when the Limiter fails. Default: FailOpen.
	Fail FailPolicy
	// DryRun decides, counts and sends headers but never denies nor delays,
	// not even when failing closed: for rolling a limit out safely. Denials
	// still reach Observer.
	DryRun bool
	// MaxWait caps how long a LeakyBucket request is held before it
	// proceeds; one that would wait longer is denied without using capacity.
	// It only ever lowers a Limit's own MaxDelay. Default (0): the Limit's
	// MaxDelay, or when that is 0 too the time a full queue takes to drain
	// (Burst × Period / Rate: Period when Burst is Rate).
	MaxWait time.Duration
	// OnError, if set, is told of every failure (Redis, timeout, key).
	OnError func(Request, error)
	// Observer, if set, is told of every decision (for metrics).
	Observer Observer

	policyField string // the quoted IETF policy name
}

// Observer is told of every decision. It must be safe for concurrent use and
// fast: it runs on the request path. The metrics packages implement it.
type Observer interface {
	Observe(Event)
}

// Event describes one decision, for an Observer. It carries no key: keys
// are unbounded, and metric labels must not be.
type Event struct {
	// Policy is the Policy's Name.
	Policy string
	// Algorithm is the Limit's algorithm.
	Algorithm Algorithm
	// Outcome is what the request got.
	Outcome Outcome
	// Latency is how long the decision took, without a LeakyBucket wait.
	Latency time.Duration
	// Err is the failure, for OutcomeFailedOpen and OutcomeFailedClosed.
	Err error
	// Result is the Limiter's answer (zero on failure).
	Result Result
	// RedisFault reports that Err is a failure of Redis (an error, a
	// timeout, an open circuit), not of the request or its caller.
	RedisFault bool
}

// NewPolicy checks p and fills in its defaults. Adapters call it once, at
// start-up.
func NewPolicy(p Policy) (*Policy, error) {
	if p.Limiter == nil {
		return nil, errors.New("core: Policy.Limiter is nil")
	}
	if err := p.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("core: Policy.Limit: %w", err)
	}
	for i, l := range p.Layers {
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("core: Policy.Layers[%d]: %w", i, err)
		}
	}
	if p.Global != nil {
		if err := p.Global.Validate(); err != nil {
			return nil, fmt.Errorf("core: Policy.Global: %w", err)
		}
	}
	if p.Name == "" {
		p.Name = "http"
	}
	if p.Key == nil {
		p.Key = KeyByIP(p.ClientIP)
	}
	if p.Headers > HeadersNone {
		return nil, fmt.Errorf("core: Policy.Headers %d is unknown", p.Headers)
	}
	if p.Fail > FailClosed {
		return nil, fmt.Errorf("core: Policy.Fail %d is unknown", p.Fail)
	}
	if p.MaxWait < 0 {
		return nil, fmt.Errorf("core: Policy.MaxWait must be >= 0, got %v", p.MaxWait)
	}
	p.policyField = strconv.Quote(strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '_'
		}
		return r
	}, p.Name))
	return &p, nil
}

// Outcome is what a request gets from a Decision.
type Outcome uint8

const (
	// OutcomeAllowed: the request proceeds, with rate-limit headers.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: 429, unless the Policy is a dry run.
	OutcomeDenied
	// OutcomeFailedOpen: the Limiter failed; the request proceeds without
	// rate-limit headers.
	OutcomeFailedOpen
	// OutcomeFailedClosed: the Limiter failed; 503.
	OutcomeFailedClosed
	// OutcomeCanceled: the request's context ended during the decision or
	// while it waited for its LeakyBucket delay; nobody is there to answer.
	OutcomeCanceled
)

var outcomeNames = [...]string{"allowed", "denied", "failed_open", "failed_closed", "canceled"}

// String returns the outcome's snake_case name, as used in metric labels.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Decision is the Policy's answer for one request.
type Decision struct {
	// Outcome is what the request gets.
	Outcome Outcome
	// Result is the Limiter's answer (zero when it failed).
	Result Result
	// Limit is the Limit that was applied.
	Limit Limit
	// Err is the failure behind OutcomeFailedOpen, OutcomeFailedClosed and
	// OutcomeCanceled.
	Err error
	// Layers holds every layer's Result when the Policy has Layers; Result
	// is then the strictest of them (or the Global's denial).
	Layers []Result

	policy *Policy
	now    time.Time
	own    Result // the key's own (strictest) result, before the Global
	global Result // the Global's result, when consulted
	asked  bool   // the Global was consulted
}

// Decide keys r, asks the Limiter, and, for an admitted LeakyBucket request,
// waits out its Delay (or until r's context ends).
func (p *Policy) Decide(r Request) Decision {
	d := Decision{policy: p, Limit: p.Limit}
	if p.LimitFunc != nil {
		if l, ok := p.LimitFunc(r); ok {
			d.Limit = l
		}
	}
	d.Limit = p.capWait(d.Limit)
	cost := 1
	if p.Cost != nil {
		cost = p.Cost(r)
	}
	ctx := r.Context()
	start := time.Now()
	key, err := p.Key(r)
	if err == nil && key == "" {
		// Never one shared bucket for every request that has no key.
		err = ErrEmptyKey
	}
	limiterFailed := false // as opposed to the key function
	if err == nil {
		err = p.decide(ctx, &d, key, cost)
		limiterFailed = err != nil
	}
	d.now = time.Now()
	switch {
	case err != nil && ctx.Err() != nil:
		// The client went away: neither an outage to report nor a request
		// to serve.
		d.Err, d.Outcome = err, OutcomeCanceled
	case err != nil:
		d.Err = err
		d.Outcome = OutcomeFailedOpen
		// A cost or Limit that can never be admitted is a caller error, not
		// an outage: serving it would let a huge or negative cost through.
		if p.Fail == FailClosed || errors.Is(err, ErrInvalidCost) || errors.Is(err, ErrInvalidLimit) {
			d.Outcome = OutcomeFailedClosed
		}
		if p.OnError != nil {
			p.OnError(r, err)
		}
	case !d.Result.Allowed:
		d.Outcome = OutcomeDenied
	}
	if d.Outcome == OutcomeAllowed && d.Result.Delay > 0 && !p.DryRun {
		if err := sleep(ctx, d.Result.Delay); err != nil {
			d.Outcome, d.Err = OutcomeCanceled, err
		}
	}
	if p.Observer != nil {
		p.Observer.Observe(Event{Policy: p.Name, Algorithm: d.Limit.Algorithm, Outcome: d.Outcome,
			Latency: d.now.Sub(start), Err: d.Err, Result: d.Result,
			RedisFault: limiterFailed && redisFault(ctx, err)})
	}
	return d
}

// capWait applies MaxWait to a LeakyBucket limit: it only ever lowers
// the Limit's own MaxDelay.
func (p *Policy) capWait(l Limit) Limit {
	if l.Algorithm != LeakyBucket {
		return l
	}
	limit := p.MaxWait
	if limit == 0 && l.MaxDelay == 0 && l.Rate > 0 {
		// The time a full queue takes to drain: Period when Burst == Rate.
		limit = time.Duration(float64(l.Period) * float64(l.Capacity()) / float64(l.Rate))
	}
	if limit > 0 && (l.MaxDelay == 0 || limit < l.MaxDelay) {
		l.MaxDelay = limit
	}
	return l
}

func (p *Policy) decide(ctx context.Context, d *Decision, key string, cost int) error {
	var err error
	if len(p.Layers) == 0 {
		d.Result, err = p.Limiter.AllowN(ctx, p.Name+":"+key, d.Limit, cost)
	} else {
		limits := append(append(make([]Limit, 0, 1+len(p.Layers)), d.Limit), p.Layers...)
		for i := range limits[1:] {
			limits[i+1] = p.capWait(limits[i+1])
		}
		d.Layers, err = p.Limiter.AllowLayers(ctx, p.Name+":"+key, limits, cost)
		d.Result = Strictest(d.Layers)
	}
	d.own = d.Result
	if err != nil || !d.Result.Allowed || p.Global == nil {
		return err
	}
	d.global, err = p.Limiter.AllowN(ctx, p.globalKey(), p.capWait(*p.Global), cost)
	d.asked = err == nil
	switch {
	case d.asked && !d.global.Allowed:
		d.Result = d.global
	case d.asked:
		// A request leaves when both the key and the ceiling let it.
		d.Result.Delay = max(d.Result.Delay, d.global.Delay)
	}
	return err
}

func (p *Policy) globalKey() string { return p.Name + "|global" }

// Reset forgets key's state under this Policy, in every layer and for every
// algorithm a LimitFunc might choose; key is what the Policy's KeyFunc
// returns ("ip:192.0.2.1"). The Global is shared and left alone.
func (p *Policy) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	k := p.Name + ":" + key
	keys := make([]string, 0, len(algorithmSuffix)+len(p.Layers))
	for a := range algorithmSuffix {
		keys = append(keys, layerKey(p.Limiter.prefix, k, Algorithm(a), 0))
	}
	for i, l := range p.Layers {
		keys = append(keys, layerKey(p.Limiter.prefix, k, l.Algorithm, i+1))
	}
	return p.Limiter.del(ctx, keys)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Proceed reports whether the request should go on to the handler.
func (d *Decision) Proceed() bool {
	switch d.Outcome {
	case OutcomeAllowed, OutcomeFailedOpen:
		return true
	case OutcomeDenied, OutcomeFailedClosed:
		return d.policy.DryRun
	}
	return false
}

// Status is the HTTP status to answer when the request does not proceed:
// 429 when denied, 503 when the Limiter failed closed, 499 (client closed
// request) when the request's context ended first; 0 when it proceeds.
func (d *Decision) Status() int {
	if d.Proceed() {
		return 0
	}
	switch d.Outcome {
	case OutcomeDenied:
		return http.StatusTooManyRequests
	case OutcomeFailedClosed:
		return http.StatusServiceUnavailable
	}
	return 499
}

// RetryAfter is the Retry-After value in whole seconds, rounded up and at
// least 1, so a client that obeys it never comes back too early; 1 when the
// Limiter failed closed; 0 when the request proceeds or was canceled.
func (d *Decision) RetryAfter() int64 {
	if d.Proceed() {
		return 0
	}
	switch d.Outcome {
	case OutcomeDenied:
		return max(1, ceilSeconds(d.Result.RetryAfter))
	case OutcomeFailedClosed:
		return 1
	}
	return 0
}

// WriteHeaders writes the response headers of the decision through set,
// which every framework has in this shape (http.Header.Set, gin's c.Header,
// echo's Response().Header().Set, fiber's c.Set).
func (d *Decision) WriteHeaders(set func(name, value string)) {
	p := d.policy
	if d.Outcome == OutcomeAllowed || d.Outcome == OutcomeDenied {
		r := d.Result
		if p.Headers == HeadersXRateLimit || p.Headers == HeadersBoth {
			set("X-RateLimit-Limit", strconv.Itoa(r.Limit))
			set("X-RateLimit-Remaining", strconv.Itoa(r.Remaining))
			reset := (d.now.UnixNano() + int64(r.ResetAfter) + int64(time.Second) - 1) / int64(time.Second)
			set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
		}
		if p.Headers == HeadersIETF || p.Headers == HeadersBoth {
			d.writeIETF(set)
		}
	}
	if s := d.RetryAfter(); s > 0 {
		set("Retry-After", strconv.FormatInt(s, 10))
	}
}

// writeIETF writes the draft-ietf-httpapi-ratelimit-headers fields: one
// policy, or one per layer, each a structured-field list member.
func (d *Decision) writeIETF(set func(name, value string)) {
	p := d.policy
	if len(d.Layers) == 0 && !d.asked {
		set("RateLimit-Policy", ietfPolicy(p.policyField, d.Result.Limit, d.Limit.Period))
		set("RateLimit", ietfState(p.policyField, d.Result))
		return
	}
	var pol, state strings.Builder
	member := func(suffix string, r Result, period time.Duration) {
		name := p.policyField[:len(p.policyField)-1] + suffix + `"`
		if pol.Len() > 0 {
			pol.WriteString(", ")
			state.WriteString(", ")
		}
		pol.WriteString(ietfPolicy(name, r.Limit, period))
		state.WriteString(ietfState(name, r))
	}
	if len(d.Layers) == 0 {
		member("", d.own, d.Limit.Period)
	}
	for i, r := range d.Layers {
		period := d.Limit.Period
		if i > 0 {
			period = p.Layers[i-1].Period
		}
		member("-"+strconv.Itoa(i), r, period)
	}
	if d.asked {
		member("-global", d.global, p.Global.Period)
	}
	set("RateLimit-Policy", pol.String())
	set("RateLimit", state.String())
}

func ietfPolicy(name string, quota int, period time.Duration) string {
	return name + ";q=" + strconv.Itoa(quota) + ";w=" + strconv.FormatInt(max(1, ceilSeconds(period)), 10)
}

func ietfState(name string, r Result) string {
	return name + ";r=" + strconv.Itoa(r.Remaining) + ";t=" + strconv.FormatInt(ceilSeconds(r.ResetAfter), 10)
}

// ContentType is the type of Body.
const ContentType = "application/json"

// Body is the default JSON body of a request that does not proceed:
// {"error":"rate limit exceeded","retry_after":N} when denied, with N equal
// to Retry-After, {"error":"rate limiter unavailable"} when the Limiter
// failed closed. nil when the request proceeds.
func (d *Decision) Body() []byte {
	switch {
	case d.Proceed():
		return nil
	case d.Outcome == OutcomeDenied:
		b := append(make([]byte, 0, 64), `{"error":"rate limit exceeded","retry_after":`...)
		b = strconv.AppendInt(b, d.RetryAfter(), 10)
		return append(b, '}')
	case d.Outcome == OutcomeFailedClosed:
		return []byte(`{"error":"rate limiter unavailable"}`)
	}
	return []byte(`{"error":"request canceled"}`)
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
