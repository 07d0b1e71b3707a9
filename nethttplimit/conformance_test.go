package nethttplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/conformance"
	"github.com/redlimit/redlimit/nethttplimit"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{New: newApp, ItemsPattern: "/items/{id}"})
}

func req(r *http.Request) conformance.Req {
	return conformance.Req{Path: r.URL.Path, Header: r.Header.Get}
}

// newApp wraps each route's handler, so that the middleware sees the
// ServeMux pattern.
func newApp(t *testing.T, cfg conformance.Config) conformance.RoundTrip {
	opts := []nethttplimit.Option{
		nethttplimit.WithName(cfg.Name),
		nethttplimit.WithHeaders(cfg.Headers),
		nethttplimit.WithFailPolicy(cfg.Fail),
		nethttplimit.WithDryRun(cfg.DryRun),
		nethttplimit.WithMaxWait(cfg.MaxWait),
		nethttplimit.WithObserver(cfg.Observer),
		nethttplimit.WithErrorHandler(func(r *http.Request, err error) { cfg.OnError(req(r), err) }),
	}
	if cfg.ClientIP != nil {
		opts = append(opts, nethttplimit.WithClientIP(cfg.ClientIP))
	}
	if cfg.Key != nil {
		opts = append(opts, nethttplimit.WithKey(cfg.Key))
	}
	if f := cfg.KeyFunc; f != nil {
		opts = append(opts, nethttplimit.WithKeyFunc(func(r *http.Request) (string, error) { return f(req(r)) }))
	}
	if f := cfg.LimitFunc; f != nil {
		opts = append(opts, nethttplimit.WithLimitFunc(func(r *http.Request) (core.Limit, bool) { return f(req(r)) }))
	}
	if f := cfg.Cost; f != nil {
		opts = append(opts, nethttplimit.WithCost(func(r *http.Request) int { return f(req(r)) }))
	}
	if f := cfg.Skip; f != nil {
		opts = append(opts, nethttplimit.WithSkip(func(r *http.Request) bool { return f(req(r)) }))
	}
	if f := cfg.Deny; f != nil {
		opts = append(opts, nethttplimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d core.Decision) {
			status, body := f(req(r), d)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
	}
	limited := nethttplimit.New(cfg.Limiter, cfg.Limit, opts...)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	for _, pattern := range []string{"GET /", "GET /search", "GET /healthz", "GET /items/{id}"} {
		mux.Handle(pattern, limited(ok))
	}
	return func(r *http.Request) *http.Response {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		return rec.Result()
	}
}
