// Package ginlimit is rate limiting middleware for Gin that shares each
// limit across every instance of a service through Redis.
//
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	r.Use(ginlimit.New(policy)) // or on a route: r.GET("/items", ginlimit.New(policy), items)
//
// Every decision is the httplimit.Policy's; this package only reads the
// *gin.Context. The default key is the peer's address, not c.ClientIP():
// see docs/http.md#gin in the repository for client IPs and routes, and
// examples/gin for a complete server.
package ginlimit
