package ginlimit

import (
	"fmt"

	"github.com/gin-gonic/gin"
	"github.com/redlimit/redlimit/core"
)

// New returns middleware that limits requests to limit per key (the client
// IP unless an option says otherwise), deciding with limiter. A request
// that does not proceed is aborted.
//
// New panics if the configuration is invalid (a nil limiter, an invalid
// Limit without WithLimitFunc, an unknown header style or fail policy): at
// start-up, never while serving.
func New(limiter *core.Limiter, limit core.Limit, opts ...Option) gin.HandlerFunc {
	c := config{policy: core.Policy{Limiter: limiter, Limit: limit}}
	for _, opt := range opts {
		opt(&c)
	}
	p, err := core.NewPolicy(c.policy)
	if err != nil {
		panic(fmt.Errorf("ginlimit: %w", err))
	}
	return func(ctx *gin.Context) {
		if c.skip != nil && c.skip(ctx) {
			return
		}
		d := p.Decide(request{ctx})
		d.WriteHeaders(ctx.Header)
		switch {
		case d.Proceed():
		case c.deny != nil:
			ctx.Abort()
			c.deny(ctx, d)
		default:
			ctx.Data(d.Status(), core.ContentType, d.Body())
			ctx.Abort()
		}
	}
}
