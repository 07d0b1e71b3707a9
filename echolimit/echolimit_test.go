package echolimit_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestWithConfigPanicsOnInvalidConfig(t *testing.T) {
	_, rdb := redistest.Mini(t)
	for name, cfg := range map[string]echolimit.Config{
		"nil limiter": {Limit: core.PerSecond(1)},
		"zero limit":  {Limiter: core.New(rdb)},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if err == nil || !strings.HasPrefix(err.Error(), "echolimit: ") {
					t.Errorf("panic: got %v, want an error starting echolimit:", err)
				}
			}()
			echolimit.WithConfig(cfg)
		})
	}
}

func TestKeyByEchoRealIP(t *testing.T) {
	tests := []struct {
		name, remote, xff, want string
	}{
		{"trusted proxy", "10.0.0.2:1", "203.0.113.7", "ip:203.0.113.7"},
		{"untrusted peer", "192.0.2.1:1", "203.0.113.7", "ip:192.0.2.1"},
		{"ipv6 by /64", "[2001:db8::1]:1", "", "ip:2001:db8::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			_, proxies, _ := net.ParseCIDR("10.0.0.0/8")
			e := echo.New()
			e.IPExtractor = echo.ExtractIPFromXFFHeader(
				echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false),
				echo.TrustIPRange(proxies))
			var got string
			var gotErr error
			byIP := echolimit.KeyByEchoRealIP()
			e.Use(echolimit.WithConfig(echolimit.Config{Limiter: core.New(rdb, core.WithPrefix(t.Name())), Limit: core.PerSecond(10),
				Key: func(r core.Request) (string, error) { got, gotErr = byIP(r); return got, gotErr }}))
			e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = tt.remote
			if tt.xff != "" {
				req.Header.Set("X-Forwarded-For", tt.xff)
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != http.StatusNoContent || got != tt.want || gotErr != nil {
				t.Errorf("got status %d, key %q, %v; want 204, %q", rec.Code, got, gotErr, tt.want)
			}
		})
	}
}

type foreignRequest struct{}

func (foreignRequest) Context() context.Context { return context.Background() }
func (foreignRequest) RemoteAddr() string       { return "192.0.2.1:1" }
func (foreignRequest) Header(string) string     { return "" }
func (foreignRequest) Method() string           { return "GET" }
func (foreignRequest) Route() string            { return "/" }

func TestKeyByEchoRealIPOutsideEcho(t *testing.T) {
	if _, err := echolimit.KeyByEchoRealIP()(foreignRequest{}); err == nil {
		t.Error("on a non-echo request: got no error")
	}
}
