package nethttplimit

import (
	"context"
	"net/http"
	"strings"

	"github.com/redlimit/redlimit/core"
)

// request is the core.Request of an *http.Request. It is pointer-shaped, so
// passing it as an interface does not allocate.
type request struct{ r *http.Request }

func (q request) Context() context.Context  { return q.r.Context() }
func (q request) RemoteAddr() string        { return q.r.RemoteAddr }
func (q request) Header(name string) string { return core.HeaderValue(q.r.Header, name) }
func (q request) Method() string            { return q.r.Method }

// Route is the ServeMux pattern without its method ("/items/{id}"), or ""
// when no ServeMux has routed the request yet (the middleware wraps the
// whole mux rather than a route).
func (q request) Route() string {
	p := q.r.Pattern
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		p = strings.TrimLeft(p[i:], " \t")
	}
	return p
}
