package fiberlimit

import (
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/redlimit/redlimit/core"
)

// New returns middleware that limits requests as config says (ConfigDefault
// fills in what it leaves unset).
//
// New panics if the configuration is invalid (no Limiter, an invalid Limit,
// an unknown header style or fail policy): at start-up, never while
// serving.
func New(config ...Config) fiber.Handler {
	cfg := configDefault(config...)
	p, err := core.NewPolicy(cfg.policy())
	if err != nil {
		panic(fmt.Errorf("fiberlimit: %w", err))
	}
	return func(c *fiber.Ctx) error {
		if cfg.Next != nil && cfg.Next(c) {
			return c.Next()
		}
		d := p.Decide(request{c})
		d.WriteHeaders(c.Set)
		switch {
		case d.Proceed():
			return c.Next()
		case cfg.LimitReached != nil:
			return cfg.LimitReached(c, d)
		}
		c.Set(fiber.HeaderContentType, core.ContentType)
		return c.Status(d.Status()).Send(d.Body())
	}
}
