package ginlimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestCallPath serves requests whose path through the project
// bench/callpath.sh measures (issue 26): it runs this test per case under
// go test -cover, once with CALLPATH_REQUESTS=0 and once with, say, 100,
// and the coverage counters that grew by about that many between the two
// runs are the code each steady-state request runs through. Both runs
// serve the same warm-up requests first, so the one-time work (loading
// the scripts, the first key) is left out, up to the start-up work that
// races them (the Limiter's first load), which the many measured requests
// drown.
//
// The counters cannot be cleared and written from inside the test
// (runtime/coverage.ClearCounters, WriteMetaDir): in a test binary the
// runtime prepares the coverage meta-data only as the process exits, and
// until then they fail ("no meta-data available", "-covermode=<invalid>").
//
// It writes the Redis round trips of the measured requests to
// CALLPATH_DIR/<case>.trips.
func TestCallPath(t *testing.T) {
	dir := os.Getenv("CALLPATH_DIR")
	if dir == "" {
		t.Skip("CALLPATH_DIR not set; run bash bench/callpath.sh")
	}
	measured, err := strconv.Atoi(os.Getenv("CALLPATH_REQUESTS"))
	if err != nil || measured < 0 {
		t.Fatalf("CALLPATH_REQUESTS=%q, want the number of requests to measure", os.Getenv("CALLPATH_REQUESTS"))
	}
	for _, tc := range []struct {
		name    string
		cfg     httplimit.Config
		handler func(p *httplimit.Policy) gin.HandlerFunc
	}{
		{"plain", httplimit.Config{}, func(*httplimit.Policy) gin.HandlerFunc {
			return func(c *gin.Context) { c.Status(http.StatusNoContent) }
		}},
		{"settle", httplimit.Config{Settle: true}, func(p *httplimit.Policy) gin.HandlerFunc {
			return func(c *gin.Context) {
				// More than the default cost of 1, so Finish has a
				// difference to settle.
				if !p.ReportCost(c.Request.Context(), 3) {
					t.Error("ReportCost = false under Config.Settle")
				}
				c.Status(http.StatusNoContent)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			var trips atomic.Int64
			rdb.AddHook(tripCounter{&trips})
			l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			tc.cfg.Limiter = l
			tc.cfg.Limit = core.PerMinute(1 << 20)
			p, err := httplimit.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			engine := gin.New()
			engine.GET("/", New(p), tc.handler(p))
			serve := func() {
				t.Helper()
				w := httptest.NewRecorder()
				engine.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				if w.Code != http.StatusNoContent {
					t.Fatalf("status %d, want 204", w.Code)
				}
			}
			for range 3 {
				serve()
			}
			before := trips.Load()
			for range measured {
				serve()
			}
			n := trips.Load() - before
			out := filepath.Join(dir, tc.name+".trips")
			if err := os.WriteFile(out, []byte(strconv.FormatInt(n, 10)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d Redis round trips for %d requests", tc.name, n, measured)
		})
	}
}

// tripCounter counts the round trips to Redis: a command, or a pipeline
// sent as one.
type tripCounter struct{ n *atomic.Int64 }

func (tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}
