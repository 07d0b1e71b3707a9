package httplimit

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// keyRequest is a Request whose method, header lines and route the test
// chooses.
type keyRequest struct {
	method, route string
	header        []string
}

func (r keyRequest) Context() context.Context { return context.Background() }
func (r keyRequest) RemoteAddr() string       { return "192.0.2.1:1" }
func (r keyRequest) Header(string) []string   { return r.header }
func (r keyRequest) Method() string           { return r.method }
func (r keyRequest) Route() string            { return r.route }

// TestKeysClientCannotVary: what a client may freely vary (a second line
// of the header, spaces and tabs around the value, which HTTP/2 keeps and
// HTTP/1.1 strips, the method on a route that runs one handler) does not
// give it a fresh key; a value holding a comma is one value.
func TestKeysClientCannotVary(t *testing.T) {
	byHeader := KeyByHeader("X-API-Key")
	want, _ := byHeader(keyRequest{header: []string{"K"}})
	for _, lines := range [][]string{{"K", "random"}, {"K", "other", "more"}, {"K "}, {" K"}, {"K\t"}, {"\tK  "}} {
		if got, err := byHeader(keyRequest{header: lines}); err != nil || got != want {
			t.Errorf("header lines %q: key %q, %v; want the first line's %q", lines, got, err, want)
		}
	}
	ab, _ := byHeader(keyRequest{header: []string{"a, b"}})
	ac, _ := byHeader(keyRequest{header: []string{"a, c"}})
	if ab == ac {
		t.Errorf("values %q and %q share the key %q", "a, b", "a, c", ab)
	}
	upper, _ := byHeader(keyRequest{header: []string{"K1"}})
	lower, _ := byHeader(keyRequest{header: []string{"k1"}})
	if upper == lower {
		t.Errorf("values %q and %q share the key %q: API keys are case-sensitive", "K1", "k1", upper)
	}
	if _, err := byHeader(keyRequest{header: []string{" \t"}}); err == nil {
		t.Error("a value of only spaces keyed the request")
	}
	byRoute := KeyByRoute()
	var keys []string
	for _, m := range []string{"GET", "HEAD", "POST", "XA", "XB"} {
		k, _ := byRoute(keyRequest{method: m, route: "/upload"})
		keys = append(keys, k)
	}
	for i, k := range keys {
		if k != keys[0] {
			t.Errorf("route key of method %d is %q, want %q: the method chose a limit", i, k, keys[0])
		}
	}
	get, _ := byRoute(keyRequest{method: "GET", route: "GET /items"})
	post, _ := byRoute(keyRequest{method: "POST", route: "POST /items"})
	if get == post {
		t.Errorf("routes registered per method share the key %q", get)
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
	d := p.testDecide(from("192.0.2.1"))
	n := 0
	d.writeHeaders(setter(func(name, _ string) {
		n++
		if name != http.CanonicalHeaderKey(name) {
			t.Errorf("header %q is not in canonical form", name)
		}
	}))
	if n != 5 {
		t.Errorf("%d headers written, want 5", n)
	}
}

// TestRequestKeysChooseNoSlot backs noTag: what a key function reads from
// a request (a header a client sends, a route pattern with "{id}") keeps
// no brace, so it cannot choose the Redis Cluster slot (a client sending
// "{victim}" would share the victim's slot; every "/items/{id}" route key
// would land in the slot of "id"), and stays one to one.
func TestRequestKeysChooseNoSlot(t *testing.T) {
	byHeader := KeyByHeader("X-Api-Key")
	seen := map[string]string{}
	for _, v := range []string{"{victim}", "%7Bvictim%7D", "%257Bvictim%257D", "victim", "a}{b", "{}"} {
		k, err := byHeader(keyRequest{header: []string{v}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(k, "{}") {
			t.Errorf("header %q: key %q holds a brace", v, k)
		}
		if prev, ok := seen[k]; ok {
			t.Errorf("headers %q and %q share the key %q", prev, v, k)
		}
		seen[k] = v
	}
	k, err := KeyByRoute()(keyRequest{route: "GET /items/{id}"})
	if err != nil || strings.ContainsAny(k, "{}") {
		t.Errorf("route key %q, %v: want no brace", k, err)
	}
}
