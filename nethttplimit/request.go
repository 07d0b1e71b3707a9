package nethttplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/redlimit/redlimit/httplimit"
)

// request is the httplimit.Request of an *http.Request. It is
// pointer-shaped, so passing it as an interface does not allocate.
type request struct{ r *http.Request }

func (q request) Context() context.Context    { return q.r.Context() }
func (q request) RemoteAddr() string          { return q.r.RemoteAddr }
func (q request) Method() string              { return q.r.Method }
func (q request) Header(name string) []string { return q.r.Header.Values(name) }

// Route is the ServeMux pattern the request matched ("GET /items/{id}",
// "/any": its method is there only if the route was registered with one,
// and a HEAD request matches a GET route), or "" when no ServeMux has
// routed the request yet (the middleware wraps the whole mux, or chi
// routes it: mount the middleware on the routes).
func (q request) Route() string { return q.r.Pattern }

// HTTPRequest is the *http.Request behind r, for the hooks of
// httplimit.Config (Key, LimitFunc, Cost) that need more than
// httplimit.Request offers; nil for a request of another adapter.
func HTTPRequest(r httplimit.Request) *http.Request {
	if q, ok := r.(request); ok {
		return q.r
	}
	return nil
}

// KeyByContextValue keys requests by the string an earlier middleware
// stored in the request's context under key (the authenticated user, say).
// A request without it cannot be keyed, and is refused (see
// httplimit.Config.ServeUnkeyed): mount the limiter after the
// authentication middleware.
func KeyByContextValue(key any) httplimit.KeyFunc {
	return func(r httplimit.Request) (string, error) {
		if v, ok := r.Context().Value(key).(string); ok && v != "" {
			return "ctx:" + v, nil
		}
		return "", fmt.Errorf("%w: no %v in the request context", errNoValue, key)
	}
}

var errNoValue = errors.New("nethttplimit: KeyByContextValue")
