// Package fiberv3limit is rate limiting middleware for Fiber v3 that
// shares each limit across every instance of a service through Redis
// (Fiber v2: package fiberlimit).
//
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	app.Use(fiberv3limit.New(fiberv3limit.Config{Policy: policy}))
//
// Every decision is the httplimit.Policy's; this package only reads the
// fiber.Ctx. Client IPs, per-route keys (app.Use sees only its prefix) and
// the request context differ in Fiber: see docs/http.md#fiber-v3 in the
// repository, and examples/fiberv3 for a complete server.
package fiberv3limit
