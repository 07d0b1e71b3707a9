// Package nethttplimit is Redis-backed rate limiting middleware for
// net/http, and so for chi, gorilla/mux and anything else built on
// http.Handler: every instance of a service shares one limit per key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	limiter, err := core.New(rdb) // one per client, shared by every Policy
//	if err != nil { ... }
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	if err != nil { ... }
//	limit := nethttplimit.New(policy)
//	mux.Handle("GET /items", limit(items)) // or the whole mux: limit(mux)
//
// Every decision is httplimit's (see httplimit.Policy): this package only
// reads the *http.Request and writes the decision back, so the responses,
// headers, keys and client IPs are those the httplimit documentation
// describes. Check and Reset, and httplimit.Policy.ReportCost, work
// from inside a handler. The repository's examples/nethttp is a complete
// server.
//
// # Routes
//
// httplimit.KeyByRoute and httplimit.Request.Route see the ServeMux
// pattern (Request.Pattern, without its method) when the middleware wraps a
// handler registered on a ServeMux, and nothing when it wraps the mux
// itself, which has not routed the request yet: then KeyByRoute cannot key
// the request, and it is refused.
package nethttplimit
