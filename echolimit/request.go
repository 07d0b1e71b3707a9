package echolimit

import (
	"context"

	"github.com/labstack/echo/v4"
)

// request is the core.Request of an echo.Context.
type request struct{ c echo.Context }

func (q request) Context() context.Context  { return q.c.Request().Context() }
func (q request) RemoteAddr() string        { return q.c.Request().RemoteAddr }
func (q request) Header(name string) string { return q.c.Request().Header.Get(name) }
func (q request) Method() string            { return q.c.Request().Method }

// Route is the matched route pattern (c.Path(), "/items/:id"), or the URL
// path when no route matched.
func (q request) Route() string {
	if p := q.c.Path(); p != "" {
		return p
	}
	return q.c.Request().URL.Path
}
