package main

import (
	"log"

	"github.com/gofiber/fiber/v3"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiberv3limit"
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

	app := fiber.New()
	app.Use(fiberv3limit.New(fiberv3limit.Config{Policy: policy}))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok\n") })
	log.Fatal(app.Listen(":8080"))
}
