// Command nethttp is the net/http example server: GET /, /slow and /spend are
// rate limited through Redis by nethttplimit, GET /healthz never is. Its
// flags, env vars and answers are those of the example contract in
// examples/README.md. Try, from the repository's root:
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

func main() { exampleapp.Main(run) }

// run serves until ctx ends. Flags, the log, the embedded miniredis, the
// Redis client, the Limiter and the Policy, metrics and the graceful
// shutdown are exampleapp's, the same for every framework; the rest is what
// net/http asks of an app.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	app, err := exampleapp.Setup(ctx, "nethttp", args, getenv, stdout)
	if err != nil {
		return err
	}
	defer app.Close()

	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	slow := func(w http.ResponseWriter, r *http.Request) {
		if err := exampleapp.Slow(r.Context(), r.URL.Query().Get("ms")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
	spend := func(w http.ResponseWriter, r *http.Request) {
		units, err := exampleapp.Units(r.URL.Query().Get("units"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		app.Policy.ReportCost(r.Context(), units) // settled once this handler returns
		_, _ = io.WriteString(w, "ok")
	}

	mux := http.NewServeMux()
	limit := nethttplimit.New(app.Policy) // one middleware, one limit for every route it is on
	// A GET pattern matches HEAD too: both are limited, with one limit.
	mux.Handle("GET /{$}", limit(ok))
	mux.Handle("GET /slow", limit(http.HandlerFunc(slow)))
	mux.Handle("GET /spend", limit(http.HandlerFunc(spend)))
	mux.Handle("GET /healthz", ok)
	if app.Metrics != nil {
		mux.Handle("GET /metrics", app.Metrics)
	}
	return app.ServeHandler(ctx, mux)
}
