package fiberlimit

import (
	"context"

	"github.com/gofiber/fiber/v2"
)

// request is the core.Request of a *fiber.Ctx. It is pointer-shaped, so
// passing it as an interface does not allocate.
type request struct{ c *fiber.Ctx }

// Context is c.UserContext(); see the package documentation.
func (q request) Context() context.Context  { return q.c.UserContext() }
func (q request) RemoteAddr() string        { return q.c.Context().RemoteAddr().String() }
func (q request) Header(name string) string { return q.c.Get(name) }
func (q request) Method() string            { return q.c.Method() }

// Route is the pattern of the route being executed (c.Route().Path); see
// the package documentation for middleware registered with app.Use.
func (q request) Route() string { return q.c.Route().Path }
