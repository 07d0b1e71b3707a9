package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/internal/conformance"
)

func init() { gin.SetMode(gin.TestMode) }

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{New: newApp, ItemsPattern: "/items/:id"})
}

func req(c *gin.Context) conformance.Req {
	return conformance.Req{Path: c.Request.URL.Path, Header: c.GetHeader}
}

func newApp(t *testing.T, cfg conformance.Config) conformance.RoundTrip {
	opts := []ginlimit.Option{
		ginlimit.WithName(cfg.Name),
		ginlimit.WithHeaders(cfg.Headers),
		ginlimit.WithFailPolicy(cfg.Fail),
		ginlimit.WithDryRun(cfg.DryRun),
		ginlimit.WithMaxWait(cfg.MaxWait),
		ginlimit.WithObserver(cfg.Observer),
		ginlimit.WithErrorHandler(func(c *gin.Context, err error) { cfg.OnError(req(c), err) }),
	}
	if cfg.ClientIP != nil {
		opts = append(opts, ginlimit.WithClientIP(cfg.ClientIP))
	}
	if cfg.Key != nil {
		opts = append(opts, ginlimit.WithKey(cfg.Key))
	}
	if f := cfg.KeyFunc; f != nil {
		opts = append(opts, ginlimit.WithKeyFunc(func(c *gin.Context) (string, error) { return f(req(c)) }))
	}
	if f := cfg.LimitFunc; f != nil {
		opts = append(opts, ginlimit.WithLimitFunc(func(c *gin.Context) (core.Limit, bool) { return f(req(c)) }))
	}
	if f := cfg.Cost; f != nil {
		opts = append(opts, ginlimit.WithCost(func(c *gin.Context) int { return f(req(c)) }))
	}
	if f := cfg.Skip; f != nil {
		opts = append(opts, ginlimit.WithSkip(func(c *gin.Context) bool { return f(req(c)) }))
	}
	if f := cfg.Deny; f != nil {
		opts = append(opts, ginlimit.WithDenyHandler(func(c *gin.Context, d core.Decision) {
			status, body := f(req(c), d)
			c.String(status, "%s", body)
		}))
	}
	r := gin.New()
	r.Use(ginlimit.New(cfg.Limiter, cfg.Limit, opts...))
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	for _, path := range []string{"/", "/search", "/healthz", "/items/:id"} {
		r.GET(path, ok)
	}
	return func(req *http.Request) *http.Response {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec.Result()
	}
}
