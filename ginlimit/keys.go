package ginlimit

import (
	"errors"
	"fmt"

	"github.com/redlimit/redlimit/core"
)

// errNotGin is returned by the key functions of this package when they are
// used by a Policy that is not a ginlimit middleware's.
var errNotGin = errors.New("ginlimit: key function used outside a ginlimit middleware")

// ginClientIP is a request whose peer address is Gin's resolved client IP.
type ginClientIP struct{ request }

func (q ginClientIP) RemoteAddr() string { return q.c.ClientIP() }

// KeyByGinClientIP keys requests by Gin's c.ClientIP(), grouped like
// core.KeyByIP (IPv6 by /64), for use with WithKey.
//
// Use it only if you configured Gin's trusted proxies
// (engine.SetTrustedProxies or engine.TrustedPlatform): by default Gin
// trusts X-Forwarded-For from every peer, so any client could choose its
// own key. The default key (WithClientIP) does not depend on Gin's settings.
func KeyByGinClientIP() core.KeyFunc {
	byIP := core.KeyByIP(nil)
	return func(r core.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errNotGin
		}
		return byIP(ginClientIP{q})
	}
}

// KeyByContextValue keys requests by the string an earlier handler stored
// in the context with c.Set(name, value), typically the authenticated user
// or tenant, for use with WithKey. A request without it cannot be keyed, so
// the fail policy applies (core.FailOpen serves it unlimited): mount the
// limiter after the authentication middleware, or key anonymous requests
// with a separate middleware.
func KeyByContextValue(name string) core.KeyFunc {
	return func(r core.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errNotGin
		}
		if v := q.c.GetString(name); v != "" {
			return "ctx:" + v, nil
		}
		return "", fmt.Errorf("ginlimit: no %q in the context", name)
	}
}
