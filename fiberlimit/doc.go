// Package fiberlimit is Redis-backed rate limiting middleware for Fiber v2:
// every instance of a service shares one limit per key.
//
//	limiter := core.New(rdb)
//	app.Use(fiberlimit.New(fiberlimit.Config{
//		Limiter: limiter,
//		Limit:   core.PerSecond(10),
//	}))
//
// Every decision is core's (see core.Policy): this package only reads the
// *fiber.Ctx and writes the decision back.
//
// # Responses
//
// A limited response, allowed or denied (unlike Fiber's own limiter, which
// sends none on denials), carries X-RateLimit-Limit (the quota's capacity),
// X-RateLimit-Remaining and X-RateLimit-Reset, the Unix epoch second at
// which the quota is whole again, rounded up (as GitHub sends it; Fiber's
// own limiter sends seconds from now). Config.Headers selects the IETF
// draft's RateLimit-Policy and RateLimit fields instead, both sets, or
// none. A denied request gets 429, Retry-After in whole seconds (rounded
// up, at least 1) and {"error":"rate limit exceeded","retry_after":N}. When
// Redis fails or is slower than the Limiter's timeout, the request is
// served without rate-limit headers (core.FailOpen, the default) or
// answered 503 with Retry-After: 1 and {"error":"rate limiter unavailable"}
// (core.FailClosed).
//
// # Keys and client IPs
//
// Requests are keyed by client IP by default, and the client IP is the
// address of the peer that opened the connection. Fiber's c.IP() is not
// used implicitly: it reads Config.ProxyHeader from any peer unless
// EnableTrustedProxyCheck is on. Behind a reverse proxy, set
// Config.ClientIP's TrustedProxies; only then are forwarding headers read,
// right to left, skipping the trusted hops. If you configured Fiber's
// ProxyHeader with EnableTrustedProxyCheck and TrustedProxies,
// Config.Key = KeyByFiberIP() defers to Fiber instead. IPv6 clients are
// grouped by /64.
//
// Config.Key and Config.KeyGenerator key by anything else: an API key
// header (core.KeyByHeader), the route (core.KeyByRoute), the user from
// c.Locals. Keys are namespaced by Config.Name, so two middlewares never
// share counters.
//
// # Fiber specifics
//
// Strings from the *fiber.Ctx (c.Get, c.Params, c.IP, ...) alias fasthttp
// buffers that are reused after the handler returns. A KeyGenerator may
// return them: core reads the key only while deciding and copies it into
// the Redis key. Do not keep them anywhere yourself.
//
// The route core sees (core.KeyByRoute, core.Request.Route) is
// c.Route().Path, the route being executed. For a middleware registered
// with app.Use or on a group, that is the Use prefix ("/"), not the
// handler's pattern: for per-route keys or limits, register the middleware
// on the routes themselves (app.Get("/items/:id", limit, handler)), or
// choose by c.Path() in a LimitFunc or KeyGenerator.
//
// The request context core sees is c.UserContext(): fasthttp does not end a
// request's context when the client goes away, so the wait of a
// core.LeakyBucket request ends early only when that context ends (set one
// with c.SetUserContext, e.g. with a deadline).
package fiberlimit
