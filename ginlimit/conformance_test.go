package ginlimit_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/conformance"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{New: newApp, ItemsPattern: "/items/:id"})
}

// releaseMode silences Gin's debug output once; the mode is process-wide.
var releaseMode sync.Once

func req(c *gin.Context) conformance.Req {
	return conformance.Req{Path: c.Request.URL.Path, Header: c.GetHeader}
}

// newApp mounts the middleware on each route, where Gin knows the route
// pattern (c.FullPath()).
func newApp(t *testing.T, cfgs []conformance.Config) conformance.RoundTrip {
	releaseMode.Do(func() { gin.SetMode(gin.ReleaseMode) })
	var mws []gin.HandlerFunc
	var first, check *httplimit.Policy
	for i, cfg := range cfgs {
		p, c := conformance.Policies(t, cfg, func(r httplimit.Request) conformance.Req {
			return req(ginlimit.Context(r))
		}, false)
		if i == 0 {
			first, check = p, c
		}
		var opts []ginlimit.Option
		if f := cfg.Skip; f != nil {
			opts = append(opts, ginlimit.WithSkip(func(c *gin.Context) bool { return f(req(c)) }))
		}
		if f := cfg.Deny; f != nil {
			opts = append(opts, ginlimit.WithDenyHandler(func(c *gin.Context, d httplimit.Decision) {
				status, body := f(req(c), d)
				c.Data(status, "text/plain; charset=utf-8", []byte(body))
			}))
		}
		mws = append(mws, ginlimit.New(p, opts...))
	}
	limited := func(h gin.HandlerFunc) []gin.HandlerFunc { return append(append([]gin.HandlerFunc(nil), mws...), h) }
	r := gin.New()
	// Gin's own recovery, answering as the suite asks; registered before
	// the routes, so that it wraps them.
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.String(http.StatusInternalServerError, "panicked") }))
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	// Gin routes HEAD apart from GET: one handler for both.
	r.Match([]string{http.MethodGet, http.MethodHead}, "/", limited(ok)...)
	for _, path := range []string{"/search", "/healthz", "/items/:id"} {
		r.GET(path, limited(ok)...)
	}
	r.Any("/any", limited(ok)...)
	r.GET("/login", limited(func(c *gin.Context) { c.String(http.StatusUnauthorized, "bad password") })...)
	r.GET("/spend", limited(func(c *gin.Context) {
		n, _ := strconv.Atoi(c.GetHeader("X-Used"))
		if !first.ReportCost(c.Request.Context(), n) {
			c.String(http.StatusOK, "unsettled")
			return
		}
		c.String(http.StatusOK, "ok")
	})...)
	r.GET("/panic", limited(func(*gin.Context) { panic("conformance: /panic") })...)
	r.GET("/inside", limited(func(c *gin.Context) { c.String(http.StatusOK, cfgs[0].Inside()) })...)
	r.GET("/upload", func(c *gin.Context) {
		n, _ := strconv.Atoi(c.GetHeader("X-Cost"))
		if ginlimit.Check(c, check, n) {
			c.String(http.StatusOK, "stored")
		}
	})
	r.GET("/reset", func(c *gin.Context) {
		if err := ginlimit.Reset(c, first); err != nil {
			t.Errorf("Reset: %v", err)
		}
		c.Status(http.StatusNoContent)
	})
	return func(req *http.Request) *http.Response {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		resp := rec.Result()
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp
	}
}

// TestMain says which real-Redis tests were skipped, without -v.
func TestMain(m *testing.M) { redistest.Main(m) }
