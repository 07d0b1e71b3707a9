package nethttplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestNewPanicsOnInvalidConfig(t *testing.T) {
	_, rdb := redistest.Mini(t)
	tests := []struct {
		name    string
		limiter *core.Limiter
		limit   core.Limit
		opts    []Option
		want    string
	}{
		{"nil limiter", nil, core.PerSecond(1), nil, "Policy.Limiter is nil"},
		{"zero limit", core.New(rdb), core.Limit{}, nil, "Policy.Limit"},
		{"unknown headers", core.New(rdb), core.PerSecond(1), []Option{WithHeaders(42)}, "Headers"},
		{"unknown fail policy", core.New(rdb), core.PerSecond(1), []Option{WithFailPolicy(42)}, "Fail"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if err == nil || !strings.HasPrefix(err.Error(), "nethttplimit: ") || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("panic: got %v, want an error starting nethttplimit: and mentioning %q", err, tt.want)
				}
			}()
			New(tt.limiter, tt.limit, tt.opts...)
		})
	}
}

func TestRoute(t *testing.T) {
	tests := []struct{ pattern, path, want string }{
		{"", "/items/1", ""}, // not routed yet: never the raw path
		{"/items/{id}", "/items/1", "/items/{id}"},
		{"GET /items/{id}", "/items/1", "/items/{id}"},
		{"GET \t example.com/items/{id}", "/items/1", "example.com/items/{id}"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", tt.path, nil)
		r.Pattern = tt.pattern
		if got := (request{r}).Route(); got != tt.want {
			t.Errorf("Route() with Pattern %q: got %q, want %q", tt.pattern, got, tt.want)
		}
	}
}

// TestKeyFuncError: a request the key function cannot key goes to the error
// handler and, failing open, to the handler.
func TestKeyFuncError(t *testing.T) {
	_, rdb := redistest.Mini(t)
	var got error
	errNoUser := errors.New("no user")
	h := New(core.New(rdb, core.WithPrefix(t.Name())), core.PerSecond(1),
		WithKeyFunc(func(*http.Request) (string, error) { return "", errNoUser }),
		WithErrorHandler(func(_ *http.Request, err error) { got = err }),
	)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusNoContent || !errors.Is(got, errNoUser) {
		t.Errorf("got status %d and error %v, want 204 and %v", rec.Code, got, errNoUser)
	}
}

func BenchmarkMiddleware(b *testing.B) {
	_, rdb := redistest.Mini(b)
	h := New(core.New(rdb, core.WithPrefix(b.Name())), core.PerSecond(1<<30))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}
