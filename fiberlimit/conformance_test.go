package fiberlimit_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/redlimit/redlimit/fiberlimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/conformance"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{New: newApp, ItemsPattern: "/items/:id"})
}

func req(c *fiber.Ctx) conformance.Req {
	return conformance.Req{Path: c.Path(), Header: func(name string) string { return c.Get(name) }}
}

// testContext is the fasthttp user value that carries the test request's
// context to the app, which makes it the fiber user context.
const testContext = "conformance-context"

// newApp mounts the middleware on each route, so that it sees the route's
// pattern (see docs/http.md#fiber-v2).
//
// Requests are served through app.Handler() on a fasthttp.RequestCtx made
// with Init, fasthttp's own way of testing a handler: app.Test always
// reports the peer 0.0.0.0, and the suite needs to choose the peer address.
func newApp(t *testing.T, cfgs []conformance.Config) conformance.RoundTrip {
	var mws []fiber.Handler
	var first, check *httplimit.Policy
	for i, cfg := range cfgs {
		p, c := conformance.Policies(t, cfg, func(r httplimit.Request) conformance.Req {
			return req(fiberlimit.Ctx(r))
		}, true)
		if i == 0 {
			first, check = p, c
		}
		fc := fiberlimit.Config{Policy: p}
		if f := cfg.Skip; f != nil {
			fc.Next = func(c *fiber.Ctx) bool { return f(req(c)) }
		}
		if f := cfg.KeyFunc; f != nil {
			fc.KeyGenerator = func(c *fiber.Ctx) string {
				k, err := f(req(c))
				if err != nil {
					return "" // Fiber's shape has no error: unkeyable is empty
				}
				return k
			}
		}
		if f := cfg.Deny; f != nil {
			fc.LimitReached = func(c *fiber.Ctx, d httplimit.Decision) error {
				status, body := f(req(c), d)
				return c.Status(status).SendString(body)
			}
		}
		mws = append(mws, fiberlimit.New(fc))
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	// A recover outside the middleware, answering as the suite asks.
	app.Use(func(c *fiber.Ctx) (err error) {
		defer func() {
			if recover() != nil {
				err = c.Status(http.StatusInternalServerError).SendString("panicked")
			}
		}()
		return c.Next()
	})
	app.Use(func(c *fiber.Ctx) error {
		if ctx, ok := c.Context().UserValue(testContext).(context.Context); ok {
			c.SetUserContext(ctx)
		}
		return c.Next()
	})
	route := func(path string, h fiber.Handler) {
		app.Get(path, append(append([]fiber.Handler(nil), mws...), h)...)
	}
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	// Fiber's Get serves HEAD too, through the same handler.
	for _, path := range []string{"/", "/search", "/healthz", "/items/:id"} {
		route(path, ok)
	}
	app.All("/any", append(append([]fiber.Handler(nil), mws...), ok)...)
	route("/login", func(c *fiber.Ctx) error { return c.Status(http.StatusUnauthorized).SendString("bad password") })
	route("/spend", func(c *fiber.Ctx) error {
		n, _ := strconv.Atoi(c.Get("X-Used"))
		if !first.ReportCost(c.UserContext(), n) {
			return c.SendString("unsettled")
		}
		return c.SendString("ok")
	})
	route("/panic", func(*fiber.Ctx) error { panic("conformance: /panic") })
	route("/inside", func(c *fiber.Ctx) error { return c.SendString(cfgs[0].Inside()) })
	app.Get("/upload", func(c *fiber.Ctx) error {
		n, _ := strconv.Atoi(c.Get("X-Cost"))
		if proceed, err := fiberlimit.Check(c, check, n); !proceed {
			return err
		}
		return c.SendString("stored")
	})
	app.Get("/reset", func(c *fiber.Ctx) error {
		if err := fiberlimit.Reset(c, first); err != nil {
			t.Errorf("Reset: %v", err)
		}
		c.Status(http.StatusNoContent)
		return nil
	})
	handler := app.Handler()
	return func(r *http.Request) *http.Response {
		var fr fasthttp.Request
		fr.Header.SetMethod(r.Method)
		fr.SetRequestURI(r.URL.RequestURI())
		fr.Header.SetHost(r.Host)
		for name, values := range r.Header {
			for _, v := range values {
				fr.Header.Add(name, v)
			}
		}
		peer, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			t.Fatalf("RemoteAddr %q: %v", r.RemoteAddr, err)
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&fr, net.TCPAddrFromAddrPort(peer), nil)
		ctx.SetUserValue(testContext, r.Context())
		handler(&ctx)
		// The response as a client reads it off the wire: fasthttp's own
		// header iterators differ across the versions this module allows
		// (All is missing from v1.51, VisitAll deprecated since), its wire
		// format does not.
		var wire bytes.Buffer
		if _, err := ctx.Response.WriteTo(&wire); err != nil {
			t.Fatalf("writing the response: %v", err)
		}
		// No request: for a HEAD too the body is read, as the other
		// adapters' recorders keep it.
		resp, err := http.ReadResponse(bufio.NewReader(&wire), nil)
		if err != nil {
			t.Fatalf("reading the response back: %v", err)
		}
		return resp
	}
}

// TestMain says which real-Redis tests were skipped, without -v.
func TestMain(m *testing.M) { redistest.Main(m) }
