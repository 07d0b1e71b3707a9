// Package echolimit is rate limiting middleware for Echo v4 that shares
// each limit across every instance of a service through Redis (Echo v5:
// package echov5limit).
//
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	e.Use(echolimit.New(policy)) // or Config{Skipper: ..., Policy: policy}.ToMiddleware()
//
// Every decision is the httplimit.Policy's; this package only reads the
// echo.Context. The default key is the peer's address, not c.RealIP(): see
// docs/http.md#echo-v4 in the repository for client IPs and routes, and
// examples/echo for a complete server.
package echolimit
