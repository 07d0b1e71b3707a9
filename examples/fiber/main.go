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
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/exampleapp"
	"github.com/redlimit/redlimit/fiberlimit"
	"github.com/redlimit/redlimit/httplimit"
)

func main() { exampleapp.Main(run) }

// run serves until ctx ends. Flags, the log, the embedded miniredis,
// metrics and the graceful shutdown are exampleapp's, the same for every
// framework; the rest is what an app of yours would do.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup("fiber", args, getenv, stdout)
	if err != nil {
		return err
	}
	defer app.Close()

	// One client and one Limiter for the whole process. With
	// ContextTimeoutEnabled, go-redis stops at a context's deadline on the
	// socket itself: the Limiter's timeout then ends a call Redis is slow
	// to answer, and the fail policy answers the request.
	opts := app.RedisOptions() // -redis, -redis-cluster, or the embedded miniredis
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewUniversalClient(opts)
	defer func() {
		if err := rdb.Close(); err != nil {
			app.Log.Warn("closing the redis client", "err", err)
		}
	}()
	// The Limiter logs Redis failing and answering again, and a Redis that
	// may evict its keys. Its deny cache answers a client that comes back
	// before its Retry-After without asking Redis, which keeps a flood off it.
	limiter, err := core.New(rdb, core.WithTimeout(app.Timeout), core.WithLogger(app.Log), core.WithDenyCache(10000))
	if err != nil {
		return err
	}
	// Ask Redis once at start: a wrong address shows now, not at the first
	// request, and the Limiter warns if Redis may evict its keys.
	if _, err := limiter.Ping(ctx); err != nil {
		app.Log.Warn("redis check failed at start; the fail policy applies until it answers", "err", err)
	}

	observers, metrics := app.Metrics(limiter) // nil, nil without -metrics
	policy, err := httplimit.New(httplimit.Config{
		Limiter:   limiter,
		Limit:     app.Limit,
		Key:       app.Key,
		Fail:      app.Fail,
		Headers:   app.Headers,
		MaxWait:   app.MaxWait,
		Observers: observers,
		// -concurrency: requests of a key in flight at once, on every
		// instance on this Redis (0: no limit).
		InFlight:      app.InFlight,
		InFlightLease: app.InFlightLease,
		Settle:        true, // handlers may report what a request really cost (GET /spend)
	})
	if err != nil {
		return err
	}

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
		fiberlimit.ReportCost(c, policy, units) // settled once this handler returns
		return c.SendString("ok")
	}

	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	limit := fiberlimit.New(fiberlimit.Config{Policy: policy}) // one middleware, one limit for every route it is on
	// Get routes HEAD too: both are limited, with one limit.
	f.Get("/", limit, ok)
	f.Get("/slow", limit, slow)
	f.Get("/spend", limit, spend)
	f.Get("/healthz", ok)
	if metrics != nil {
		f.Get("/metrics", adaptor.HTTPHandler(metrics))
	}
	return app.Serve(ctx, f.Listener, f.ShutdownWithContext)
}
