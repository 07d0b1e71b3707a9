// Command echov5 is the Echo v5 example server: GET /, /slow and /spend are
// rate limited through Redis by echov5limit, GET /healthz never is. Its flags,
// env vars and answers are those of the example contract in examples/README.md.
// Try, from the repository's root:
//
//	go run ./examples/echov5 -limit 3 -period 10s
//	curl -i localhost:8080/
package main

import (
	"context"
	"io"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/redlimit/redlimit/echov5limit"
	"github.com/redlimit/redlimit/examples/internal/exampleapp"
)

func main() { exampleapp.Main(run) }

// run serves until ctx ends. Flags, the log, the embedded miniredis, the
// Redis client, the Limiter and the Policy, metrics and the graceful
// shutdown are exampleapp's, the same for every framework; the rest is what
// Echo v5 asks of an app.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "echov5", args, getenv, stdout)
	if err != nil {
		return err
	}
	defer app.Close()

	// One middleware, one limit for every route it is on.
	limit, err := echov5limit.Config{Policy: app.Policy}.ToMiddleware()
	if err != nil {
		return err
	}
	ok := func(c *echo.Context) error { return c.String(http.StatusOK, "ok") }
	slow := func(c *echo.Context) error {
		if err := exampleapp.Slow(c.Request().Context(), c.QueryParam("ms")); err != nil {
			return c.String(http.StatusBadRequest, err.Error())
		}
		return c.String(http.StatusOK, "ok")
	}
	spend := func(c *echo.Context) error {
		units, err := exampleapp.Units(c.QueryParam("units"))
		if err != nil {
			return c.String(http.StatusBadRequest, err.Error())
		}
		app.Policy.ReportCost(c.Request().Context(), units) // settled once this handler returns
		return c.String(http.StatusOK, "ok")
	}

	e := echo.New()
	// Echo routes HEAD apart from GET: both are limited, with one limit.
	e.Match([]string{http.MethodGet, http.MethodHead}, "/", ok, limit)
	e.GET("/slow", slow, limit)
	e.GET("/spend", spend, limit)
	e.GET("/healthz", ok)
	if app.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(app.Metrics))
	}
	return app.ServeHandler(ctx, e)
}
