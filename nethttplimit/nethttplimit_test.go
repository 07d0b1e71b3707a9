package nethttplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

func newPolicy(t testing.TB, cfg httplimit.Config) *httplimit.Policy {
	t.Helper()
	_, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limiter = l
	p, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewPanicsOnNilPolicy(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	New(nil)
}

func TestRoute(t *testing.T) {
	tests := []struct{ pattern, path, want string }{
		{"", "/items/1", ""}, // not routed yet: never the raw path
		{"/items/{id}", "/items/1", "/items/{id}"},
		// The method is part of a pattern registered with one: routes per
		// method keep their own limits; a HEAD of a GET route shares its.
		{"GET /items/{id}", "/items/1", "GET /items/{id}"},
		{"GET example.com/items/{id}", "/items/1", "GET example.com/items/{id}"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", tt.path, nil)
		r.Pattern = tt.pattern
		if got := (request{r}).Route(); got != tt.want {
			t.Errorf("Route() with Pattern %q: got %q, want %q", tt.pattern, got, tt.want)
		}
	}
}

type userKey struct{}

// TestKeyByContextValue: the user an earlier middleware stored keys the
// request; a request without one is refused, not served unlimited.
func TestKeyByContextValue(t *testing.T) {
	p := newPolicy(t, httplimit.Config{Limit: core.PerMinute(1), Key: KeyByContextValue(userKey{})})
	h := New(p)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	serve := func(user string) int {
		r := httptest.NewRequest("GET", "/", nil)
		if user != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	for _, tt := range []struct {
		user string
		want int
	}{{"alice", 204}, {"alice", 429}, {"bob", 204}, {"", 400}} {
		if got := serve(tt.user); got != tt.want {
			t.Errorf("user %q: %d, want %d", tt.user, got, tt.want)
		}
	}
}

// TestStatusWriterKeepsController: counting by status wraps the writer,
// and http.ResponseController still reaches Flush through it.
func TestStatusWriterKeepsController(t *testing.T) {
	p := newPolicy(t, httplimit.Config{Limit: core.PerMinute(5), CountIf: func(status int) bool { return status >= 400 }})
	var flushErr error
	h := New(p)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		flushErr = http.NewResponseController(w).Flush()
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusAccepted || flushErr != nil || !rec.Flushed {
		t.Errorf("status %d, Flush %v (flushed %v); want 202 and a flush", rec.Code, flushErr, rec.Flushed)
	}
}

func BenchmarkMiddleware(b *testing.B) {
	p := newPolicy(b, httplimit.Config{Limit: core.PerSecond(1 << 30)})
	h := New(p)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}
