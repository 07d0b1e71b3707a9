package fiberlimit

import (
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redlimit/redlimit/core"
)

// Config configures the middleware made by New.
type Config struct {
	// Next exempts the requests it reports true for (health checks,
	// internal callers): they are neither counted nor given headers.
	//
	// Optional. Default: nil
	Next func(c *fiber.Ctx) bool

	// Limiter decides, in Redis.
	//
	// Required.
	Limiter *core.Limiter

	// Limit applies to every request, unless LimitFunc chooses another.
	//
	// Optional. Default: core.PerSecond(10)
	Limit core.Limit

	// LimitFunc chooses the Limit per request (a tenant's tier, say); when
	// its second result is false Limit applies. One key keeps one state
	// whatever its Limit: for per-route limits see core.Policy.LimitFunc.
	//
	// Optional. Default: nil
	LimitFunc func(c *fiber.Ctx) (core.Limit, bool)

	// Layers are further limits on the same key, decided atomically with
	// Limit (say 10 per second and 1000 per hour); see core.Policy.Layers.
	//
	// Optional. Default: nil
	Layers []core.Limit

	// Global is a ceiling shared by all keys (the whole API's capacity); see
	// core.Policy.Global.
	//
	// Optional. Default: nil
	Global *core.Limit

	// Key chooses the key of a request: core.KeyByHeader, core.KeyByRoute,
	// KeyByFiberIP, or any core.KeyFunc.
	//
	// Optional. Default: the client IP as ClientIP finds it
	Key core.KeyFunc

	// KeyGenerator chooses the key of a request from the *fiber.Ctx (the
	// user from c.Locals, say), in the shape of Fiber's own limiter; it takes
	// precedence over Key. An empty key means the request cannot be keyed
	// (core.ErrEmptyKey): Fail applies.
	//
	// Optional. Default: nil
	KeyGenerator func(c *fiber.Ctx) string

	// Cost says how many units a request costs. A cost below 1 or above the
	// Limit's capacity is answered 503 (it could never pass).
	//
	// Optional. Default: 1 per request
	Cost func(c *fiber.Ctx) int

	// Name namespaces the keys, so two middlewares on one app never share
	// counters, and names the IETF policy.
	//
	// Optional. Default: "http"
	Name string

	// Headers selects the rate-limit response headers.
	//
	// Optional. Default: core.HeadersXRateLimit
	Headers core.HeaderStyle

	// Fail says what a request gets when Redis fails or is slower than the
	// Limiter's timeout.
	//
	// Optional. Default: core.FailOpen (served without rate-limit headers)
	Fail core.FailPolicy

	// DryRun decides, counts and sends headers but never denies: for
	// rolling a limit out safely.
	//
	// Optional. Default: false
	DryRun bool

	// MaxWait caps how long a core.LeakyBucket request is held before it
	// proceeds; one that would wait longer is denied.
	//
	// Optional. Default: 0 (see core.Policy.MaxWait: the Limit's MaxDelay,
	// else the time a full queue takes to drain)
	MaxWait time.Duration

	// ClientIP finds the client IP of the default key: set TrustedProxies
	// when the app is behind a reverse proxy, and only then. Fiber's
	// ProxyHeader does not apply here (see KeyByFiberIP). Ignored when Key
	// or KeyGenerator is set.
	//
	// Optional. Default: nil (the peer address, forwarding headers ignored,
	// IPv6 by /64)
	ClientIP *core.ClientIP

	// LimitReached answers the requests that do not proceed; the rate-limit
	// headers and Retry-After are already set when it runs. d.Outcome says
	// why: core.OutcomeDenied, core.OutcomeFailedClosed, or
	// core.OutcomeCanceled (the context ended while a LeakyBucket request
	// waited).
	//
	// Optional. Default: d.Status() and d.Body() as JSON
	LimitReached func(c *fiber.Ctx, d core.Decision) error

	// ErrorHandler is told of every failure (Redis, timeout, key), for
	// logging; Fail still decides the response.
	//
	// Optional. Default: nil
	ErrorHandler func(c *fiber.Ctx, err error)

	// Observer is told of every decision, for metrics.
	//
	// Optional. Default: nil
	Observer core.Observer
}

// ConfigDefault is the default config. Limiter has no default.
var ConfigDefault = Config{
	Limit:   core.PerSecond(10),
	Name:    "http",
	Headers: core.HeadersXRateLimit,
	Fail:    core.FailOpen,
}

// configDefault fills the unset fields of config[0] from ConfigDefault.
func configDefault(config ...Config) Config {
	if len(config) < 1 {
		return ConfigDefault
	}
	cfg := config[0]
	if cfg.Limit == (core.Limit{}) {
		cfg.Limit = ConfigDefault.Limit
	}
	if cfg.Name == "" {
		cfg.Name = ConfigDefault.Name
	}
	return cfg
}

// policy is the core.Policy of c, with the fiber-typed functions wrapped.
func (c Config) policy() core.Policy {
	p := core.Policy{
		Limiter: c.Limiter, Name: c.Name, Limit: c.Limit, Layers: c.Layers, Global: c.Global,
		Key: c.Key, Headers: c.Headers, Fail: c.Fail, DryRun: c.DryRun, MaxWait: c.MaxWait,
		Observer: c.Observer, ClientIP: c.ClientIP,
	}
	if f := c.KeyGenerator; f != nil {
		p.Key = func(r core.Request) (string, error) { return f(r.(request).c), nil }
	}
	if f := c.LimitFunc; f != nil {
		p.LimitFunc = func(r core.Request) (core.Limit, bool) { return f(r.(request).c) }
	}
	if f := c.Cost; f != nil {
		p.Cost = func(r core.Request) int { return f(r.(request).c) }
	}
	if f := c.ErrorHandler; f != nil {
		p.OnError = func(r core.Request, err error) { f(r.(request).c, err) }
	}
	return p
}
