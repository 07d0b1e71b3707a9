package main

import (
	"log"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/httplimit"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	limiter, err := core.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerMinute(100)})
	if err != nil {
		log.Fatal(err)
	}

	e := echo.New()
	e.Use(echolimit.New(policy)) // or echolimit.Config{Skipper: ..., Policy: policy}.ToMiddleware()
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	log.Fatal(e.Start(":8080"))
}
