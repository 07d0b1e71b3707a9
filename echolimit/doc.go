// Package echolimit is Redis-backed rate limiting middleware for Echo v4:
// every instance of a service shares one limit per key.
//
//	limiter := core.New(rdb)
//	e.Use(echolimit.New(limiter, core.PerSecond(10)))
//
//	e.Use(echolimit.WithConfig(echolimit.Config{
//		Skipper: func(c echo.Context) bool { return c.Path() == "/healthz" },
//		Limiter: limiter,
//		Limit:   core.PerMinute(100),
//		Key:     core.KeyByHeader("X-API-Key", core.KeyByIP(nil)),
//	}))
//
// Unlike Echo's own RateLimiter, whose store answers only allowed or not,
// every response carries the quota: every decision is core's (see
// core.Policy), and this package only reads the echo.Context and writes the
// decision back.
//
// # Responses
//
// A limited response, allowed or denied, carries X-RateLimit-Limit (the
// quota's capacity), X-RateLimit-Remaining and X-RateLimit-Reset, the Unix
// epoch second at which the quota is whole again, rounded up (as GitHub
// sends it; some peers send seconds from now instead). Config.Headers
// selects the IETF draft's RateLimit-Policy and RateLimit fields instead,
// both sets, or none. A denied request gets 429, Retry-After in whole
// seconds (rounded up, at least 1) and
// {"error":"rate limit exceeded","retry_after":N}. When Redis fails or is
// slower than the Limiter's timeout, the request is served without
// rate-limit headers (core.FailOpen, the default) or answered 503 with
// Retry-After: 1 and {"error":"rate limiter unavailable"} (core.FailClosed).
//
// # Keys and client IPs
//
// Requests are keyed by client IP by default, and the client IP is the
// address of the peer that opened the connection (RemoteAddr). Echo's
// c.RealIP() is not used: without an IPExtractor, Echo v4 takes the first
// X-Forwarded-For entry from anyone, so any client could choose its key.
// Behind a reverse proxy, set Config.ClientIP's TrustedProxies; only then
// are forwarding headers read, right to left, skipping the trusted hops. If
// you configured e.IPExtractor (echo.ExtractIPFromXFFHeader with trust
// options), Config.Key = KeyByEchoRealIP() defers to Echo instead. IPv6
// clients are grouped by /64.
//
// Config.Key and Config.IdentifierExtractor key by anything else: an API
// key header (core.KeyByHeader), the route pattern (core.KeyByRoute, which
// sees c.Path()), the user from c.Get. Keys are namespaced by Config.Name,
// so two middlewares never share counters.
package echolimit
