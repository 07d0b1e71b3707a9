package nethttplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/conformance"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttplimit"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{New: newApp, ItemsPattern: "/items/{id}", RoutePrefix: "GET "})
}

func req(r *http.Request) conformance.Req {
	return conformance.Req{Path: r.URL.Path, Header: r.Header.Get}
}

// newApp wraps each route's handler, so that the middleware sees the
// ServeMux pattern.
func newApp(t *testing.T, cfgs []conformance.Config) conformance.RoundTrip {
	var mws []func(http.Handler) http.Handler
	var first, check *httplimit.Policy
	for i, cfg := range cfgs {
		p, c := conformance.Policies(t, cfg, func(r httplimit.Request) conformance.Req {
			return req(nethttplimit.HTTPRequest(r))
		}, false)
		if i == 0 {
			first, check = p, c
		}
		var opts []nethttplimit.Option
		if f := cfg.Skip; f != nil {
			opts = append(opts, nethttplimit.WithSkip(func(r *http.Request) bool { return f(req(r)) }))
		}
		if f := cfg.Deny; f != nil {
			opts = append(opts, nethttplimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d httplimit.Decision) {
				status, body := f(req(r), d)
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
			}))
		}
		mws = append(mws, nethttplimit.New(p, opts...))
	}
	limited := func(h http.HandlerFunc) http.Handler {
		var out http.Handler = h
		for i := len(mws) - 1; i >= 0; i-- {
			out = mws[i](out)
		}
		return out
	}
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }
	mux := http.NewServeMux()
	for _, pattern := range []string{"GET /", "GET /search", "GET /healthz", "GET /items/{id}"} {
		mux.Handle(pattern, limited(ok))
	}
	mux.Handle("GET /login", limited(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "bad password")
	}))
	mux.Handle("GET /spend", limited(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.Header.Get("X-Used"))
		if !first.ReportCost(r.Context(), n) {
			_, _ = io.WriteString(w, "unsettled")
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	mux.Handle("GET /panic", limited(func(http.ResponseWriter, *http.Request) { panic("conformance: /panic") }))
	mux.Handle("GET /inside", limited(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, cfgs[0].Inside())
	}))
	mux.HandleFunc("GET /upload", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
		if !nethttplimit.Check(w, r, check, n) {
			return
		}
		_, _ = io.WriteString(w, "stored")
	})
	mux.HandleFunc("GET /reset", func(w http.ResponseWriter, r *http.Request) {
		if err := nethttplimit.Reset(r, first); err != nil {
			t.Errorf("Reset: %v", err)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	// A pattern without a method, for every method: on a mux of its own,
	// since on one mux "/any" and "GET /" conflict.
	outer := http.NewServeMux()
	outer.Handle("/any", limited(ok))
	outer.Handle("/", mux)
	// A recover outside the middleware, as a recovery middleware wraps an
	// app (net/http's server would only log the panic and drop the
	// connection).
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, "panicked")
			}
		}()
		outer.ServeHTTP(w, r)
	})
	return func(r *http.Request) *http.Response {
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, r)
		return rec.Result()
	}
}

// TestMain says which real-Redis tests were skipped, without -v.
func TestMain(m *testing.M) { redistest.Main(m) }
