package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginlimit"
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
	gin.SetMode(gin.ReleaseMode)

	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerMinute(2)})
	if err != nil {
		panic(err)
	}
	r := gin.New()
	r.Use(ginlimit.New(policy))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })

	for range 3 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Print(rec.Code, " ", rec.Header().Get("X-RateLimit-Remaining"), " ", rec.Body.String())
	}
	// Output:
	// 200 1 ok
	// 200 0 ok
	// 429 0 {"error":"rate limit exceeded","retry_after":30}
}

// Key by the user an authentication middleware stored in the context.
func ExampleKeyByContextValue() {
	limiter, done := exampleLimiter()
	defer done()
	gin.SetMode(gin.ReleaseMode)

	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerMinute(100),
		Key: ginlimit.KeyByContextValue("user")})
	if err != nil {
		panic(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user", "alice") }) // your authentication
	r.Use(ginlimit.New(policy))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 99
}
