package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/internal/conformance"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{New: newApp, ItemsPattern: "/items/:id"})
}

func req(c echo.Context) conformance.Req {
	return conformance.Req{Path: c.Request().URL.Path, Header: c.Request().Header.Get}
}

func newApp(t *testing.T, cfg conformance.Config) conformance.RoundTrip {
	ec := echolimit.Config{
		Limiter:      cfg.Limiter,
		Limit:        cfg.Limit,
		Key:          cfg.Key,
		Name:         cfg.Name,
		Headers:      cfg.Headers,
		Fail:         cfg.Fail,
		DryRun:       cfg.DryRun,
		MaxWait:      cfg.MaxWait,
		ClientIP:     cfg.ClientIP,
		Observer:     cfg.Observer,
		ErrorHandler: func(c echo.Context, err error) { cfg.OnError(req(c), err) },
	}
	if f := cfg.Skip; f != nil {
		ec.Skipper = func(c echo.Context) bool { return f(req(c)) }
	}
	if f := cfg.KeyFunc; f != nil {
		ec.IdentifierExtractor = func(c echo.Context) (string, error) { return f(req(c)) }
	}
	if f := cfg.LimitFunc; f != nil {
		ec.LimitFunc = func(c echo.Context) (core.Limit, bool) { return f(req(c)) }
	}
	if f := cfg.Cost; f != nil {
		ec.Cost = func(c echo.Context) int { return f(req(c)) }
	}
	if f := cfg.Deny; f != nil {
		ec.DenyHandler = func(c echo.Context, d core.Decision) error {
			status, body := f(req(c), d)
			return c.String(status, body)
		}
	}
	e := echo.New()
	e.Use(echolimit.WithConfig(ec))
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	for _, path := range []string{"/", "/search", "/healthz", "/items/:id"} {
		e.GET(path, ok)
	}
	return func(req *http.Request) *http.Response {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec.Result()
	}
}
