// Command gin is the Gin example server: GET /, /slow and /spend are rate
// limited through Redis by ginlimit, GET /healthz never is. Its flags, env
// vars and answers are those of the example contract in examples/README.md.
// Try, from the repository's root:
//
//	go run ./examples/gin -limit 3 -period 10s
//	curl -i localhost:8080/
package main

import (
	"context"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/examples/internal/exampleapp"
	"github.com/redlimit/redlimit/ginlimit"
)

func main() { exampleapp.Main(run) }

// run serves until ctx ends. Flags, the log, the embedded miniredis, the
// Redis client, the Limiter and the Policy, metrics and the graceful
// shutdown are exampleapp's, the same for every framework; the rest is what
// Gin asks of an app.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "gin", args, getenv, stdout)
	if err != nil {
		return err
	}
	defer app.Close()

	gin.SetMode(gin.ReleaseMode)
	r := gin.New() // without Gin's logger: the log is ours
	r.Use(gin.Recovery())
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	slow := func(c *gin.Context) {
		if err := exampleapp.Slow(c.Request.Context(), c.Query("ms")); err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		c.String(http.StatusOK, "ok")
	}
	spend := func(c *gin.Context) {
		units, err := exampleapp.Units(c.Query("units"))
		if err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		app.Policy.ReportCost(c.Request.Context(), units) // settled once this handler returns
		c.String(http.StatusOK, "ok")
	}

	limit := ginlimit.New(app.Policy) // one middleware, one limit for every route it is on
	// Gin routes HEAD apart from GET: both are limited, with one limit.
	r.Match([]string{http.MethodGet, http.MethodHead}, "/", limit, ok)
	r.GET("/slow", limit, slow)
	r.GET("/spend", limit, spend)
	r.GET("/healthz", ok)
	if app.Metrics != nil {
		r.GET("/metrics", gin.WrapH(app.Metrics))
	}
	return app.ServeHandler(ctx, r)
}
