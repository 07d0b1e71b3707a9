package fiberv3limit_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/redlimit/redlimit/fiberv3limit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/conformance"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{New: newApp, ItemsPattern: "/items/:id"})
}

func req(c fiber.Ctx) conformance.Req {
	return conformance.Req{Path: c.Path(), Header: func(name string) string { return c.Get(name) }}
}

// testContext is the fasthttp user value that carries the test request's
// context to the app, which makes it the fiber user context.
const testContext = "conformance-context"

// newApp mounts the middleware on each route, so that it sees the route's
// pattern (see docs/http.md#fiber-v3).
//
// Requests are served through app.Handler() on a fasthttp.RequestCtx made
// with Init, fasthttp's own way of testing a handler: app.Test always
// reports the peer 0.0.0.0, and the suite needs to choose the peer address.
func newApp(t *testing.T, cfgs []conformance.Config) conformance.RoundTrip {
	var mws []any
	var first, check *httplimit.Policy
	for i, cfg := range cfgs {
		p, c := conformance.Policies(t, cfg, func(r httplimit.Request) conformance.Req {
			return req(fiberv3limit.Ctx(r))
		}, true)
		if i == 0 {
			first, check = p, c
		}
		fc := fiberv3limit.Config{Policy: p}
		if f := cfg.Skip; f != nil {
			fc.Next = func(c fiber.Ctx) bool { return f(req(c)) }
		}
		if f := cfg.KeyFunc; f != nil {
			fc.KeyGenerator = func(c fiber.Ctx) string {
				k, err := f(req(c))
				if err != nil {
					return "" // Fiber's shape has no error: unkeyable is empty
				}
				return k
			}
		}
		if f := cfg.Deny; f != nil {
			fc.LimitReached = func(c fiber.Ctx, d httplimit.Decision) error {
				status, body := f(req(c), d)
				return c.Status(status).SendString(body)
			}
		}
		mws = append(mws, fiberv3limit.New(fc))
	}
	app := fiber.New()
	// A recover outside the middleware, answering as the suite asks.
	app.Use(func(c fiber.Ctx) (err error) {
		defer func() {
			if recover() != nil {
				err = c.Status(http.StatusInternalServerError).SendString("panicked")
			}
		}()
		return c.Next()
	})
	app.Use(func(c fiber.Ctx) error {
		if ctx, ok := c.RequestCtx().UserValue(testContext).(context.Context); ok {
			c.SetContext(ctx)
		}
		return c.Next()
	})
	route := func(path string, h func(c fiber.Ctx) error) {
		handlers := append(append([]any(nil), mws[1:]...), h)
		app.Get(path, mws[0], handlers...)
	}
	ok := func(c fiber.Ctx) error { return c.SendString("ok") }
	// Fiber's Get serves HEAD too, through the same handler.
	for _, path := range []string{"/", "/search", "/healthz", "/items/:id"} {
		route(path, ok)
	}
	app.All("/any", mws[0], append(append([]any(nil), mws[1:]...), ok)...)
	route("/login", func(c fiber.Ctx) error { return c.Status(http.StatusUnauthorized).SendString("bad password") })
	route("/spend", func(c fiber.Ctx) error {
		n, _ := strconv.Atoi(c.Get("X-Used"))
		if !first.ReportCost(c.Context(), n) {
			return c.SendString("unsettled")
		}
		return c.SendString("ok")
	})
	route("/panic", func(fiber.Ctx) error { panic("conformance: /panic") })
	route("/inside", func(c fiber.Ctx) error { return c.SendString(cfgs[0].Inside()) })
	app.Get("/upload", func(c fiber.Ctx) error {
		n, _ := strconv.Atoi(c.Get("X-Cost"))
		if proceed, err := fiberv3limit.Check(c, check, n); !proceed {
			return err
		}
		return c.SendString("stored")
	})
	app.Get("/reset", func(c fiber.Ctx) error {
		if err := fiberv3limit.Reset(c, first); err != nil {
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
		resp := &http.Response{
			StatusCode: ctx.Response.StatusCode(),
			Header:     http.Header{},
			Body:       io.NopCloser(bytes.NewReader(bytes.Clone(ctx.Response.Body()))),
		}
		for k, v := range ctx.Response.Header.All() {
			resp.Header.Add(string(k), string(v))
		}
		return resp
	}
}

// TestMain says which real-Redis tests were skipped, without -v.
func TestMain(m *testing.M) { redistest.Main(m) }
