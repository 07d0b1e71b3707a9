package echolimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

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

func TestToMiddlewareRefusesNilPolicy(t *testing.T) {
	if mw, err := (Config{}).ToMiddleware(); err == nil || mw != nil {
		t.Errorf("ToMiddleware without a Policy = %v; want an error", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	New(nil)
}

// TestEchoIdioms: IdentifierExtractor keys from the echo.Context; its
// failures go to ErrorHandler, whose error Echo's HTTPErrorHandler
// renders; DenyWithHTTPError hands a denial to it too, with the headers
// already set; a handler's error status decides CountIf.
func TestEchoIdioms(t *testing.T) {
	p := newPolicy(t, httplimit.Config{Limit: core.PerMinute(2), CountIf: func(status int) bool { return status >= 400 }})
	errNoUser := errors.New("no user")
	var extractorErr error
	mw, err := Config{
		Policy: p,
		IdentifierExtractor: func(c echo.Context) (string, error) {
			if u := c.Request().Header.Get("X-User"); u != "" {
				return "user:" + u, nil
			}
			return "", errNoUser
		},
		ErrorHandler: func(c echo.Context, err error) error {
			extractorErr = err
			return echo.NewHTTPError(http.StatusForbidden, "who are you?")
		},
		DenyHandler: DenyWithHTTPError,
	}.ToMiddleware()
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.GET("/", func(c echo.Context) error {
		if c.Request().Header.Get("X-Fail") != "" {
			return echo.NewHTTPError(http.StatusUnauthorized)
		}
		return c.NoContent(http.StatusNoContent)
	}, mw)
	serve := func(user string, fail bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		if fail {
			r.Header.Set("X-Fail", "1")
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, r)
		return rec
	}
	if rec := serve("", false); rec.Code != http.StatusForbidden || !errors.Is(extractorErr, errNoUser) {
		t.Errorf("no user: %d, ErrorHandler told %v; want 403 and the extractor's error", rec.Code, extractorErr)
	}
	for range 3 { // successes do not count
		if rec := serve("alice", false); rec.Code != http.StatusNoContent {
			t.Fatalf("alice: %d, want 204", rec.Code)
		}
	}
	for range 2 { // failures, returned as errors, do
		if rec := serve("alice", true); rec.Code != http.StatusUnauthorized {
			t.Fatalf("alice failing: %d, want 401", rec.Code)
		}
	}
	rec := serve("alice", false)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "30" ||
		rec.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("after two failures: %d %v; want Echo's 429 with our headers", rec.Code, rec.Header())
	}
}

// TestNoAllocForTheWrapper: the echo.Context wrapper is recycled.
func TestNoAllocForTheWrapper(t *testing.T) {
	e := echo.New()
	c := e.NewContext(httptest.NewRequest("GET", "/", nil), httptest.NewRecorder())
	if n := testing.AllocsPerRun(100, func() { wrap(c).release() }); n != 0 {
		t.Errorf("wrapping an echo.Context allocates %v times", n)
	}
}

func BenchmarkMiddleware(b *testing.B) {
	p := newPolicy(b, httplimit.Config{Limit: core.PerSecond(1 << 30)})
	e := echo.New()
	e.GET("/", func(echo.Context) error { return nil }, New(p))
	req := httptest.NewRequest("GET", "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		e.ServeHTTP(httptest.NewRecorder(), req)
	}
}
