package fiberlimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

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

func TestNewPanicsWithoutPolicy(t *testing.T) {
	for name, cfg := range map[string][]Config{"no config": nil, "no policy": {{}}} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if err, _ := recover().(error); err == nil {
					t.Error("New did not panic")
				}
			}()
			New(cfg...)
		})
	}
}

// TestFiberIdioms: KeyGenerator and KeyByLocals key from the *fiber.Ctx, an
// empty key is refused, and a *fiber.Error returned by the handler decides
// CountIf.
func TestFiberIdioms(t *testing.T) {
	p := newPolicy(t, httplimit.Config{Limit: core.PerMinute(2), CountIf: func(status int) bool { return status >= 400 }, Key: KeyByLocals("user")})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error {
		if u := c.Get("X-User"); u != "" {
			c.Locals("user", u)
		}
		return c.Next()
	})
	app.Get("/", New(Config{Policy: p}), func(c *fiber.Ctx) error {
		if c.Get("X-Fail") != "" {
			return fiber.NewError(http.StatusUnauthorized, "bad password")
		}
		return c.SendStatus(http.StatusNoContent)
	})
	serve := func(user string, fail bool) int {
		r := httptest.NewRequest("GET", "/", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		if fail {
			r.Header.Set("X-Fail", "1")
		}
		resp, err := app.Test(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	if got := serve("", false); got != http.StatusBadRequest {
		t.Errorf("no user: %d, want 400", got)
	}
	for range 3 {
		if got := serve("alice", false); got != http.StatusNoContent {
			t.Fatalf("alice: %d, want 204 (successes do not count)", got)
		}
	}
	for range 2 {
		if got := serve("alice", true); got != http.StatusUnauthorized {
			t.Fatalf("alice failing: %d, want 401", got)
		}
	}
	if got := serve("alice", false); got != http.StatusTooManyRequests {
		t.Errorf("after two failures: %d, want 429", got)
	}
}

// TestKeyByIP defers to Fiber's own trusted proxy settings.
func TestKeyByIP(t *testing.T) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ProxyHeader: fiber.HeaderXForwardedFor,
		EnableTrustedProxyCheck: true, TrustedProxies: []string{"0.0.0.0"}})
	var got string
	app.Get("/", func(c *fiber.Ctx) error {
		got, _ = KeyByFiberIP()(request{c})
		return nil
	})
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Forwarded-For", "203.0.113.4")
	if _, err := app.Test(r); err != nil {
		t.Fatal(err)
	}
	if got != "ip:203.0.113.4" {
		t.Errorf("KeyByIP behind a trusted proxy (app.Test's peer is 0.0.0.0) = %q, want ip:203.0.113.4", got)
	}
}

func BenchmarkMiddleware(b *testing.B) {
	p := newPolicy(b, httplimit.Config{Limit: core.PerSecond(1 << 30)})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/", New(Config{Policy: p}), func(*fiber.Ctx) error { return nil })
	h := app.Handler()
	b.ReportAllocs()
	for b.Loop() {
		var ctx fasthttpCtx
		ctx.init()
		h(&ctx.RequestCtx)
	}
}

// TestOuterMiddlewareKeepsItsContext: under InFlight the handler gets a
// user context of its own, which ends with the request's Finish; the
// middlewares before this one get back the one they set, still live.
func TestOuterMiddlewareKeepsItsContext(t *testing.T) {
	p := newPolicy(t, httplimit.Config{Limit: core.PerMinute(10), InFlight: 1})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	var afterErr, inner error
	var kept bool
	type key struct{}
	app.Use(func(c *fiber.Ctx) error {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "outer"))
		defer cancel()
		c.SetUserContext(ctx)
		err := c.Next()
		afterErr, kept = c.UserContext().Err(), c.UserContext() == ctx
		return err
	})
	app.Get("/", New(Config{Policy: p}), func(c *fiber.Ctx) error {
		inner = c.UserContext().Err()
		return c.SendStatus(http.StatusNoContent)
	})
	resp, err := app.Test(httptest.NewRequest("GET", "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNoContent || inner != nil {
		t.Fatalf("status %d, handler's context %v; want 204 and a live context", resp.StatusCode, inner)
	}
	if !kept || afterErr != nil {
		t.Errorf("after the limiter the outer middleware's context is its own: %v, ended: %v; want its own, live", kept, afterErr)
	}
}
