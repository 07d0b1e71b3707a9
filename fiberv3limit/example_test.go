package fiberv3limit_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gofiber/fiber/v3"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiberv3limit"
	"github.com/redlimit/redlimit/httplimit"
)

// exampleLimiter is a Limiter on an in-process Redis whose clock stands
// still; in production rdb is a client for your Redis, made with
// ContextTimeoutEnabled.
func exampleLimiter() (*core.Limiter, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	mr.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	// A patient timeout: the first call loads the script into miniredis'
	// Lua, slow under -race on a busy machine.
	limiter, err := core.New(rdb, core.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	return limiter, func() { _ = rdb.Close(); mr.Close() }
}

func Example() {
	limiter, done := exampleLimiter()
	defer done()

	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerMinute(2)})
	if err != nil {
		panic(err)
	}
	app := fiber.New()
	app.Use(fiberv3limit.New(fiberv3limit.Config{Policy: policy}))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok\n") })

	for range 3 {
		resp, err := app.Test(httptest.NewRequest("GET", "/", nil))
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		fmt.Print(resp.StatusCode, " ", resp.Header.Get("X-RateLimit-Remaining"), " ", string(body))
	}
	// Output:
	// 200 1 ok
	// 200 0 ok
	// 429 0 {"error":"rate limit exceeded","retry_after":30}
}

// Skip the health check, and key by an API key in Fiber's own shape.
func ExampleConfig() {
	limiter, done := exampleLimiter()
	defer done()

	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerMinute(100)})
	if err != nil {
		panic(err)
	}
	app := fiber.New()
	app.Use(fiberv3limit.New(fiberv3limit.Config{
		Next:         func(c fiber.Ctx) bool { return c.Path() == "/healthz" },
		Policy:       policy,
		KeyGenerator: func(c fiber.Ctx) string { return c.Get("X-API-Key") }, // none: 400
	}))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })

	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "k-123")
	resp, err := app.Test(r)
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	// Output:
	// 200 99
}
