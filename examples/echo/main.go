// Command echo is the Echo (v4) example server: GET /, /slow and /spend are
// rate limited through Redis by echolimit, GET /healthz never is. Its flags,
// env vars and answers are those of the example contract in examples/README.md.
// Try, from the repository's root:
//
//	go run ./examples/echo -limit 3 -period 10s
//	curl -i localhost:8080/
package main

import (
	"context"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/examples/internal/exampleapp"
)

func main() { exampleapp.Main(run) }

// run serves until ctx ends. Flags, the log, the embedded miniredis, the
// Redis client, the Limiter and the Policy, metrics and the graceful
// shutdown are exampleapp's, the same for every framework; the rest is what
// Echo asks of an app.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "echo", args, getenv, stdout)
	if err != nil {
		return err
	}
	defer app.Close()

	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	slow := func(c echo.Context) error {
		if err := exampleapp.Slow(c.Request().Context(), c.QueryParam("ms")); err != nil {
			return c.String(http.StatusBadRequest, err.Error())
		}
		return c.String(http.StatusOK, "ok")
	}
	spend := func(c echo.Context) error {
		units, err := exampleapp.Units(c.QueryParam("units"))
		if err != nil {
			return c.String(http.StatusBadRequest, err.Error())
		}
		app.Policy.ReportCost(c.Request().Context(), units) // settled once this handler returns
		return c.String(http.StatusOK, "ok")
	}

	e := echo.New()
	limit := echolimit.New(app.Policy) // one middleware, one limit for every route it is on
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
