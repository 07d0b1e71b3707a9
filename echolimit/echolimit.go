package echolimit

import (
	"fmt"

	"github.com/labstack/echo/v4"
	"github.com/redlimit/redlimit/core"
)

// New returns middleware that limits requests to limit per client IP,
// deciding with limiter: WithConfig with Config{Limiter: limiter, Limit:
// limit}. It panics, at start-up, if limiter is nil or limit invalid.
func New(limiter *core.Limiter, limit core.Limit) echo.MiddlewareFunc {
	return WithConfig(Config{Limiter: limiter, Limit: limit})
}

// WithConfig returns middleware configured by cfg.
//
// WithConfig panics if cfg is invalid (a nil Limiter, an invalid Limit
// without LimitFunc, an unknown header style or fail policy): at start-up,
// never while serving.
func WithConfig(cfg Config) echo.MiddlewareFunc {
	p, err := core.NewPolicy(cfg.policy())
	if err != nil {
		panic(fmt.Errorf("echolimit: %w", err))
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skipper != nil && cfg.Skipper(c) {
				return next(c)
			}
			d := p.Decide(request{c})
			d.WriteHeaders(c.Response().Header().Set)
			switch {
			case d.Proceed():
				return next(c)
			case cfg.DenyHandler != nil:
				return cfg.DenyHandler(c, d)
			}
			return c.Blob(d.Status(), core.ContentType, d.Body())
		}
	}
}
