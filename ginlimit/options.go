package ginlimit

import (
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redlimit/redlimit/core"
)

// Option configures the middleware made by New.
type Option func(*config)

type config struct {
	policy core.Policy
	skip   func(*gin.Context) bool
	deny   func(*gin.Context, core.Decision)
}

// WithName names the middleware: its keys are namespaced by the name, so two
// middlewares on one app never share counters, and the IETF headers carry
// it. Default: "http".
func WithName(name string) Option {
	return func(c *config) { c.policy.Name = name }
}

// WithKey chooses the key of a request with a core.KeyFunc, such as
// core.KeyByHeader or core.KeyByRoute. Default: the client IP (see
// WithClientIP).
func WithKey(key core.KeyFunc) Option {
	return func(c *config) { c.policy.Key = key }
}

// WithKeyFunc chooses the key of a request with a function of the
// *gin.Context (the user from its context, say). An error or an empty key
// means the request cannot be keyed: the fail policy applies. It replaces
// WithKey.
func WithKeyFunc(f func(*gin.Context) (string, error)) Option {
	return WithKey(func(r core.Request) (string, error) { return f(r.(request).c) })
}

// WithLimitFunc chooses the Limit per request (a tenant's tier, say); when
// its second result is false the Limit given to New applies. One key keeps
// one state whatever its Limit: for per-route limits see
// core.Policy.LimitFunc.
func WithLimitFunc(f func(*gin.Context) (core.Limit, bool)) Option {
	return func(c *config) {
		c.policy.LimitFunc = func(r core.Request) (core.Limit, bool) { return f(r.(request).c) }
	}
}

// WithCost says how many units a request costs. Default: 1. A cost below 1
// or above the Limit's capacity is answered 503 (it could never pass).
func WithCost(f func(*gin.Context) int) Option {
	return func(c *config) {
		c.policy.Cost = func(r core.Request) int { return f(r.(request).c) }
	}
}

// WithSkip exempts the requests it reports true for (health checks,
// internal callers): they are neither counted nor given headers.
func WithSkip(f func(*gin.Context) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithHeaders selects the rate-limit response headers.
// Default: core.HeadersXRateLimit.
func WithHeaders(style core.HeaderStyle) Option {
	return func(c *config) { c.policy.Headers = style }
}

// WithFailPolicy says what a request gets when Redis fails or is slower
// than the Limiter's timeout. Default: core.FailOpen.
func WithFailPolicy(fail core.FailPolicy) Option {
	return func(c *config) { c.policy.Fail = fail }
}

// WithDryRun, when true, decides, counts and sends headers but never denies:
// for rolling a limit out safely. Default: false.
func WithDryRun(dryRun bool) Option {
	return func(c *config) { c.policy.DryRun = dryRun }
}

// WithMaxWait caps how long a core.LeakyBucket request is held before it
// proceeds; one that would wait longer is denied. The wait ends early, with
// no response worth sending, when the request's context ends.
// Default (0): see core.Policy.MaxWait (the Limit's MaxDelay, else the
// time a full queue takes to drain).
func WithMaxWait(d time.Duration) Option {
	return func(c *config) { c.policy.MaxWait = d }
}

// WithClientIP sets how the default key, the client IP, is found: give
// TrustedProxies when the app is behind a reverse proxy, and only then.
// Gin's own trusted-proxy settings do not apply here (see KeyByGinClientIP).
// Default: the peer address (forwarding headers ignored), IPv6 by /64.
// It does not apply when WithKey or WithKeyFunc is given.
func WithClientIP(ip *core.ClientIP) Option {
	return func(c *config) { c.policy.ClientIP = ip }
}

// WithDenyHandler answers the requests that do not proceed instead of the
// default JSON body; the rate-limit headers and Retry-After are already set
// when it runs. d.Outcome says why: core.OutcomeDenied,
// core.OutcomeFailedClosed, or core.OutcomeCanceled (the client left while
// a LeakyBucket request waited). The context is aborted before it runs, so
// later handlers do not. Default: d.Status() and d.Body() as JSON.
func WithDenyHandler(f func(*gin.Context, core.Decision)) Option {
	return func(c *config) { c.deny = f }
}

// WithErrorHandler is told of every failure (Redis, timeout, key), for
// logging; the fail policy still decides the response.
func WithErrorHandler(f func(*gin.Context, error)) Option {
	return func(c *config) {
		c.policy.OnError = func(r core.Request, err error) { f(r.(request).c, err) }
	}
}

// WithObserver is told of every decision, for metrics.
func WithObserver(o core.Observer) Option {
	return func(c *config) { c.policy.Observer = o }
}

// WithLayers adds further limits on the same key, decided atomically with
// the Limit given to New (say 10 per second and 1000 per hour); see
// core.Policy.Layers. Default: none.
func WithLayers(layers ...core.Limit) Option {
	return func(c *config) { c.policy.Layers = layers }
}

// WithGlobal adds a ceiling shared by all keys (the whole API's capacity);
// see core.Policy.Global. Default: none.
func WithGlobal(global core.Limit) Option {
	return func(c *config) { c.policy.Global = &global }
}
