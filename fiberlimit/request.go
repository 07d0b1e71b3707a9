package fiberlimit

import (
	"context"

	"github.com/gofiber/fiber/v2"
)

// request is the core.Request of a *fiber.Ctx. It is pointer-shaped, so
// passing it as an interface does not allocate.
type request struct{ c *fiber.Ctx }

// Context is c.UserContext(); see the package documentation.
func (q request) Context() context.Context { return q.c.UserContext() }
func (q request) RemoteAddr() string       { return q.c.Context().RemoteAddr().String() }

// Header joins every line of the header, as core.Request requires.
func (q request) Header(name string) string {
	lines := q.c.Request().Header.PeekAll(name)
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
func (q request) Method() string { return q.c.Method() }

// Route is the pattern of the route being executed (c.Route().Path); see
// the package documentation for middleware registered with app.Use.
func (q request) Route() string { return q.c.Route().Path }
