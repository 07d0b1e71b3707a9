// Package ginlimit is Redis-backed rate limiting middleware for Gin: every
// instance of a service shares one limit per key.
//
//	limiter := core.New(rdb)
//	r.Use(ginlimit.New(limiter, core.PerSecond(10)))
//
// Every decision is core's (see core.Policy): this package only reads the
// *gin.Context and writes the decision back. It never panics while serving;
// New panics at start-up on an invalid configuration.
//
// # Responses
//
// A limited response, allowed or denied, carries X-RateLimit-Limit (the
// quota's capacity), X-RateLimit-Remaining and X-RateLimit-Reset, the Unix
// epoch second at which the quota is whole again, rounded up (as GitHub
// sends it; some peers send seconds from now instead). WithHeaders selects
// the IETF draft's RateLimit-Policy and RateLimit fields instead, both sets,
// or none. A denied request is aborted with 429, Retry-After in whole
// seconds (rounded up, at least 1) and
// {"error":"rate limit exceeded","retry_after":N}. When Redis fails or is
// slower than the Limiter's timeout, the request is served without
// rate-limit headers (core.FailOpen, the default) or aborted with 503,
// Retry-After: 1 and {"error":"rate limiter unavailable"} (core.FailClosed).
//
// # Keys and client IPs
//
// Requests are keyed by client IP by default, and the client IP is the
// address of the peer that opened the connection (c.Request.RemoteAddr).
// Gin's own c.ClientIP() is not used: unless SetTrustedProxies was called,
// Gin trusts X-Forwarded-For from every peer, so any client could choose
// its key. Behind a reverse proxy, pass its networks with WithClientIP;
// only then are forwarding headers read, right to left, skipping the
// trusted hops. If you configured Gin's trusted proxies
// (engine.SetTrustedProxies, TrustedPlatform), WithKey(KeyByGinClientIP())
// defers to Gin instead. IPv6 clients are grouped by /64.
//
// WithKey and WithKeyFunc key by anything else: an API key header
// (core.KeyByHeader), the route pattern (core.KeyByRoute, which sees
// c.FullPath()), the user an authentication middleware stored in the
// context (KeyByContextValue). Keys are namespaced by WithName, so two
// middlewares never share counters.
package ginlimit
