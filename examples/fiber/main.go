// Command fiber is the Fiber (v2) example server: GET /, /slow and /spend are
// rate limited through Redis by fiberlimit, GET /healthz never is. Its flags,
// env vars and answers are those of the example contract in examples/README.md.
// Try, from the repository's root:
//
//	go run ./examples/fiber -limit 3 -period 10s
//	curl -i localhost:8080/
package main

import (
	"context"
	"io"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/redlimit/redlimit/examples/internal/exampleapp"
	"github.com/redlimit/redlimit/fiberlimit"
)

func main() { exampleapp.Main(run) }

// run serves until ctx ends. Flags, the log, the embedded miniredis, the
// Redis client, the Limiter and the Policy, metrics and the graceful
// shutdown are exampleapp's, the same for every framework; the rest is what
// Fiber asks of an app.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "fiber", args, getenv, stdout)
	if err != nil {
		return err
	}
	defer app.Close()

	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	// fasthttp cannot tell that a client left, so it never ends
	// c.UserContext(): here the sleep runs to its end.
	slow := func(c *fiber.Ctx) error {
		if err := exampleapp.Slow(c.UserContext(), c.Query("ms")); err != nil {
			return c.Status(fiber.StatusBadRequest).SendString(err.Error())
		}
		return c.SendString("ok")
	}
	spend := func(c *fiber.Ctx) error {
		units, err := exampleapp.Units(c.Query("units"))
		if err != nil {
			return c.Status(fiber.StatusBadRequest).SendString(err.Error())
		}
		app.Policy.ReportCost(c.UserContext(), units) // settled once this handler returns
		return c.SendString("ok")
	}

	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	limit := fiberlimit.New(fiberlimit.Config{Policy: app.Policy}) // one middleware, one limit for every route it is on
	// Get routes HEAD too: both are limited, with one limit.
	f.Get("/", limit, ok)
	f.Get("/slow", limit, slow)
	f.Get("/spend", limit, spend)
	f.Get("/healthz", ok)
	if app.Metrics != nil {
		f.Get("/metrics", adaptor.HTTPHandler(app.Metrics))
	}
	return app.Serve(ctx, f.Listener, f.ShutdownWithContext)
}
