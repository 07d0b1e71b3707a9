package nethttplimit

import (
	"fmt"
	"net/http"

	"github.com/redlimit/redlimit/core"
)

// New returns middleware that limits requests to limit per key (the client
// IP unless an option says otherwise), deciding with limiter.
//
// New panics if the configuration is invalid (a nil limiter, an invalid
// Limit without WithLimitFunc, an unknown header style or fail policy): at
// start-up, never while serving.
func New(limiter *core.Limiter, limit core.Limit, opts ...Option) func(http.Handler) http.Handler {
	c := config{policy: core.Policy{Limiter: limiter, Limit: limit}}
	for _, opt := range opts {
		opt(&c)
	}
	p, err := core.NewPolicy(c.policy)
	if err != nil {
		panic(fmt.Errorf("nethttplimit: %w", err))
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.skip != nil && c.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			d := p.Decide(request{r})
			d.WriteHeaders(w.Header().Set)
			switch {
			case d.Proceed():
				next.ServeHTTP(w, r)
			case c.deny != nil:
				c.deny(w, r, d)
			default:
				w.Header().Set("Content-Type", core.ContentType)
				w.WriteHeader(d.Status())
				_, _ = w.Write(d.Body())
			}
		})
	}
}
