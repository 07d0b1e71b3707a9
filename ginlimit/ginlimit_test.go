package ginlimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

func init() { gin.SetMode(gin.ReleaseMode) }

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

// TestKeysAndErrors: the user a handler stored keys the request; one
// without cannot be keyed, and is refused with the error recorded for
// Gin's error middleware.
func TestKeysAndErrors(t *testing.T) {
	p := newPolicy(t, httplimit.Config{Limit: core.PerMinute(1), Key: KeyByContextValue("user")})
	r := gin.New()
	var errs []string
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("user", u)
		}
		c.Next()
		for _, e := range c.Errors {
			errs = append(errs, e.Error())
		}
	})
	r.GET("/", New(p), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	serve := func(user string) int {
		req := httptest.NewRequest("GET", "/", nil)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
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
	if len(errs) != 1 {
		t.Errorf("errors recorded with c.Error: %q, want the one of the request without a user", errs)
	}
}

// TestKeyByClientIP defers to Gin's trusted proxies.
func TestKeyByClientIP(t *testing.T) {
	engine := gin.New()
	if err := engine.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
		t.Fatal(err)
	}
	var got string
	engine.GET("/", func(c *gin.Context) { got, _ = KeyByClientIP()(request{c}) })
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.1:80"
	req.Header.Set("X-Forwarded-For", "203.0.113.4")
	engine.ServeHTTP(httptest.NewRecorder(), req)
	if got != "ip:203.0.113.4" {
		t.Errorf("KeyByClientIP behind a trusted proxy = %q, want ip:203.0.113.4", got)
	}
}

func BenchmarkMiddleware(b *testing.B) {
	p := newPolicy(b, httplimit.Config{Limit: core.PerSecond(1 << 30)})
	r := gin.New()
	r.GET("/", New(p), func(*gin.Context) {})
	req := httptest.NewRequest("GET", "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// TestOuterMiddlewareKeepsItsContext: under InFlight the handler gets a
// context of its own, which ends with the request's Finish; the
// middlewares before this one get back the request they passed in, whose
// context still runs, and the handler's context did run while it ran.
func TestOuterMiddlewareKeepsItsContext(t *testing.T) {
	p := newPolicy(t, httplimit.Config{Limit: core.PerMinute(10), InFlight: 1})
	r := gin.New()
	var before, after *http.Request
	var inner error
	r.Use(func(c *gin.Context) {
		before = c.Request
		c.Next()
		after = c.Request
	})
	r.GET("/", New(p), func(c *gin.Context) {
		inner = c.Request.Context().Err()
		c.Status(http.StatusNoContent)
	})
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if w.Code != http.StatusNoContent || inner != nil {
		t.Fatalf("status %d, handler's context %v; want 204 and a live context", w.Code, inner)
	}
	if after != before || after.Context().Err() != nil {
		t.Errorf("after the limiter the outer middleware has %p (context %v), want its own %p, live", after, after.Context().Err(), before)
	}
}
