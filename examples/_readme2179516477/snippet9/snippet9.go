package main

import (
	"log"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginlimit"
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

	r := gin.New()
	r.Use(ginlimit.New(policy)) // or per route: r.GET("/", ginlimit.New(policy), handler)
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	log.Fatal(r.Run(":8080"))
}
