// Package nethttplimit is Redis-backed rate limiting middleware for
// net/http, and so for chi, gorilla/mux and anything else built on
// http.Handler: every instance of a service shares one limit per key.
//
//	limiter := core.New(rdb)
//	handler := nethttplimit.New(limiter, core.PerSecond(10))(mux)
//
// Every decision is core's (see core.Policy): this package only reads the
// request and writes the decision back.
//
// # Responses
//
// A limited response, allowed or denied, carries X-RateLimit-Limit (the
// quota's capacity), X-RateLimit-Remaining and X-RateLimit-Reset, the Unix
// epoch second at which the quota is whole again, rounded up (as GitHub
// sends it; some peers send seconds from now instead). WithHeaders selects
// the IETF draft's RateLimit-Policy and RateLimit fields instead, both sets,
// or none. A denied request gets 429, Retry-After in whole seconds (rounded
// up, at least 1) and {"error":"rate limit exceeded","retry_after":N}.
// When Redis fails or is slower than the Limiter's timeout, the request is
// served without rate-limit headers (core.FailOpen, the default) or answered
// 503 with Retry-After: 1 and {"error":"rate limiter unavailable"}
// (core.FailClosed).
//
// # Keys and client IPs
//
// Requests are keyed by client IP by default, and the client IP is the
// address of the peer that opened the connection: X-Forwarded-For and its
// kin are ignored, because any client can send them. Behind a reverse
// proxy, pass its networks with WithClientIP; only then are forwarding
// headers read, right to left, skipping the trusted hops. IPv6 clients are
// grouped by /64. WithKey and WithKeyFunc key by anything else (an API key
// header with core.KeyByHeader, the route with core.KeyByRoute, the user).
// Keys are namespaced by WithName, so two middlewares never share counters.
//
// # Routes
//
// core.KeyByRoute and core.Request.Route see the ServeMux pattern
// (Request.Pattern, without its method) when the middleware wraps a
// handler registered on a ServeMux, and the URL path when it wraps the mux
// itself, which has not routed the request yet.
package nethttplimit
