package echolimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit/httplimit"
)

// request is the httplimit.Request of an echo.Context, recycled (see
// wrap): hooks must not keep it after they return.
type request struct{ c echo.Context }

func (q *request) Context() context.Context    { return q.c.Request().Context() }
func (q *request) RemoteAddr() string          { return q.c.Request().RemoteAddr }
func (q *request) Method() string              { return q.c.Request().Method }
func (q *request) Header(name string) []string { return q.c.Request().Header.Values(name) }

// Route is the matched route pattern (c.Path(), "/items/:id"), "" when no
// route matched.
func (q *request) Route() string { return q.c.Path() }

// Context is the echo.Context behind r, for the hooks of httplimit.Config
// (Key, LimitFunc, Cost) that need more than httplimit.Request offers; nil
// for a request of another adapter. Do not keep it after the hook returns.
func Context(r httplimit.Request) echo.Context {
	if q, ok := r.(*request); ok {
		return q.c
	}
	return nil
}

var errNotEcho = errors.New("echolimit: key function used outside an echolimit middleware")

// KeyByContextValue keys requests by the string an earlier middleware
// stored with c.Set(name, value), typically the authenticated user or
// tenant. A request without it cannot be keyed (see Config.ErrorHandler):
// mount the limiter after the authentication middleware.
func KeyByContextValue(name string) httplimit.KeyFunc {
	return func(r httplimit.Request) (string, error) {
		c := Context(r)
		if c == nil {
			return "", errNotEcho
		}
		if v, ok := c.Get(name).(string); ok && v != "" {
			return "ctx:" + v, nil
		}
		return "", fmt.Errorf("echolimit: no %q in the context", name)
	}
}

// realIP is a request whose peer address is Echo's resolved client IP.
type realIP struct{ *request }

func (q realIP) RemoteAddr() string { return q.c.RealIP() }

// KeyByRealIP keys requests by Echo's c.RealIP(), grouped like
// httplimit.KeyByIP (IPv6 by /64).
//
// Use it only if you configured Echo's trusted proxies (e.IPExtractor,
// say echo.ExtractIPFromXFFHeader with echo.TrustIPRange): without an
// IPExtractor, Echo v4 takes the first X-Forwarded-For entry from any
// peer, so any client could choose its own key. The default key, the peer
// address, does not depend on Echo's settings.
func KeyByRealIP() httplimit.KeyFunc {
	byIP, _ := httplimit.KeyByIP(httplimit.ClientIP{}) // the zero ClientIP is always valid
	return func(r httplimit.Request) (string, error) {
		q, ok := r.(*request)
		if !ok {
			return "", errNotEcho
		}
		return byIP(realIP{q})
	}
}
