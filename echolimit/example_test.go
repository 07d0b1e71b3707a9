package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
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

	e := echo.New()
	e.Use(echolimit.New(limiter, core.PerMinute(2)))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })

	for range 3 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"), rec.Body.String())
	}
	// Output:
	// 200 1  ok
	// 200 0  ok
	// 429 0 30 {"error":"rate limit exceeded","retry_after":30}
}

// Key by API key (by client IP without one), skip health checks, send the
// IETF draft's fields too, and answer denials in your own words.
func ExampleWithConfig() {
	limiter, done := exampleLimiter()
	defer done()

	e := echo.New()
	e.Use(echolimit.WithConfig(echolimit.Config{
		Skipper: func(c echo.Context) bool { return c.Path() == "/healthz" },
		Limiter: limiter,
		Limit:   core.PerMinute(1),
		Name:    "api",
		Key:     core.KeyByHeader("X-API-Key", core.KeyByIP(nil)),
		Headers: core.HeadersBoth,
		DenyHandler: func(c echo.Context, d core.Decision) error {
			return c.JSON(d.Status(), map[string]any{"message": "slow down", "wait_seconds": d.RetryAfter()})
		},
	}))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })

	for _, path := range []string{"/", "/healthz", "/"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-API-Key", "k1")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(path, rec.Code, rec.Header().Get("RateLimit"), rec.Body.String())
	}
	// Output:
	// / 200 "api";r=0;t=60 ok
	// /healthz 200  ok
	// / 429 "api";r=0;t=60 {"message":"slow down","wait_seconds":60}
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
