package nethttplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttplimit"
)

// A fleet of workers calls a third-party API that allows 100 requests per
// second to all of them together. Each worker is a process with its own
// Limiter on the Redis they share; here, four in one program, on an
// in-process Redis whose clock moves only when the example says so.
func ExampleNewTransport() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/busy" { // the API asks for 2 seconds of quiet
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer api.Close()
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mr.SetTime(now)
	advance := func(d time.Duration) { // as time passes in a real Redis
		now = now.Add(d)
		mr.SetTime(now)
		mr.FastForward(d)
	}

	var workers []*http.Client
	for range 4 {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		defer func() { _ = rdb.Close() }()
		limiter, err := core.New(rdb, core.WithTimeout(time.Second))
		if err != nil {
			panic(err)
		}
		defer func() { _ = limiter.Close() }()
		transport, err := nethttplimit.NewTransport(nethttplimit.TransportConfig{
			Limiter: limiter,
			Limit:   core.PerSecond(100),
			// A worker puts the job back rather than hold it; without
			// FailFast, it waits for its turn within the request's context.
			FailFast: true,
		})
		if err != nil {
			panic(err)
		}
		workers = append(workers, &http.Client{Transport: transport})
	}
	call := func(w *http.Client, path string) string {
		resp, err := w.Get(api.URL + path)
		var refused *nethttplimit.LimitError
		switch {
		case errors.As(err, &refused):
			return fmt.Sprint("refused, retry after ", refused.Result.RetryAfter)
		case err != nil:
			return err.Error()
		}
		_ = resp.Body.Close()
		return resp.Status
	}

	// In one instant, each worker tries 30 calls: 100 of the 120 are made.
	answers := map[string]int{}
	for _, w := range workers {
		for range 30 {
			answers[call(w, "/v1/items")]++
		}
	}
	fmt.Println(answers)

	// A second later the API answers one worker 429, Retry-After: 2, and
	// every worker holds off for those 2 seconds.
	advance(time.Second)
	fmt.Println("worker 1:", call(workers[0], "/v1/busy"))
	fmt.Println("worker 4:", call(workers[3], "/v1/items"))
	advance(2 * time.Second)
	fmt.Println("2s later, worker 4:", call(workers[3], "/v1/items"))
	// Output:
	// map[200 OK:100 refused, retry after 10ms:20]
	// worker 1: 429 Too Many Requests
	// worker 4: refused, retry after 2s
	// 2s later, worker 4: 200 OK
}
