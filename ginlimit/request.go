package ginlimit

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/core"
)

// request is the core.Request of a *gin.Context. It is pointer-shaped, so
// passing it as an interface does not allocate.
type request struct{ c *gin.Context }

func (q request) Context() context.Context  { return q.c.Request.Context() }
func (q request) RemoteAddr() string        { return q.c.Request.RemoteAddr }
func (q request) Header(name string) string { return core.HeaderValue(q.c.Request.Header, name) }
func (q request) Method() string            { return q.c.Request.Method }

// Route is the matched route pattern (c.FullPath(), "/items/:id"), "" when
// no route matched.
func (q request) Route() string { return q.c.FullPath() }
