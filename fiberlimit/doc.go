// Package fiberlimit is rate limiting middleware for Fiber v2 that shares
// each limit across every instance of a service through Redis (Fiber v3:
// package fiberv3limit).
//
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	app.Use(fiberlimit.New(fiberlimit.Config{Policy: policy}))
//
// Every decision is the httplimit.Policy's; this package only reads the
// *fiber.Ctx. Client IPs, per-route keys (app.Use sees only its prefix) and
// the request context differ in Fiber: see docs/http.md#fiber-v2 in the
// repository, and examples/fiber for a complete server.
package fiberlimit
