// Command fiber is the Fiber example server: GET / is rate limited through
// Redis by fiberlimit, GET /healthz never is. Flags, env vars and behaviour
// follow ../../../shared/docs/example-contract.md; try
//
//	go run ./examples/fiber -limit 3 -period 10s
//	curl -i localhost:8080/
package main

import (
	"context"
	"io"
	"net"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/redlimit/redlimit/examples/internal/exampleapp"
	"github.com/redlimit/redlimit/fiberlimit"
)

func main() { exampleapp.Main("fiber", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "fiber", args, getenv, stdout)
	if err != nil {
		return exampleapp.IgnoreHelp(err)
	}
	defer app.Close()

	f := fiber.New(fiber.Config{DisableStartupMessage: true})

	limit := fiberlimit.New(fiberlimit.Config{
		Limiter:  app.Limiter,
		Limit:    app.Limit,
		Key:      app.Key,
		Headers:  app.Headers,
		Fail:     app.Fail,
		MaxWait:  app.MaxWait,
		Observer: app.Observer,
	})

	f.Get("/", limit, func(c *fiber.Ctx) error { return c.SendString("ok") })
	f.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })
	if app.Metrics != nil {
		f.Get("/metrics", adaptor.HTTPHandler(app.Metrics))
	}
	return app.Serve(ctx, server{f})
}

// server serves the Fiber app on the listener exampleapp opened.
type server struct{ app *fiber.App }

func (s server) Serve(l net.Listener) error         { return s.app.Listener(l) }
func (s server) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
