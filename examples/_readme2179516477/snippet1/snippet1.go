package main

import (
	"fmt"
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
)

func main() {
	// ContextTimeoutEnabled lets the Limiter's timeout (50 ms) end a slow call on the socket.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	limiter, err := core.New(rdb) // or redis.NewClusterClient, redis.NewFailoverClient
	if err != nil {
		log.Fatal(err)
	}
	policy, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limit:   core.PerMinute(100), // per client IP
	})
	if err != nil {
		log.Fatal(err)
	}

	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", nethttplimit.New(policy)(ok)) // limited
	mux.Handle("GET /healthz", ok)                        // not limited
	log.Fatal(http.ListenAndServe(":8080", mux))
}
