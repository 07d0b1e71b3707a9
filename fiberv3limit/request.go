package fiberv3limit

import (
	"context"
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v3"

	"github.com/redlimit/redlimit/httplimit"
)

// request is the httplimit.Request of a fiber.Ctx, recycled (see wrap):
// hooks must not keep it after they return.
type request struct{ c fiber.Ctx }

// Context is c.Context(), the context set with c.SetContext; see the
// package documentation.
func (q *request) Context() context.Context { return q.c.Context() }
func (q *request) RemoteAddr() string       { return q.c.RequestCtx().RemoteAddr().String() }
func (q *request) Method() string           { return q.c.Method() }

// Header returns every line of the header, copied out of fasthttp's
// buffers.
func (q *request) Header(name string) []string {
	raw := q.c.Request().Header.PeekAll(name)
	if len(raw) == 0 {
		return nil
	}
	out := make([]string, len(raw))
	for i, l := range raw {
		out[i] = string(l)
	}
	return out
}

// Route is the pattern of the route being executed (c.Route().Path); see
// the package documentation for middleware registered with app.Use.
func (q *request) Route() string { return q.c.Route().Path }

// Ctx is the fiber.Ctx behind r, for the hooks of httplimit.Config (Key,
// LimitFunc, Cost) that need more than httplimit.Request offers; nil for a
// request of another adapter. Do not keep it after the hook returns.
func Ctx(r httplimit.Request) fiber.Ctx {
	if q, ok := r.(*request); ok {
		return q.c
	}
	return nil
}

var errNotFiber = errors.New("fiberv3limit: key function used outside a fiberv3limit middleware")

// KeyByLocals keys requests by the string an earlier handler stored with
// c.Locals(name, value), typically the authenticated user or tenant. A
// request without it cannot be keyed, and is refused (see
// httplimit.Config.ServeUnkeyed): mount the limiter after the
// authentication middleware.
func KeyByLocals(name string) httplimit.KeyFunc {
	return func(r httplimit.Request) (string, error) {
		c := Ctx(r)
		if c == nil {
			return "", errNotFiber
		}
		if v, ok := c.Locals(name).(string); ok && v != "" {
			return "ctx:" + v, nil
		}
		return "", fmt.Errorf("fiberv3limit: no %q in the locals", name)
	}
}

// fiberIP is a request whose peer address is Fiber's resolved client IP.
type fiberIP struct{ *request }

func (q fiberIP) RemoteAddr() string { return q.c.IP() }

// KeyByFiberIP keys requests by Fiber's c.IP(), grouped like
// httplimit.KeyByIP (IPv6 by /64). It is for apps that set Fiber's
// ProxyHeader with TrustProxy and TrustProxyConfig: Fiber then reads the
// header only from those proxies. The default key, the peer address, does
// not depend on Fiber's settings.
func KeyByFiberIP() httplimit.KeyFunc {
	byIP, _ := httplimit.KeyByIP(httplimit.ClientIP{}) // the zero ClientIP is always valid
	return func(r httplimit.Request) (string, error) {
		q, ok := r.(*request)
		if !ok {
			return "", errNotFiber
		}
		return byIP(fiberIP{q})
	}
}
