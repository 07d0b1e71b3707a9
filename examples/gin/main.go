// Command gin is the Gin example server: GET / is rate limited through
// Redis by ginlimit, GET /healthz never is. Flags, env vars and behaviour
// follow ../../../shared/docs/example-contract.md; try
//
//	go run ./examples/gin -limit 3 -period 10s
//	curl -i localhost:8080/
package main

import (
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/examples/internal/exampleapp"
	"github.com/redlimit/redlimit/ginlimit"
)

func main() { exampleapp.Main("gin", run) }

// releaseMode silences Gin's debug output; the mode is process-wide.
var releaseMode sync.Once

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "gin", args, getenv, stdout)
	if err != nil {
		return exampleapp.IgnoreHelp(err)
	}
	defer app.Close()

	releaseMode.Do(func() { gin.SetMode(gin.ReleaseMode) })
	r := gin.New() // no default logger: the log is ours
	r.Use(gin.Recovery())

	limit := ginlimit.New(app.Limiter, app.Limit,
		ginlimit.WithKey(app.Key),
		ginlimit.WithHeaders(app.Headers),
		ginlimit.WithFailPolicy(app.Fail),
		ginlimit.WithMaxWait(app.MaxWait),
		ginlimit.WithObserver(app.Observer),
	)

	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	// Gin, unlike net/http and Fiber, routes HEAD apart from GET.
	r.Match([]string{http.MethodGet, http.MethodHead}, "/", limit, ok)
	r.Match([]string{http.MethodGet, http.MethodHead}, "/healthz", ok)
	if app.Metrics != nil {
		r.GET("/metrics", gin.WrapH(app.Metrics))
	}
	return app.Serve(ctx, app.NewHTTPServer(r))
}
