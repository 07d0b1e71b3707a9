package echolimit

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/adapt"
)

// Config configures the middleware, in the shape of Echo's own rate
// limiter's config.
type Config struct {
	// Skipper exempts the requests it reports true for (health checks,
	// internal callers): they are neither counted nor given headers. Any
	// middleware.Skipper fits.
	// Optional. Default: nil, skip nothing.
	Skipper func(c echo.Context) bool

	// Policy decides (see httplimit.New).
	// Required.
	Policy *httplimit.Policy

	// IdentifierExtractor keys requests from the echo.Context (the user
	// from c.Get, say); it replaces the Policy's Key in this middleware.
	// Check and Reset, given the Policy, use the Policy's own Key: when
	// you use them, key by httplimit.Config.Key instead (KeyByContextValue,
	// or a KeyFunc that reads Context(r)). An error, or an empty
	// key, means the request cannot be keyed.
	// Optional. Default: nil, the Policy's Key.
	IdentifierExtractor func(c echo.Context) (string, error)

	// ErrorHandler answers a request that cannot be keyed, as the
	// ErrorHandler of Echo's own limiter does; an error it returns goes to
	// Echo's HTTPErrorHandler.
	// Optional. Default: nil, 400 with {"error":"missing rate limit key"}
	// (or, with httplimit.Config.ServeUnkeyed, the request is served).
	ErrorHandler func(c echo.Context, err error) error

	// DenyHandler answers the requests that are refused. The rate-limit
	// headers and Retry-After are set before it runs, and d.Outcome says why
	// (httplimit.OutcomeDenied, OutcomeFailedClosed, or OutcomeCanceled when
	// the client left during a LeakyBucket wait). Optional. Default: nil,
	// d.Status() and d.Body() as JSON, the same bytes as every redlimit
	// adapter; DenyWithHTTPError hands the refusal to Echo's
	// HTTPErrorHandler instead.
	DenyHandler func(c echo.Context, d httplimit.Decision) error
}

// ToMiddleware returns the middleware, or an error for a Config it cannot
// use.
func (config Config) ToMiddleware() (echo.MiddlewareFunc, error) {
	if config.Policy == nil {
		return nil, errors.New("echolimit: Config.Policy is nil")
	}
	p := config.Policy
	if f := config.IdentifierExtractor; f != nil {
		p = adapt.WithKey(p, httplimit.KeyFunc(func(r httplimit.Request) (string, error) { return f(Context(r)) }))
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if config.Skipper != nil && config.Skipper(c) {
				return next(c)
			}
			q := wrap(c)
			defer q.release()
			var err error
			d := p.Serve(q, c.Response().Header(), func(ctx context.Context, _ bool) int {
				if req := c.Request(); ctx != req.Context() {
					c.SetRequest(req.WithContext(ctx))
					// Serve's context ends with the handler: what runs after
					// this middleware gets the request it passed in.
					defer c.SetRequest(req)
				}
				err = next(c)
				return status(c, err)
			})
			if proceed, aerr := config.answer(c, &d); !proceed {
				return aerr
			}
			return err
		}
	}, nil
}

// answer writes the answer to a request d does not let proceed, and
// reports whether it proceeds.
func (config *Config) answer(c echo.Context, d *httplimit.Decision) (bool, error) {
	switch {
	case d.Proceed():
		return true, nil
	case d.Outcome == httplimit.OutcomeNoKey && config.ErrorHandler != nil:
		return false, config.ErrorHandler(c, d.Err)
	case d.Outcome != httplimit.OutcomeNoKey && config.DenyHandler != nil:
		return false, config.DenyHandler(c, *d)
	}
	return false, c.Blob(d.Status(), echo.MIMEApplicationJSON, d.Body())
}

// status is the status a handler answered with, or will through Echo's
// HTTPErrorHandler when it returned err.
func status(c echo.Context, err error) int {
	var he *echo.HTTPError
	switch {
	case err == nil:
		return c.Response().Status
	case errors.As(err, &he):
		return he.Code
	}
	return http.StatusInternalServerError
}

// New returns middleware that limits requests as p says. It panics, at
// start-up, if p is nil; Config.ToMiddleware returns the error instead.
func New(p *httplimit.Policy) echo.MiddlewareFunc {
	mw, err := Config{Policy: p}.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// DenyWithHTTPError is a Config.DenyHandler that returns an *echo.HTTPError
// with the refusal's status, for the app's HTTPErrorHandler to render and
// log. The rate-limit headers and Retry-After are already set. It is not the
// default: the default answer is the same bytes in every redlimit adapter,
// and a refusal is not an error worth a log line per request under a flood.
func DenyWithHTTPError(_ echo.Context, d httplimit.Decision) error {
	return echo.NewHTTPError(d.Status(), http.StatusText(d.Status())).SetInternal(d.Err)
}

// Check decides the request at cost n under p from inside a handler, and
// reports whether the handler should go on, with the error of writing the
// answer. It is for limits that depend on what the request holds (its size,
// the rows it asks for); it writes the rate-limit headers and, when the
// request may not go on, the answer (429, ...).
func Check(c echo.Context, p *httplimit.Policy, n int) (bool, error) {
	q := wrap(c)
	d := p.Check(q, c.Response().Header(), n)
	q.release()
	return (&Config{}).answer(c, &d)
}

// Reset forgets the state of the request's key under p, so its quota is
// whole again (after a successful login, say).
func Reset(c echo.Context, p *httplimit.Policy) error {
	q := wrap(c)
	defer q.release()
	return p.Reset(q)
}

// requests recycles the wrappers of echo.Context: an interface is two
// words, and a wrapper passed as an httplimit.Request by value would be
// allocated for every request.
var requests = sync.Pool{New: func() any { return new(request) }}

func wrap(c echo.Context) *request {
	q := requests.Get().(*request)
	q.c = c
	return q
}

func (q *request) release() {
	q.c = nil
	requests.Put(q)
}
