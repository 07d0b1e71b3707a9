// Package fiberlimit is Redis-backed rate limiting middleware for Fiber v2
// (github.com/gofiber/fiber/v2; package fiberv3limit serves Fiber v3):
// every instance of a service shares one limit per key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	limiter, err := core.New(rdb) // one per client, shared by every Policy
//	if err != nil { ... }
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	if err != nil { ... }
//	app := fiber.New()
//	app.Use(fiberlimit.New(fiberlimit.Config{Policy: policy}))
//
// Config has the shape of Fiber's own middleware configs (Next,
// KeyGenerator, LimitReached). Unlike Fiber's own limiter, every response
// carries the quota, denials included: every decision is httplimit's (see
// httplimit.Policy), and this package only reads the *fiber.Ctx and writes
// the decision back, so the responses, headers, keys and client IPs are
// those the httplimit documentation describes. Check and Reset, and
// httplimit.Policy.ReportCost, work from inside a handler. The
// repository's examples/fiber is a complete server.
//
// # Fiber specifics
//
// The default key is the address of the peer that opened the connection.
// Fiber's c.IP() is not used implicitly: it reads Config.ProxyHeader from
// any peer unless EnableTrustedProxyCheck is on. Behind a reverse proxy,
// give httplimit.KeyByIP your proxies; or, if you configured Fiber's
// ProxyHeader with EnableTrustedProxyCheck and TrustedProxies, key with
// KeyByFiberIP to defer to Fiber.
//
// The route httplimit sees (KeyByRoute, Request.Route) is c.Route().Path,
// the route being executed. For a middleware registered with app.Use or on
// a group, that is the Use prefix ("/"), not the handler's pattern: for
// per-route keys, register the middleware on the routes themselves
// (app.Get("/items/:id", limit, handler)).
//
// The request context httplimit sees is c.UserContext(): fasthttp does not
// end a request's context when the client goes away, so the wait of a
// core.LeakyBucket request ends early only when that context ends (set one
// with c.SetUserContext, with a deadline, say).
package fiberlimit
