// Package echolimit is Redis-backed rate limiting middleware for Echo v4
// (github.com/labstack/echo/v4; package echov5limit serves Echo v5):
// every instance of a service shares one limit per key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	limiter, err := core.New(rdb) // one per client, shared by every Policy
//	if err != nil { ... }
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	if err != nil { ... }
//	e := echo.New()
//	e.Use(echolimit.New(policy))
//
// or, in the shape of Echo's own rate limiter:
//
//	mw, err := echolimit.Config{
//		Skipper:             func(c echo.Context) bool { return c.Path() == "/healthz" },
//		Policy:              policy,
//		IdentifierExtractor: func(c echo.Context) (string, error) { return c.Get("user").(string), nil },
//	}.ToMiddleware()
//
// Unlike Echo's own limiter, whose store answers only allowed or not, every
// response carries the quota: every decision is httplimit's (see
// httplimit.Policy), and this package only reads the echo.Context and
// writes the decision back, so the responses, headers, keys and client IPs
// are those the httplimit documentation describes. Check and Reset,
// and httplimit.Policy.ReportCost, work from inside a handler. The
// repository's examples/echo is a complete server.
//
// # Client IPs
//
// The default key is the address of the peer that opened the connection
// (RemoteAddr). Echo's c.RealIP() is not used: without an IPExtractor,
// Echo v4 takes the first X-Forwarded-For entry from anyone, so any client
// could choose its key. Behind a reverse proxy, give httplimit.KeyByIP
// your proxies; or, if you configured e.IPExtractor, key with KeyByRealIP
// to defer to Echo.
//
// httplimit.KeyByRoute sees c.Path(), the matched route pattern.
package echolimit
