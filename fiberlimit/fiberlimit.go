package fiberlimit

import (
	"context"
	"errors"

	"github.com/gofiber/fiber/v2"

	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/adapt"
)

// Config defines the config for the middleware, in the shape of Fiber's
// own middleware configs.
type Config struct {
	// Next defines a function to skip this middleware when it returns true
	// (health checks, internal callers): those requests are neither counted
	// nor given headers.
	//
	// Optional. Default: nil
	Next func(c *fiber.Ctx) bool

	// Policy decides (see httplimit.New).
	//
	// Required.
	Policy *httplimit.Policy

	// KeyGenerator keys requests from the *fiber.Ctx (the user from
	// c.Locals, say), in the shape of Fiber's own limiter; it replaces the
	// Policy's Key in this middleware. Check and Reset, given the Policy,
	// use the Policy's own Key: when you use them, key by
	// httplimit.Config.Key instead (KeyByLocals, or a KeyFunc that reads
	// Ctx(r)). An empty key means the request cannot be keyed: it is
	// refused with 400 unless the Policy serves unkeyed requests. Strings
	// from the *fiber.Ctx alias fasthttp buffers reused after the handler
	// returns; returning one here is fine.
	//
	// Optional. Default: nil (the Policy's Key: the client IP)
	KeyGenerator func(c *fiber.Ctx) string

	// LimitReached answers the requests that do not proceed. The rate-limit
	// headers and Retry-After are set before it runs, and d.Outcome says why
	// (httplimit.OutcomeDenied, OutcomeFailedClosed, OutcomeNoKey, or
	// OutcomeCanceled).
	//
	// Optional. Default: d.Status() and d.Body() as JSON
	LimitReached func(c *fiber.Ctx, d httplimit.Decision) error
}

// New creates a new middleware handler. It panics, at start-up, without a
// Policy.
func New(config ...Config) fiber.Handler {
	var cfg Config
	if len(config) > 0 {
		cfg = config[0]
	}
	if cfg.Policy == nil {
		panic(errors.New("fiberlimit: Config.Policy is nil"))
	}
	p := cfg.Policy
	if f := cfg.KeyGenerator; f != nil {
		p = adapt.WithKey(p, httplimit.KeyFunc(func(r httplimit.Request) (string, error) { return f(Ctx(r)), nil }))
	}
	return func(c *fiber.Ctx) error {
		if cfg.Next != nil && cfg.Next(c) {
			return c.Next()
		}
		var err error
		d := p.Serve(request{c}, respHeader{c}, func(ctx context.Context, _ bool) int {
			if prev := c.UserContext(); ctx != prev {
				c.SetUserContext(ctx)
				// Serve's context ends with the handler: the middlewares
				// before this one get back the context they passed in.
				defer c.SetUserContext(prev)
			}
			err = c.Next()
			return status(c, err)
		})
		if proceed, aerr := cfg.answer(c, &d); !proceed {
			return aerr
		}
		return err
	}
}

// answer writes the answer to a request d does not let proceed, and
// reports whether it proceeds.
func (cfg *Config) answer(c *fiber.Ctx, d *httplimit.Decision) (bool, error) {
	switch {
	case d.Proceed():
		return true, nil
	case cfg.LimitReached != nil:
		return false, cfg.LimitReached(c, *d)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return false, c.Status(d.Status()).Send(d.Body())
}

// respHeader is the response header of c, as httplimit writes it.
type respHeader struct{ c *fiber.Ctx }

func (h respHeader) Get(name string) string { return h.c.GetRespHeader(name) }
func (h respHeader) Set(name, value string) { h.c.Set(name, value) }

// status is the status a handler answered with, or will through Fiber's
// ErrorHandler when it returned err.
func status(c *fiber.Ctx, err error) int {
	var fe *fiber.Error
	switch {
	case err == nil:
		return c.Response().StatusCode()
	case errors.As(err, &fe):
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// Check decides the request at cost n under p from inside a handler, and
// reports whether the handler should go on, with the error of writing the
// answer. It is for limits that depend on what the request holds (its size,
// the rows it asks for); it writes the rate-limit headers and, when the
// request may not go on, the answer (429, ...).
func Check(c *fiber.Ctx, p *httplimit.Policy, n int) (bool, error) {
	d := p.Check(request{c}, respHeader{c}, n)
	return (&Config{}).answer(c, &d)
}

// Reset forgets the state of the request's key under p, so its quota is
// whole again (after a successful login, say).
func Reset(c *fiber.Ctx, p *httplimit.Policy) error {
	return p.Reset(request{c})
}
