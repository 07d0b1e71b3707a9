package fiberlimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/redlimit/redlimit/httplimit"
)

// request is the httplimit.Request of a *fiber.Ctx. It is pointer-shaped,
// so passing it as an interface does not allocate.
type request struct{ c *fiber.Ctx }

// Context is c.UserContext(); see the package documentation.
func (q request) Context() context.Context { return q.c.UserContext() }
func (q request) RemoteAddr() string       { return q.c.Context().RemoteAddr().String() }
func (q request) Method() string           { return q.c.Method() }

// Header joins every line of the header, as httplimit.Request requires.
func (q request) Header(name string) string {
	return joinLines(q.c.Request().Header.PeekAll(name))
}

// Route is the pattern of the route being executed (c.Route().Path); see
// the package documentation for middleware registered with app.Use.
func (q request) Route() string { return q.c.Route().Path }

func joinLines(lines [][]byte) string {
	switch len(lines) {
	case 0:
		return ""
	case 1:
		return string(lines[0])
	}
	b := make([]byte, 0, 64)
	for i, l := range lines {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, l...)
	}
	return string(b)
}

// Ctx is the *fiber.Ctx behind r, for the hooks of httplimit.Config (Key,
// LimitFunc, Cost) that need more than httplimit.Request offers; nil for a
// request of another adapter.
func Ctx(r httplimit.Request) *fiber.Ctx {
	if q, ok := r.(request); ok {
		return q.c
	}
	return nil
}

var errNotFiber = errors.New("fiberlimit: key function used outside a fiberlimit middleware")

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
		return "", fmt.Errorf("fiberlimit: no %q in the locals", name)
	}
}

// fiberIP is a request whose peer address is Fiber's resolved client IP.
type fiberIP struct{ request }

func (q fiberIP) RemoteAddr() string { return q.c.IP() }

// KeyByIP keys requests by Fiber's c.IP(), grouped like httplimit.KeyByIP
// (IPv6 by /64).
//
// Use it only if you configured Fiber's trusted proxies (ProxyHeader with
// EnableTrustedProxyCheck and TrustedProxies): with ProxyHeader alone,
// Fiber reads that header from any peer, so any client could choose its own
// key. The default key, the peer address, does not depend on Fiber's
// settings.
func KeyByIP() httplimit.KeyFunc {
	byIP, _ := httplimit.KeyByIP(httplimit.ClientIP{}) // the zero ClientIP is always valid
	return func(r httplimit.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errNotFiber
		}
		return byIP(fiberIP{q})
	}
}
