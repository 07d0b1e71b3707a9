package httplimit

import (
	"context"
	"net/http"
	"testing"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// keyRequest is a Request whose method and joined header lines the test
// chooses.
type keyRequest struct {
	method, header, route string
}

func (r keyRequest) Context() context.Context { return context.Background() }
func (r keyRequest) RemoteAddr() string       { return "192.0.2.1:1" }
func (r keyRequest) Header(string) string     { return r.header }
func (r keyRequest) Method() string           { return r.method }
func (r keyRequest) Route() string            { return r.route }

// TestKeysClientCannotVary: what a client may freely vary (a second line
// of the header, a made-up method on a route that takes any) does not give
// it a fresh key.
func TestKeysClientCannotVary(t *testing.T) {
	byHeader := KeyByHeader("X-API-Key")
	want, _ := byHeader(keyRequest{header: "k1"})
	for _, extra := range []string{"k1, random", "k1, other, more"} {
		if got, err := byHeader(keyRequest{header: extra}); err != nil || got != want {
			t.Errorf("header lines %q: key %q, %v; want the first line's %q", extra, got, err, want)
		}
	}
	byRoute := KeyByRoute()
	xa, _ := byRoute(keyRequest{method: "XA", route: "/upload"})
	xb, _ := byRoute(keyRequest{method: "XB", route: "/upload"})
	get, _ := byRoute(keyRequest{method: "GET", route: "/upload"})
	if xa != xb || xa == get {
		t.Errorf("route keys: XA %q, XB %q, GET %q; want XA == XB != GET", xa, xb, get)
	}
}

// TestHeaderNamesCanonical: the names written are in canonical form, even
// renamed ones, so http.Header.Set need not convert them per request.
func TestHeaderNamesCanonical(t *testing.T) {
	_, rdb := redistest.Mini(t)
	p, err := New(Config{Limiter: newLimiter(t, rdb), Layers: []core.Limit{core.PerHour(100)},
		Headers: Headers{XRateLimit{Limit: "x-my-limit"}, IETF{}}})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Decide(from("192.0.2.1"))
	n := 0
	d.WriteHeaders(func(name, _ string) {
		n++
		if name != http.CanonicalHeaderKey(name) {
			t.Errorf("header %q is not in canonical form", name)
		}
	})
	if n != 5 {
		t.Errorf("%d headers written, want 5", n)
	}
}
