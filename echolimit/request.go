package echolimit

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit/core"
)

// request is the core.Request of an echo.Context.
type request struct{ c echo.Context }

func (q request) Context() context.Context  { return q.c.Request().Context() }
func (q request) RemoteAddr() string        { return q.c.Request().RemoteAddr }
func (q request) Header(name string) string { return core.HeaderValue(q.c.Request().Header, name) }
func (q request) Method() string            { return q.c.Request().Method }

// Route is the matched route pattern (c.Path(), "/items/:id"), "" when no
// route matched.
func (q request) Route() string { return q.c.Path() }
