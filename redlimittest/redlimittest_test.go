package redlimittest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
	"github.com/redlimit/redlimit/redlimittest"
)

// TestHandlerLimits is how an application tests its limits: 2 per minute (a
// token every 30 s), the third request refused, a minute later served
// again, and Redis down failing open.
func TestHandlerLimits(t *testing.T) {
	r := redlimittest.Start(t)
	policy, err := httplimit.New(httplimit.Config{Limiter: r.NewLimiter(), Limit: core.PerMinute(2)})
	if err != nil {
		t.Fatal(err)
	}
	handler := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func() string {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return fmt.Sprint(rec.Code, " ", rec.Header().Get("Retry-After"))
	}
	for i, want := range []string{"200 ", "200 ", "429 30"} {
		if got := get(); got != want {
			t.Errorf("request %d: %q, want %q", i+1, got, want)
		}
	}
	r.Advance(time.Minute)
	if got := get(); got != "200 " {
		t.Errorf("a minute later: %q, want 200", got)
	}
	r.Down()
	if got := get(); got != "429 60" {
		// The fallback runs on the process' clock: it still holds the
		// key Redis refused for its Period.
		t.Errorf("Redis down, the local fallback: %q, want 429 60", got)
	}
	r.Up()
	if got := get(); got != "200 " {
		t.Errorf("Redis back: %q, want 200 (one left)", got)
	}
	if got := get(); got != "429 30" {
		t.Errorf("Redis back, quota spent: %q, want 429", got)
	}
}
