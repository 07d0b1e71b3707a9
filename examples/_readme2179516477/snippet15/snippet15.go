package main

import (
	"log"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	limiter, err := core.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	byIP, err := httplimit.KeyByIP(httplimit.ClientIP{})
	if err != nil {
		log.Fatal(err)
	}
	perRoute, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerMinute(100),
		Key: httplimit.KeyJoin(httplimit.KeyByRoute(), byIP)})
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	limited := r.With(nethttplimit.New(perRoute)) // after routing: the route is known
	limited.Get("/items/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	// Not r.Use(nethttplimit.New(perRoute)): chi runs r.Use before it routes.
	log.Fatal(http.ListenAndServe(":8080", r))
}
