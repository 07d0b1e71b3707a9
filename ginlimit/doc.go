// Package ginlimit is Redis-backed rate limiting middleware for Gin: every
// instance of a service shares one limit per key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	limiter, err := core.New(rdb) // one per client, shared by every Policy
//	if err != nil { ... }
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	if err != nil { ... }
//	r := gin.New()
//	r.Use(ginlimit.New(policy)) // or on a route: r.GET("/items", ginlimit.New(policy), items)
//
// Every decision is httplimit's (see httplimit.Policy): this package only
// reads the *gin.Context and writes the decision back, so the responses,
// headers, keys and client IPs are those the httplimit documentation
// describes. A request that does not proceed is aborted; failures are
// recorded with c.Error. Check and Reset, and
// httplimit.Policy.ReportCost, work from inside a handler. The repository's
// examples/gin is a complete server.
//
// # Client IPs
//
// The default key is the address of the peer that opened the connection
// (c.Request.RemoteAddr). Gin's own c.ClientIP() is not used: unless
// SetTrustedProxies was called, Gin trusts X-Forwarded-For from every peer,
// so any client could choose its key. Behind a reverse proxy, give
// httplimit.KeyByIP your proxies; or, if you configured Gin's
// (engine.SetTrustedProxies, TrustedPlatform), key with KeyByClientIP to
// defer to Gin.
//
// httplimit.KeyByRoute sees c.FullPath(), the matched route pattern.
package ginlimit
