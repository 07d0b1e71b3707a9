// Command echo is the Echo example server: GET / is rate limited through
// Redis by echolimit, GET /healthz never is. Flags, env vars and behaviour
// follow ../../../shared/docs/example-contract.md; try
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

func main() { exampleapp.Main("echo", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "echo", args, getenv, stdout)
	if err != nil {
		return exampleapp.IgnoreHelp(err)
	}
	defer app.Close()

	e := echo.New()
	e.HideBanner, e.HidePort = true, true

	limit := echolimit.WithConfig(echolimit.Config{
		Limiter:  app.Limiter,
		Limit:    app.Limit,
		Key:      app.Key,
		Headers:  app.Headers,
		Fail:     app.Fail,
		MaxWait:  app.MaxWait,
		Observer: app.Observer,
	})

	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	// Echo, unlike net/http and Fiber, routes HEAD apart from GET.
	e.Match([]string{http.MethodGet, http.MethodHead}, "/", ok, limit)
	e.Match([]string{http.MethodGet, http.MethodHead}, "/healthz", ok)
	if app.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(app.Metrics))
	}
	return app.Serve(ctx, app.NewHTTPServer(e))
}
