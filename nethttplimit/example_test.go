package nethttplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttplimit"
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

	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	handler := nethttplimit.New(limiter, core.PerMinute(2))(mux)

	for range 3 {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"), rec.Body.String())
	}
	// Output:
	// 200 1  ok
	// 200 0  ok
	// 429 0 30 {"error":"rate limit exceeded","retry_after":30}
}

// Key by API key, and requests without one by client IP; behind a reverse
// proxy on 10.0.0.0/8, whose X-Forwarded-For is then trusted.
func ExampleWithKey() {
	limiter, done := exampleLimiter()
	defer done()

	trusted, err := core.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	clientIP := &core.ClientIP{TrustedProxies: trusted}
	limit := nethttplimit.New(limiter, core.PerMinute(100),
		nethttplimit.WithName("api"),
		nethttplimit.WithKey(core.KeyByHeader("X-API-Key", core.KeyByIP(clientIP))),
	)
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.2:41000"
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Limit"), rec.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 100 99
}

// A friendlier denial, and health checks never limited.
func ExampleWithDenyHandler() {
	limiter, done := exampleLimiter()
	defer done()

	limit := nethttplimit.New(limiter, core.PerMinute(1),
		nethttplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		nethttplimit.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) {
			w.WriteHeader(d.Status())
			fmt.Fprintf(w, "Easy there! Try again in %d s.", d.RetryAfter())
		}),
	)
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))

	for _, path := range []string{"/", "/healthz", "/"} {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, rec.Code, rec.Body.String())
	}
	// Output:
	// / 200 ok
	// /healthz 200 ok
	// / 429 Easy there! Try again in 60 s.
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
