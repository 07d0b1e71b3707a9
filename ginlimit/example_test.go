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

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.New(limiter, core.PerMinute(2)))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	for range 3 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"), rec.Body.String())
	}
	// Output:
	// 200 1  ok
	// 200 0  ok
	// 429 0 30 {"error":"rate limit exceeded","retry_after":30}
}

// Limit each signed-in user, with more for paid plans, after the
// authentication middleware has stored who they are.
func ExampleKeyByContextValue() {
	limiter, done := exampleLimiter()
	defer done()

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(func(c *gin.Context) { // stands for your authentication
		c.Set("user", c.GetHeader("X-User"))
		c.Set("plan", "free")
	})
	r.Use(ginlimit.New(limiter, core.PerMinute(10),
		ginlimit.WithName("users"),
		ginlimit.WithKey(ginlimit.KeyByContextValue("user")),
		ginlimit.WithLimitFunc(func(c *gin.Context) (core.Limit, bool) {
			return core.PerMinute(1000), c.GetString("plan") == "paid"
		}),
	))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-User", "alice")
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Limit"), rec.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 10 9
}

// Defer to Gin's client IP, once Gin's trusted proxies are configured.
func ExampleKeyByGinClientIP() {
	limiter, done := exampleLimiter()
	defer done()

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
		panic(err)
	}
	r.Use(ginlimit.New(limiter, core.PerMinute(10), ginlimit.WithKey(ginlimit.KeyByGinClientIP())))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.2:41000"
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 9
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
