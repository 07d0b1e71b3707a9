// Package nethttplimit is rate limiting middleware for net/http (and so
// for chi, gorilla/mux and any http.Handler) that shares each limit across
// every instance of a service through Redis.
//
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	mux.Handle("GET /items", nethttplimit.New(policy)(items)) // or the whole mux
//
// Every decision is the httplimit.Policy's; this package only reads the
// *http.Request. Wrap handlers, not the mux, to key by route: see
// docs/http.md#nethttp in the repository, and examples/nethttp for a
// complete server.
package nethttplimit
