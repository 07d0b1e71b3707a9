package echov5limit

import (
	"context"
	"errors"
	"fmt"

	"github.com/labstack/echo/v5"

	"github.com/redlimit/redlimit/httplimit"
)

// request is the httplimit.Request of an *echo.Context. It is
// pointer-shaped, so passing it as an interface does not allocate.
type request struct{ c *echo.Context }

func (q request) Context() context.Context    { return q.c.Request().Context() }
func (q request) RemoteAddr() string          { return q.c.Request().RemoteAddr }
func (q request) Method() string              { return q.c.Request().Method }
func (q request) Header(name string) []string { return q.c.Request().Header.Values(name) }

// Route is the matched route pattern (c.Path(), "/items/:id"), "" when no
// route matched.
func (q request) Route() string { return q.c.Path() }

// Context is the *echo.Context behind r, for the hooks of httplimit.Config
// (Key, LimitFunc, Cost) that need more than httplimit.Request offers; nil
// for a request of another adapter.
func Context(r httplimit.Request) *echo.Context {
	if q, ok := r.(request); ok {
		return q.c
	}
	return nil
}

var errNotEcho = errors.New("echov5limit: key function used outside an echov5limit middleware")

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
		return "", fmt.Errorf("echov5limit: no %q in the context", name)
	}
}

// realIP is a request whose peer address is Echo's resolved client IP.
type realIP struct{ request }

func (q realIP) RemoteAddr() string { return q.c.RealIP() }

// KeyByRealIP keys requests by Echo's c.RealIP(), grouped like
// httplimit.KeyByIP (IPv6 by /64). It is for apps that configured
// e.IPExtractor (echo.ExtractIPFromXFFHeader with its trust options) behind
// a reverse proxy. Without an IPExtractor, Echo v5's RealIP is the peer
// address, as the default key is. Do not use it with echo.LegacyIPExtractor,
// which believes X-Forwarded-For from anyone.
func KeyByRealIP() httplimit.KeyFunc {
	byIP, _ := httplimit.KeyByIP(httplimit.ClientIP{}) // the zero ClientIP is always valid
	return func(r httplimit.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errNotEcho
		}
		return byIP(realIP{q})
	}
}
