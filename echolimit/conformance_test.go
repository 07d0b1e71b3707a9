package echolimit_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/conformance"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{New: newApp, ItemsPattern: "/items/:id"})
}

func req(c echo.Context) conformance.Req {
	return conformance.Req{Path: c.Request().URL.Path, Header: c.Request().Header.Get}
}

// newApp mounts the middleware on each route, where Echo knows the route
// pattern (c.Path()).
func newApp(t *testing.T, cfgs []conformance.Config) conformance.RoundTrip {
	var mws []echo.MiddlewareFunc
	var first, check *httplimit.Policy
	for i, cfg := range cfgs {
		p, c := conformance.Policies(t, cfg, func(r httplimit.Request) conformance.Req {
			return req(echolimit.Context(r))
		}, true)
		if i == 0 {
			first, check = p, c
		}
		ec := echolimit.Config{Policy: p}
		if f := cfg.KeyFunc; f != nil {
			ec.IdentifierExtractor = func(c echo.Context) (string, error) { return f(req(c)) }
		}
		if f := cfg.Skip; f != nil {
			ec.Skipper = func(c echo.Context) bool { return f(req(c)) }
		}
		if f := cfg.Deny; f != nil {
			ec.DenyHandler = func(c echo.Context, d httplimit.Decision) error {
				status, body := f(req(c), d)
				return c.Blob(status, "text/plain; charset=utf-8", []byte(body))
			}
		}
		mw, err := ec.ToMiddleware()
		if err != nil {
			t.Fatal(err)
		}
		mws = append(mws, mw)
	}
	e := echo.New()
	// A recover outside the middleware, answering as the suite asks.
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				if recover() != nil {
					err = c.String(http.StatusInternalServerError, "panicked")
				}
			}()
			return next(c)
		}
	})
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	// Echo routes HEAD apart from GET: one handler for both.
	e.Match([]string{http.MethodGet, http.MethodHead}, "/", ok, mws...)
	for _, path := range []string{"/search", "/healthz", "/items/:id"} {
		e.GET(path, ok, mws...)
	}
	e.Any("/any", ok, mws...)
	e.GET("/login", func(c echo.Context) error { return c.String(http.StatusUnauthorized, "bad password") }, mws...)
	e.GET("/spend", func(c echo.Context) error {
		n, _ := strconv.Atoi(c.Request().Header.Get("X-Used"))
		if !first.ReportCost(c.Request().Context(), n) {
			return c.String(http.StatusOK, "unsettled")
		}
		return c.String(http.StatusOK, "ok")
	}, mws...)
	e.GET("/panic", func(echo.Context) error { panic("conformance: /panic") }, mws...)
	e.GET("/inside", func(c echo.Context) error { return c.String(http.StatusOK, cfgs[0].Inside()) }, mws...)
	e.GET("/upload", func(c echo.Context) error {
		n, _ := strconv.Atoi(c.Request().Header.Get("X-Cost"))
		if proceed, err := echolimit.Check(c, check, n); !proceed {
			return err
		}
		return c.String(http.StatusOK, "stored")
	})
	e.GET("/reset", func(c echo.Context) error {
		if err := echolimit.Reset(c, first); err != nil {
			t.Errorf("Reset: %v", err)
		}
		return c.NoContent(http.StatusNoContent)
	})
	return func(r *http.Request) *http.Response {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, r)
		resp := rec.Result()
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp
	}
}

// TestMain says which real-Redis tests were skipped, without -v.
func TestMain(m *testing.M) { redistest.Main(m) }
