// Command nethttp is the net/http example server: GET / is rate limited
// through Redis by nethttplimit, GET /healthz never is. Flags, env vars and
// behaviour follow ../../../shared/docs/example-contract.md; try
//
//	go run ./examples/nethttp -limit 3 -period 10s
//	curl -i localhost:8080/
package main

import (
	"context"
	"io"
	"net/http"

	"github.com/redlimit/redlimit/examples/internal/exampleapp"
	"github.com/redlimit/redlimit/nethttplimit"
)

func main() { exampleapp.Main("nethttp", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "nethttp", args, getenv, stdout)
	if err != nil {
		return exampleapp.IgnoreHelp(err)
	}
	defer app.Close()

	limit := nethttplimit.New(app.Limiter, app.Limit,
		nethttplimit.WithKey(app.Key),
		nethttplimit.WithHeaders(app.Headers),
		nethttplimit.WithFailPolicy(app.Fail),
		nethttplimit.WithMaxWait(app.MaxWait),
		nethttplimit.WithObserver(app.Observer),
	)

	mux := http.NewServeMux()
	mux.Handle("GET /{$}", limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	if app.Metrics != nil {
		mux.Handle("GET /metrics", app.Metrics)
	}
	return app.Serve(ctx, app.NewHTTPServer(mux))
}
