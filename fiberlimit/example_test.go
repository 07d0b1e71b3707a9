package fiberlimit_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiberlimit"
)

func Example() {
	// An in-process Redis for the example; use your own in production.
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// A generous timeout, for busy test machines; the default,
	// core.DefaultTimeout, suits a Redis on the same network.
	limiter := core.New(rdb, core.WithTimeout(time.Second))

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberlimit.New(fiberlimit.Config{
		Limiter: limiter,
		Limit:   core.PerMinute(2),
	}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })

	for range 3 {
		resp, err := app.Test(httptest.NewRequest("GET", "/", nil))
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), resp.Header.Get("Retry-After"), string(body))
	}
	// Output:
	// 200 1  ok
	// 200 0  ok
	// 429 0 30 {"error":"rate limit exceeded","retry_after":30}
}

// A per-route limit: the middleware on the route sees the route's pattern,
// so core.KeyByRoute gives every client one shared quota for it. Health
// checks skip the app-wide limit.
func ExampleConfig_perRoute() {
	limiter, done := exampleLimiter()
	defer done()

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberlimit.New(fiberlimit.Config{
		Next:    func(c *fiber.Ctx) bool { return c.Path() == "/healthz" },
		Limiter: limiter,
		Limit:   core.PerSecond(100),
	}))
	search := fiberlimit.New(fiberlimit.Config{
		Limiter: limiter,
		Name:    "search",
		Limit:   core.PerMinute(1000),
		Key:     core.KeyByRoute(),
		LimitReached: func(c *fiber.Ctx, d core.Decision) error {
			return c.Status(d.Status()).SendString("search is busy, try again soon")
		},
	})
	app.Get("/search/:term", search, func(c *fiber.Ctx) error { return c.SendString("results") })
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })

	for _, path := range []string{"/search/a", "/search/b", "/healthz"} {
		resp, err := app.Test(httptest.NewRequest("GET", path, nil))
		if err != nil {
			panic(err)
		}
		fmt.Println(path, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /search/a 200 1000 999
	// /search/b 200 1000 998
	// /healthz 200
}

// exampleLimiter is a Limiter on an in-process miniredis.
func exampleLimiter() (*core.Limiter, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	return core.New(rdb, core.WithTimeout(time.Second)), func() { _ = rdb.Close(); mr.Close() }
}
