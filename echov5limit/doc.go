// Package echov5limit is Redis-backed rate limiting middleware for Echo v5
// (github.com/labstack/echo/v5; package echolimit serves Echo v4): every
// instance of a service shares one limit per key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	limiter, err := core.New(rdb) // one per client, shared by every Policy
//	if err != nil { ... }
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	if err != nil { ... }
//	mw, err := echov5limit.Config{Policy: policy}.ToMiddleware()
//	if err != nil { ... }
//	e := echo.New()
//	e.Use(mw)
//
// Config has the shape of Echo's own rate limiter's config (Skipper,
// IdentifierExtractor, ErrorHandler, DenyHandler) and, as Echo v5's
// middleware configs do, turns into middleware with ToMiddleware, which
// returns an error rather than panic. Unlike Echo's own limiter, whose
// store answers only allowed or not, every response carries the quota:
// every decision is httplimit's (see httplimit.Policy), and this package
// only reads the *echo.Context and writes the decision back, so the
// responses, headers, keys and client IPs are those the httplimit
// documentation describes. Check and Reset, and
// httplimit.Policy.ReportCost, work from inside a handler. The repository's
// examples/echov5 is a complete server.
//
// The default key is the peer's address; behind a reverse proxy, give
// httplimit.KeyByIP your proxies, or key with KeyByRealIP to defer to the
// e.IPExtractor you configured. httplimit.KeyByRoute sees c.Path(), the
// matched route pattern.
package echov5limit
