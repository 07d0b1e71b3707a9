package nethttplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
)

// exampleLimiter is a Limiter on an in-process Redis whose clock stands
// still, so the examples print the same on every run; in production rdb
// is a client for your Redis, made with ContextTimeoutEnabled.
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

	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })

	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerMinute(2)})
	if err != nil {
		panic(err)
	}
	handler := nethttplimit.New(policy)(mux)

	for range 3 {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Print(rec.Code, " ", rec.Header().Get("X-RateLimit-Remaining"), " ", rec.Body.String())
	}
	// Output:
	// 200 1 ok
	// 200 0 ok
	// 429 0 {"error":"rate limit exceeded","retry_after":30}
}

// Key by API key, and requests without one by client IP; behind a reverse
// proxy on 10.0.0.0/8, whose X-Forwarded-For is then trusted.
func Example_apiKey() {
	limiter, done := exampleLimiter()
	defer done()

	byIP, err := httplimit.KeyByIP(httplimit.ClientIP{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		panic(err)
	}
	policy, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Name:    "api",
		Limit:   core.PerMinute(100),
		Key:     httplimit.KeyFirst(httplimit.KeyByHeader("X-API-Key"), byIP),
	})
	if err != nil {
		panic(err)
	}
	handler := nethttplimit.New(policy)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.7:5000" // the proxy
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, r)
	fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 99
}

// Limit uploaded bytes from inside the handler, where the size is known.
func ExampleCheck() {
	limiter, done := exampleLimiter()
	defer done()

	bytesPerClient, err := httplimit.New(httplimit.Config{Limiter: limiter, Name: "upload-bytes", Limit: core.PerMinute(1 << 20)})
	if err != nil {
		panic(err)
	}
	upload := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
		if !nethttplimit.Check(w, r, bytesPerClient, max(1, len(body))) {
			return // 429 (or 503 for a body above the capacity) is written
		}
		_, _ = fmt.Fprintf(w, "stored %d bytes\n", len(body))
	}
	for range 2 {
		rec := httptest.NewRecorder()
		upload(rec, httptest.NewRequest("POST", "/upload", strings.NewReader(strings.Repeat("x", 600<<10))))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	// Output:
	// 200 stored 614400 bytes
	// 429 {"error":"rate limit exceeded","retry_after":11}
}

// Count failed logins only, and forgive a client who logs in.
func ExampleReset() {
	limiter, done := exampleLimiter()
	defer done()

	logins, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Name:    "login",
		Limit:   core.PerMinute(3),
		CountIf: func(status int) bool { return status >= 400 },
	})
	if err != nil {
		panic(err)
	}
	login := nethttplimit.New(logins)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = nethttplimit.Reset(r, logins) // a good password clears the failures
		_, _ = io.WriteString(w, "welcome\n")
	}))
	for _, password := range []string{"guess1", "guess2", "guess3", "s3cret", "guess4"} {
		rec := httptest.NewRecorder()
		login.ServeHTTP(rec, httptest.NewRequest("POST", "/login?password="+password, nil))
		fmt.Println(password, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// guess1 401 2
	// guess2 401 1
	// guess3 401 0
	// s3cret 429 0
	// guess4 429 0
}
