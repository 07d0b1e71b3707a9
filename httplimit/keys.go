package httplimit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redlimit/redlimit/internal/keyspace"
)

// Request is what a Policy reads from an HTTP request. Each adapter
// implements it over its framework's request, and gives the framework's own
// request back to the hooks (ginlimit.Context, echolimit.Context, ...).
type Request interface {
	// Context is the request's context: it bounds the decision and any wait.
	Context() context.Context
	// RemoteAddr is the peer's address, "ip:port" as net/http gives it.
	RemoteAddr() string
	// Header returns the value of each line of the named request header,
	// in order, as received (nil if absent): a proxy may add its own
	// X-Forwarded-For line instead of appending to the client's.
	Header(name string) []string
	// Method is the HTTP method.
	Method() string
	// Route is the matched route pattern ("/users/:id", or with net/http's
	// ServeMux "GET /users/{id}"), or "" where the framework has not
	// matched one yet (middleware wrapping a whole mux).
	Route() string
}

// KeyFunc returns the key a request is limited by. An error, or an empty
// key, means the request cannot be keyed: the Policy refuses it (see
// Config.ServeUnkeyed), and never lets it share one limit with every other
// request that has no key.
type KeyFunc func(Request) (string, error)

// KeyByHeader keys requests by the value of a header (an API key, a
// tenant): its first line, without leading or trailing spaces or tabs
// (RFC 9110), so that "K" and " K\t" are one key over HTTP/1.1 and
// HTTP/2; otherwise as sent, case included. A request without it cannot
// be keyed by this function: KeyFirst falls back to another
// (KeyFirst(KeyByHeader("X-API-Key"), byIP)). Verify the value
// (authenticate the API key) before the limiter runs, or a client that
// sends a new value with every request gets a new limit with each; where
// it cannot be verified, limit the client IP too (a second Policy keyed by
// KeyByIP).
func KeyByHeader(name string) KeyFunc {
	return func(r Request) (string, error) {
		if lines := r.Header(name); len(lines) > 0 {
			if k := keyspace.Header(name, lines[0]); k != "" {
				return k, nil
			}
		}
		return "", fmt.Errorf("httplimit: request has no %s header", name)
	}
}

// KeyFirst keys a request by the first of keys that yields a non-empty key
// without error (a user ID, else an API key, else the client IP), and
// reports the last error when none does.
func KeyFirst(keys ...KeyFunc) KeyFunc {
	return func(r Request) (string, error) {
		err := errNoKeys
		for _, k := range keys {
			var key string
			if key, err = k(r); err == nil && key != "" {
				return key, nil
			}
		}
		if err == nil {
			err = errEmptyKey
		}
		return "", err
	}
}

// KeyJoin keys a request by all of keys together (the client IP and the
// route: one limit per client per route); it cannot key a request that any
// of them cannot.
func KeyJoin(keys ...KeyFunc) KeyFunc {
	return func(r Request) (string, error) {
		if len(keys) == 0 {
			return "", errNoKeys
		}
		var b strings.Builder
		for i, k := range keys {
			key, err := k(r)
			if err != nil {
				return "", err
			}
			if key == "" {
				return "", errEmptyKey
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(key)
		}
		return b.String(), nil
	}
}

// KeyByRoute keys requests by the route pattern the framework matched, so
// each route has one limit shared by all clients (KeyJoin it with the
// client IP for one per client per route). Requests that run the same
// handler share it whatever their method: a HEAD that runs a GET route's
// handler, or any method on a route registered for every method; routes
// registered per method keep the limits their patterns give them
// (net/http's "GET /items" and "POST /items" are two). It never falls back
// to the URL path, which a client could vary to get a fresh limit: mount
// the middleware where the framework knows the route (chi's r.With or
// r.Group, a ServeMux handler), or every request is refused as unkeyable,
// which the Policy logs once.
func KeyByRoute() KeyFunc {
	return func(r Request) (string, error) {
		route := r.Route()
		if route == "" {
			return "", errNoRoute
		}
		return keyspace.Route(route), nil
	}
}

var (
	// errNoRoute is KeyByRoute's for a request whose route the framework
	// has not matched where the middleware runs: the Policy logs it once.
	errNoRoute  = errors.New("httplimit: KeyByRoute: no route pattern for this request; mount the middleware on the routes (chi: r.With(mw).Get(...); ServeMux: wrap each handler)")
	errNoKeys   = errors.New("httplimit: no key functions")
	errEmptyKey = errors.New("httplimit: the key function returned an empty key")
)
