package ginlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestNewPanicsOnInvalidConfig(t *testing.T) {
	defer func() {
		err, _ := recover().(error)
		if err == nil || !strings.HasPrefix(err.Error(), "ginlimit: ") {
			t.Errorf("panic: got %v, want an error starting ginlimit:", err)
		}
	}()
	ginlimit.New(nil, core.PerSecond(1))
}

// keyOf serves one request through a ginlimit middleware keyed by key and
// returns the key it produced.
func keyOf(t *testing.T, r *gin.Engine, key core.KeyFunc, req *http.Request) (string, error) {
	t.Helper()
	_, rdb := redistest.Mini(t)
	var got string
	var gotErr error
	r.Use(ginlimit.New(core.New(rdb, core.WithPrefix(t.Name())), core.PerSecond(10),
		ginlimit.WithKey(func(q core.Request) (string, error) {
			got, gotErr = key(q)
			return got, gotErr
		})))
	r.GET("/", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Errorf("status: got %d, want 204", rec.Code)
	}
	return got, gotErr
}

func TestKeyByGinClientIP(t *testing.T) {
	tests := []struct {
		name, remote, xff, want string
	}{
		{"trusted proxy", "10.0.0.2:1", "203.0.113.7", "ip:203.0.113.7"},
		{"untrusted peer", "192.0.2.1:1", "203.0.113.7", "ip:192.0.2.1"},
		{"ipv6 by /64", "[2001:db8::1]:1", "", "ip:2001:db8::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := gin.New()
			if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = tt.remote
			if tt.xff != "" {
				req.Header.Set("X-Forwarded-For", tt.xff)
			}
			got, err := keyOf(t, r, ginlimit.KeyByGinClientIP(), req)
			if got != tt.want || err != nil {
				t.Errorf("key: got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestKeyByContextValue(t *testing.T) {
	for _, user := range []string{"alice", ""} {
		r := gin.New()
		r.Use(func(c *gin.Context) {
			if user != "" {
				c.Set("user", user)
			}
		})
		got, err := keyOf(t, r, ginlimit.KeyByContextValue("user"), httptest.NewRequest("GET", "/", nil))
		switch {
		case user != "" && (got != "ctx:"+user || err != nil):
			t.Errorf("key: got %q, %v; want %q", got, err, "ctx:"+user)
		case user == "" && err == nil:
			t.Errorf("key without a user: got %q, want an error", got)
		}
	}
}

type foreignRequest struct{}

func (foreignRequest) Context() context.Context { return context.Background() }
func (foreignRequest) RemoteAddr() string       { return "192.0.2.1:1" }
func (foreignRequest) Header(string) string     { return "" }
func (foreignRequest) Method() string           { return "GET" }
func (foreignRequest) Route() string            { return "/" }

func TestKeyFuncsOutsideGin(t *testing.T) {
	for name, key := range map[string]core.KeyFunc{
		"KeyByGinClientIP":  ginlimit.KeyByGinClientIP(),
		"KeyByContextValue": ginlimit.KeyByContextValue("user"),
	} {
		if _, err := key(foreignRequest{}); err == nil {
			t.Errorf("%s on a non-gin request: got no error", name)
		}
	}
}

// TestDenyAborts: later handlers do not run after a denial, with the default
// answer or a custom one.
func TestDenyAborts(t *testing.T) {
	for _, custom := range []bool{false, true} {
		_, rdb := redistest.Mini(t)
		opts := []ginlimit.Option{}
		if custom {
			opts = append(opts, ginlimit.WithDenyHandler(func(c *gin.Context, d core.Decision) {
				c.String(d.Status(), "no")
			}))
		}
		r := gin.New()
		r.Use(ginlimit.New(core.New(rdb, core.WithPrefix(t.Name())), core.PerMinute(1), opts...))
		ran := 0
		r.GET("/", func(c *gin.Context) { ran++ })
		for range 2 {
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		}
		if ran != 1 {
			t.Errorf("custom deny handler %v: handler ran %d times, want 1", custom, ran)
		}
	}
}
