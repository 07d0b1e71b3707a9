package ginlimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/httplimit"
)

// request is the httplimit.Request of a *gin.Context. It is
// pointer-shaped, so passing it as an interface does not allocate.
type request struct{ c *gin.Context }

func (q request) Context() context.Context    { return q.c.Request.Context() }
func (q request) RemoteAddr() string          { return q.c.Request.RemoteAddr }
func (q request) Method() string              { return q.c.Request.Method }
func (q request) Header(name string) []string { return q.c.Request.Header.Values(name) }

// Route is the matched route pattern (c.FullPath(), "/items/:id"), "" when
// no route matched.
func (q request) Route() string { return q.c.FullPath() }

// Context is the *gin.Context behind r, for the hooks of httplimit.Config
// (Key, LimitFunc, Cost) that need more than httplimit.Request offers; nil
// for a request of another adapter.
func Context(r httplimit.Request) *gin.Context {
	if q, ok := r.(request); ok {
		return q.c
	}
	return nil
}

var errNotGin = errors.New("ginlimit: key function used outside a ginlimit middleware")

// KeyByContextValue keys requests by the string an earlier handler stored
// with c.Set(name, value), typically the authenticated user or tenant. A
// request without it cannot be keyed, and is refused (see
// httplimit.Config.ServeUnkeyed): mount the limiter after the
// authentication middleware.
func KeyByContextValue(name string) httplimit.KeyFunc {
	return func(r httplimit.Request) (string, error) {
		c := Context(r)
		if c == nil {
			return "", errNotGin
		}
		if v := c.GetString(name); v != "" {
			return "ctx:" + v, nil
		}
		return "", fmt.Errorf("ginlimit: no %q in the context", name)
	}
}

// clientIP is a request whose peer address is Gin's resolved client IP.
type clientIP struct{ request }

func (q clientIP) RemoteAddr() string { return q.c.ClientIP() }

// KeyByClientIP keys requests by Gin's c.ClientIP(), grouped like
// httplimit.KeyByIP (IPv6 by /64).
//
// Use it only if you configured Gin's trusted proxies
// (engine.SetTrustedProxies or engine.TrustedPlatform): by default Gin
// trusts X-Forwarded-For from every peer, so any client could choose its
// own key. The default key, the peer address, does not depend on Gin's
// settings.
func KeyByClientIP() httplimit.KeyFunc {
	byIP, _ := httplimit.KeyByIP(httplimit.ClientIP{}) // the zero ClientIP is always valid
	return func(r httplimit.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errNotGin
		}
		return byIP(clientIP{q})
	}
}
