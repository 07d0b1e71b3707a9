// Package echov5limit is rate limiting middleware for Echo v5 that shares
// each limit across every instance of a service through Redis (Echo v4:
// package echolimit).
//
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	mw, err := echov5limit.Config{Policy: policy}.ToMiddleware()
//	e.Use(mw)
//
// Every decision is the httplimit.Policy's; this package only reads the
// *echo.Context. See docs/http.md#echo-v5 in the repository for client IPs
// and routes, and examples/echov5 for a complete server.
package echov5limit
