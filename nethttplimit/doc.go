// Package nethttplimit is Redis-backed rate limiting middleware for
// net/http, and so for chi, gorilla/mux and anything else built on
// http.Handler: every instance of a service shares one limit per key.
//
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	if err != nil { ... }
//	handler := nethttplimit.New(policy)(mux)
//
// Every decision is httplimit's (see httplimit.Policy): this package only
// reads the *http.Request and writes the decision back, so the responses,
// headers, keys and client IPs are those the httplimit documentation
// describes. Check and Reset do the same from inside a handler.
//
// # Routes
//
// httplimit.KeyByRoute and httplimit.Request.Route see the ServeMux
// pattern (Request.Pattern, without its method) when the middleware wraps a
// handler registered on a ServeMux, and nothing when it wraps the mux
// itself, which has not routed the request yet: then KeyByRoute cannot key
// the request, and it is refused.
package nethttplimit
