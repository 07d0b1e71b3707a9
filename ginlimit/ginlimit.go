package ginlimit

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/httplimit"
)

// Option configures the middleware made by New.
type Option func(*config)

type config struct {
	skip func(*gin.Context) bool
	deny func(*gin.Context, httplimit.Decision)
}

// WithSkip exempts the requests it reports true for (health checks,
// internal callers): they are neither counted nor given headers.
func WithSkip(f func(*gin.Context) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithDenyHandler answers the requests that do not proceed, instead of
// d.Status() and d.Body(). The context is aborted, and the rate-limit
// headers and Retry-After are set, before it runs. d.Outcome says why
// (httplimit.OutcomeDenied, OutcomeFailedClosed, OutcomeNoKey, or
// OutcomeCanceled when the client left during a LeakyBucket wait).
func WithDenyHandler(f func(*gin.Context, httplimit.Decision)) Option {
	return func(c *config) { c.deny = f }
}

// New returns middleware that limits requests as p says. A request that does
// not proceed is aborted, and every failure (Redis, a request without a key)
// is recorded with c.Error for Gin's error middleware. It panics, at
// start-up, if p is nil.
func New(p *httplimit.Policy, opts ...Option) gin.HandlerFunc {
	if p == nil {
		panic("ginlimit: New: nil Policy")
	}
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	return func(ctx *gin.Context) {
		if c.skip != nil && c.skip(ctx) {
			return
		}
		d := p.Serve(request{ctx}, ctx.Writer.Header(), func(rc context.Context, _ bool) int {
			if req := ctx.Request; rc != req.Context() {
				ctx.Request = req.WithContext(rc)
				// Serve's context ends with the handler: the middlewares
				// before this one get back the request they passed in.
				defer func() { ctx.Request = req }()
			}
			ctx.Next()
			return ctx.Writer.Status()
		})
		c.answer(ctx, &d)
	}
}

// answer records d's failure and, when the request does not proceed,
// writes its answer; it reports whether the request proceeds.
func (c *config) answer(ctx *gin.Context, d *httplimit.Decision) bool {
	if d.Err != nil && d.Outcome != httplimit.OutcomeCanceled {
		_ = ctx.Error(d.Err)
	}
	switch {
	case d.Proceed():
		return true
	case c.deny != nil:
		ctx.Abort()
		c.deny(ctx, *d)
	default:
		ctx.Abort()
		ctx.Data(d.Status(), "application/json", d.Body())
	}
	return false
}

// Check decides the request at cost n under p from inside a handler, and
// reports whether the handler should go on. It is for limits that depend on
// what the request holds (its size, the rows it asks for); it writes the
// rate-limit headers and, when the request may not go on, aborts it with the
// answer (429, ...).
func Check(ctx *gin.Context, p *httplimit.Policy, n int) bool {
	d := p.Check(request{ctx}, ctx.Writer.Header(), n)
	return (&config{}).answer(ctx, &d)
}

// Reset forgets the state of the request's key under p, so its quota is
// whole again (after a successful login, say).
func Reset(ctx *gin.Context, p *httplimit.Policy) error {
	return p.Reset(request{ctx})
}
