package examples

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
	"github.com/redlimit/redlimit/redlimittest"
)

// TestChiKeyByRoute is the README's chi wiring against chi itself: mounted
// with r.With, after chi has routed, KeyByRoute keys by chi's pattern, so
// /items/1 and /items/2 share the route's limit ("requests that run one
// handler share one limit"); mounted with r.Use, before routing, every
// request is refused as unkeyable, never served unlimited.
func TestChiKeyByRoute(t *testing.T) {
	r := redlimittest.Start(t)
	policy, err := httplimit.New(httplimit.Config{Limiter: r.NewLimiter(), Limit: core.PerMinute(2),
		Key: httplimit.KeyByRoute()})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	get := func(h http.Handler, path string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w.Code
	}

	withRoute := chi.NewRouter()
	withRoute.With(nethttplimit.New(policy)).Get("/items/{id}", ok)
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if got := get(withRoute, "/items/"+string(rune('1'+i))); got != want {
			t.Errorf("r.With, request %d to /items/{id}: %d, want %d", i+1, got, want)
		}
	}

	beforeRouting := chi.NewRouter()
	beforeRouting.Use(nethttplimit.New(policy))
	beforeRouting.Get("/items/{id}", ok)
	if got := get(beforeRouting, "/items/1"); got != http.StatusBadRequest {
		t.Errorf("r.Use, before chi routes: %d, want %d (no route: refused as unkeyable)", got, http.StatusBadRequest)
	}
}
