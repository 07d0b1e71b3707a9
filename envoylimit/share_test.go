package envoylimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttplimit"
)

// TestSharedWithGoService: a Go service behind nethttplimit and Envoy
// through the rate limit service share one limit on one key, as
// docs/envoy.md tells how: the same key prefix, the same Limit, a Policy
// named as the domain whose Key returns "<descriptor key>=<value>".
func TestSharedWithGoService(t *testing.T) {
	_, rdb := redistest.Mini(t)
	r := start(t, rdb, map[string]string{"api.yaml": `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
`}, Config{})
	policy, err := httplimit.New(httplimit.Config{
		Limiter: limiter(t, rdb, core.WithPrefix(r.prefix)), // another process, the same prefix
		Name:    "api",
		Limit:   core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Hour},
		Key: func(req httplimit.Request) (string, error) {
			if v := req.Header("X-User"); len(v) > 0 {
				return "user=" + v[0], nil
			}
			return "", fmt.Errorf("no X-User")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func() int {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-User", "alice")
		h.ServeHTTP(w, req)
		return w.Code
	}
	for i, want := range []int{200, 200, 200} {
		if got := get(); got != want {
			t.Fatalf("HTTP request %d: %d, want %d", i, got, want)
		}
	}
	runSteps(t, r, []step{
		{"api", []string{"user=alice"}, "OK; OK 1/5"},
		{"api", []string{"user=alice"}, "OK; OK 0/5"},
		{"api", []string{"user=alice"}, "OVER; OVER 0/5"},
		{"api", []string{"user=bob"}, "OK; OK 4/5"},
	})
	if got := get(); got != http.StatusTooManyRequests {
		t.Errorf("HTTP request after Envoy's: %d, want 429", got)
	}
}
