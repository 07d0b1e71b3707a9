package nethttplimit

import (
	"context"
	"net/http"
	"strings"
)

// request is the core.Request of an *http.Request. It is pointer-shaped, so
// passing it as an interface does not allocate.
type request struct{ r *http.Request }

func (q request) Context() context.Context { return q.r.Context() }
func (q request) RemoteAddr() string       { return q.r.RemoteAddr }
func (q request) Header(name string) string {
	return q.r.Header.Get(name)
}
func (q request) Method() string { return q.r.Method }

// Route is the ServeMux pattern without its method ("/items/{id}"), or the
// URL path when no ServeMux has routed the request yet.
func (q request) Route() string {
	p := q.r.Pattern
	if p == "" {
		return q.r.URL.Path
	}
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		p = strings.TrimLeft(p[i:], " \t")
	}
	return p
}
