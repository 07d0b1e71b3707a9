package nethttplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/keyspace"
	"github.com/redlimit/redlimit/internal/observe"
)

// TransportConfig is what NewTransport makes a Transport of.
type TransportConfig struct {
	// Limiter decides, in the Redis every instance of the fleet shares.
	// Required.
	Limiter *core.Limiter
	// Limit is the upstream's quota for each key: core.PerSecond(100) for
	// an API that allows 100 requests per second. Any algorithm but
	// Concurrency; see Transport for how each pauses. Required.
	Limit core.Limit
	// Base sends the requests the quota admits. Optional. Default:
	// http.DefaultTransport.
	Base http.RoundTripper
	// Name namespaces the keys, so that the Transport never shares
	// counters with a Policy or another Transport of the same Limiter.
	// Optional. Default: "outbound".
	Name string
	// Key chooses the quota a request spends from; a request it returns ""
	// for is refused. Optional. Default: the request's URL host in lower
	// case, with its port if the URL has one: one quota per upstream.
	Key func(*http.Request) string
	// Cost is how many units a request spends, 1 to the Limit's Capacity.
	// Optional. Default: 1.
	Cost func(*http.Request) int
	// FailFast refuses a request at once, with a *LimitError, whenever the
	// quota has no room for it now (for LeakyBucket: whenever it could not
	// leave at once), instead of waiting for room with the request's
	// context. Optional. Default: false (wait).
	FailFast bool
	// MaxPause caps how long one Retry-After may pause a key: the header
	// comes from the upstream, and a typo or a hostile server must not
	// stop the fleet for a year. Negative: never pause. Optional. Default
	// (0): one hour.
	MaxPause time.Duration
}

// Transport is an http.RoundTripper that keeps outbound requests within a
// quota shared through Redis. Every process whose Transport uses the same
// Redis and Name shares it: a fleet of workers calling an API limited to
// 100 requests per second, say. Make it with NewTransport; it is safe for
// concurrent use and keeps no request.
//
// Each request spends Cost units of its Key's quota before Base sends it.
// It waits for room, or is refused with a *LimitError when the wait would
// outlast its deadline (at once with FailFast); a request not sent never
// reaches Base. An upstream's 429 or 503 with Retry-After (a 429 without
// one: a second) pauses the key on every instance; docs/http.md#outbound-calls
// has how long, per algorithm, Redis down, and the tests of each.
type Transport struct {
	limiter  *core.Limiter
	limit    core.Limit
	base     http.RoundTripper
	name     string
	key      func(*http.Request) string
	cost     func(*http.Request) int
	failFast bool
	maxPause time.Duration // < 0: never pause
	now      func() time.Time

	pausing sync.Mutex // one pause at a time: the next sees the last's charge
	floors  floors
}

// NewTransport returns the Transport cfg describes, or an error that names
// what is wrong with cfg.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	switch {
	case cfg.Limiter == nil:
		return nil, errors.New("nethttplimit: NewTransport: nil Limiter")
	case cfg.Limit.Algorithm == core.Concurrency:
		// The permit would have to outlive RoundTrip, until the body is
		// closed; http.Transport.MaxConnsPerHost bounds one process.
		return nil, errors.New("nethttplimit: NewTransport: a Concurrency Limit cannot bound outbound requests: use a rate")
	}
	if err := cfg.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("nethttplimit: NewTransport: Limit: %w", err)
	}
	t := &Transport{limiter: cfg.Limiter, limit: cfg.Limit, base: cfg.Base, name: cfg.Name, key: cfg.Key,
		cost: cfg.Cost, failFast: cfg.FailFast, maxPause: cfg.MaxPause, now: time.Now}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.name == "" {
		t.name = "outbound"
	}
	if t.key == nil {
		t.key = func(r *http.Request) string { return strings.ToLower(r.URL.Host) }
	}
	if t.maxPause == 0 {
		t.maxPause = time.Hour
	}
	if cfg.FailFast && cfg.Limit.Algorithm == core.LeakyBucket {
		// Denied, without taking a place, unless it can leave at once.
		t.limit.MaxDelay = time.Microsecond
	}
	return t, nil
}

