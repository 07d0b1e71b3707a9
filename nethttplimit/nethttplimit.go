package nethttplimit

import (
	"context"
	"net/http"

	"github.com/redlimit/redlimit/httplimit"
)

// Option configures the middleware made by New.
type Option func(*config)

type config struct {
	skip func(*http.Request) bool
	deny func(http.ResponseWriter, *http.Request, httplimit.Decision)
}

// WithSkip exempts the requests it reports true for (health checks,
// internal callers): they are neither counted nor given headers.
func WithSkip(f func(*http.Request) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithDenyHandler answers the requests that do not proceed, instead of
// d.Status() and d.Body(). The rate-limit headers and Retry-After are
// already set when it runs, and d.Outcome says why (httplimit.OutcomeDenied,
// OutcomeFailedClosed, OutcomeNoKey, or OutcomeCanceled when the client left
// during a LeakyBucket wait).
func WithDenyHandler(f func(http.ResponseWriter, *http.Request, httplimit.Decision)) Option {
	return func(c *config) { c.deny = f }
}

// New returns middleware that limits requests as p says. It panics, at
// start-up, if p is nil.
func New(p *httplimit.Policy, opts ...Option) func(http.Handler) http.Handler {
	if p == nil {
		panic("nethttplimit: New: nil Policy")
	}
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.skip != nil && c.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			d := p.Serve(request{r}, w.Header(), func(ctx context.Context, wantStatus bool) int {
				if ctx != r.Context() {
					r = r.WithContext(ctx)
				}
				if !wantStatus {
					next.ServeHTTP(w, r)
					return 0
				}
				sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
				next.ServeHTTP(sw, r)
				return sw.status
			})
			c.answer(w, r, &d)
		})
	}
}

// answer writes the answer to a request d does not let proceed, and
// reports whether it proceeds.
func (c *config) answer(w http.ResponseWriter, r *http.Request, d *httplimit.Decision) bool {
	switch {
	case d.Proceed():
		return true
	case c.deny != nil:
		c.deny(w, r, *d)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(d.Status())
		_, _ = w.Write(d.Body())
	}
	return false
}

// Check decides r at cost n under p from inside a handler, and reports
// whether the handler should go on. It is for limits that depend on what the
// request holds (its size, the rows it asks for); it writes the rate-limit
// headers and, when the request may not go on, the answer (429, ...).
func Check(w http.ResponseWriter, r *http.Request, p *httplimit.Policy, n int) bool {
	d := p.Check(request{r}, w.Header(), n)
	return (&config{}).answer(w, r, &d)
}

// Reset forgets the state of r's key under p, so its quota is whole again
// (after a successful login, say).
func Reset(r *http.Request, p *httplimit.Policy) error {
	return p.Reset(request{r})
}

// statusWriter remembers the status the handler answered with, for
// httplimit.Config.CountIf.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's Flush, Hijack
// and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
