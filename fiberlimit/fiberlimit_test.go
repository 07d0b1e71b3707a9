package fiberlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiberlimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestNewPanicsOnInvalidConfig(t *testing.T) {
	for name, cfg := range map[string][]fiberlimit.Config{
		"no config":   nil,
		"nil limiter": {{Limit: core.PerSecond(1)}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if err == nil || !strings.HasPrefix(err.Error(), "fiberlimit: ") {
					t.Errorf("panic: got %v, want an error starting fiberlimit:", err)
				}
			}()
			fiberlimit.New(cfg...)
		})
	}
}

// TestConfigDefault: what a Config leaves unset comes from ConfigDefault.
func TestConfigDefault(t *testing.T) {
	_, rdb := redistest.Mini(t)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberlimit.New(fiberlimit.Config{Limiter: core.New(rdb, core.WithPrefix(t.Name())), Headers: core.HeadersIETF}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	resp, err := app.Test(httptest.NewRequest("GET", "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Header.Get("RateLimit-Policy"), `"http";q=10;w=1`; got != want {
		t.Errorf("RateLimit-Policy: got %q, want %q (ConfigDefault's Name and Limit)", got, want)
	}
}

func TestKeyByFiberIP(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		want    string
	}{
		// app.Test's peer is always 0.0.0.0.
		{"trusted proxy", []string{"0.0.0.0"}, "ip:203.0.113.7"},
		{"untrusted peer", []string{"10.0.0.0/8"}, "ip:0.0.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			app := fiber.New(fiber.Config{DisableStartupMessage: true,
				ProxyHeader: fiber.HeaderXForwardedFor, EnableTrustedProxyCheck: true, TrustedProxies: tt.trusted})
			var got string
			var gotErr error
			byIP := fiberlimit.KeyByFiberIP()
			app.Use(fiberlimit.New(fiberlimit.Config{Limiter: core.New(rdb, core.WithPrefix(t.Name())),
				Key: func(r core.Request) (string, error) { got, gotErr = byIP(r); return got, gotErr }}))
			app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusNoContent) })
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-Forwarded-For", "203.0.113.7")
			resp, err := app.Test(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusNoContent || got != tt.want || gotErr != nil {
				t.Errorf("got status %d, key %q, %v; want 204, %q", resp.StatusCode, got, gotErr, tt.want)
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

func TestKeyByFiberIPOutsideFiber(t *testing.T) {
	if _, err := fiberlimit.KeyByFiberIP()(foreignRequest{}); err == nil {
		t.Error("on a non-fiber request: got no error")
	}
}