// LimitError is the error of a request the Transport did not send because
// its quota had no room for it in time. It matches
// core.ErrWaitExceedsDeadline (and so context.DeadlineExceeded) with
// errors.Is when the wait would have outlasted the request's deadline; with
// FailFast it wraps nothing.
type LimitError struct {
	// Key is the Limiter key the request would have spent from: Name, ":"
	// and what Key returned.
	Key string
	// Result is the denial: RetryAfter (> 0) is how long until the request
	// could be sent, assuming no other traffic.
	Result core.Result

	err error
}

// Error says which quota refused the request, and why or for how long.
func (e *LimitError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("nethttplimit: outbound quota %q: %v", e.Key, e.err)
	}
	return fmt.Sprintf("nethttplimit: outbound quota %q exceeded: retry after %v", e.Key, e.Result.RetryAfter)
}

// Unwrap is core.ErrWaitExceedsDeadline's error for a wait too long for
// the deadline, nil for a FailFast refusal.
func (e *LimitError) Unwrap() error { return e.err }

// RoundTrip sends req through Base once its quota admits it (see
// Transport).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil || req.URL == nil {
		closeBody(req)
		return nil, errors.New("nethttplimit: Transport: nil request or URL")
	}
	if t == nil || t.limiter == nil {
		closeBody(req)
		return nil, errors.New("nethttplimit: Transport: not made by NewTransport")
	}
	key, err := t.admit(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil {
		if d := t.pauseFor(resp); d > 0 {
			t.pause(observe.Named(req.Context(), t.name), key, d)
		}
	}
	return resp, err
}

// CloseIdleConnections closes Base's idle connections, if it has any, so
// that http.Client.CloseIdleConnections reaches through the Transport.
func (t *Transport) CloseIdleConnections() {
	if t == nil {
		return
	}
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func closeBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}

// admit waits for, or refuses, the units req costs, and returns its key.
func (t *Transport) admit(req *http.Request) (string, error) {
	k := t.key(req)
	if k == "" {
		return "", fmt.Errorf("nethttplimit: Transport: no key for the request to %q", req.URL.Host)
	}
	n := 1
	if t.cost != nil {
		n = t.cost(req)
	}
	key, ctx := keyspace.Policy(t.name, k), observe.Named(req.Context(), t.name) // the Limiter's observers label its calls so
	if err := t.waitFloor(ctx, key); err != nil {
		return key, err
	}
	var r core.Result
	var err error
	if t.failFast {
		r, err = t.limiter.Allow(ctx, n, t.limit.For(key))
		if err == nil && !r.Allowed {
			return key, &LimitError{Key: key, Result: r}
		}
		if err == nil && r.Delay > 0 { // at most the 1µs MaxDelay of NewTransport
			time.Sleep(r.Delay)
		}
	} else {
		r, err = t.limiter.Wait(ctx, n, t.limit.For(key))
		if errors.Is(err, core.ErrWaitExceedsDeadline) {
			return key, &LimitError{Key: key, Result: r, err: err}
		}
	}
	if err != nil {
		if r.Granted > 0 { // ctx ended during a LeakyBucket Delay
			t.give(ctx, key, r)
		}
		return key, fmt.Errorf("nethttplimit: Transport: %q: %w", key, err)
	}
	return key, nil
}

// give returns the units of r, taken for a request that is not sent.
func (t *Transport) give(ctx context.Context, key string, r core.Result) {
	if err := t.limiter.Refund(context.WithoutCancel(ctx), r); err != nil {
		t.warn("could not give back the units of a request not sent", key, 0, err)
	}
}

func (t *Transport) warn(msg, key string, pause time.Duration, err error) {
	if log := observe.Logger(t.limiter); log != nil {
		log.Warn("nethttplimit: Transport: "+msg, "key", key, "pause", pause, "err", err)
	}
}
