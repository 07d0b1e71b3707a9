package reliability

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttplimit"
)

// TestEvictingRedisIsReported replays the eviction report: a Redis with
// maxmemory 4mb and volatile-lru, a limit of 5 per minute, then cache
// writes that make Redis evict. The Limiter warns at start, before any
// decision, Ping reports the risk, and the evictions are logged when the
// Limiter next looks.
func TestEvictingRedisIsReported(t *testing.T) {
	s := redistest.StartServer(t, "--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru")
	rdb := s.Client(t, nil)
	logs := &logRecorder{}
	lim := newLimiter(t, rdb, core.WithLogger(slog.New(logs)))

	// New started a check in the background; it ends within its 5 s.
	deadline := time.Now().Add(5 * time.Second)
	for lim.Health().Checked.IsZero() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if h := lim.Health(); !h.MayEvict || h.MaxMemory != 4<<20 || h.MaxMemoryPolicy != "volatile-lru" {
		t.Fatalf("Health after New: %+v, want MayEvict with 4 MiB and volatile-lru", h)
	}
	if got := count(logs.records(), "WARN redlimit: redis may evict"); got != 1 {
		t.Errorf("warnings after New: %d, want 1; logs: %q", got, logs.records())
	}

	ctx := context.Background()
	limit := core.PerMinute(5)
	for i := range 7 {
		res, err := lim.Allow(ctx, 1, limit.For("client"))
		if err != nil || res.Allowed != (i < 5) {
			t.Fatalf("request %d: %+v, %v", i+1, res, err)
		}
	}
	h, err := lim.Ping(ctx)
	if err != nil || !h.MayEvict || h.EvictedKeys != 0 {
		t.Fatalf("Ping before the cache writes: %+v, %v; want MayEvict and nothing evicted yet", h, err)
	}

	// The cache's writes: 400 keys of 20 KB with a TTL, 8 MB into 4 MB.
	value := strings.Repeat("x", 20<<10)
	for i := range 400 {
		if err := rdb.Set(ctx, "cache:"+strconv.Itoa(i), value, time.Hour).Err(); err != nil {
			t.Fatalf("cache write %d: %v", i, err)
		}
	}
	h, err = lim.Ping(ctx)
	if err != nil || h.EvictedKeys == 0 {
		t.Fatalf("Ping after the cache writes: %+v, %v; want evicted keys", h, err)
	}
	t.Logf("Redis evicted %d keys; logs: %q", h.EvictedKeys, logs.records())
	if got := count(logs.records(), "WARN redlimit: redis evicted keys"); got != 1 {
		t.Errorf("eviction warnings: %d, want 1", got)
	}
	if got := count(logs.records(), "WARN redlimit: redis may evict"); got != 1 {
		t.Errorf("risk warnings after Ping: %d, want still 1 (once per change)", got)
	}
}

// TestNoevictionOverMemoryFollowsFailPolicy: under noeviction, a Redis over
// its maxmemory refuses the scripts' writes (OOM). That is a Redis fault:
// fail closed answers 503, fail open serves without headers, the breaker
// counts it and the outage is logged.
//
// Redis must stay over its maxmemory by far more than memory moves by
// itself. Filling a Redis up to its first OOM does not: used_memory then
// sits within one write of maxmemory, and falls below it a moment later
// when Redis frees the refused write's argument and shrinks the idle
// clients' buffers (clientsCron, tens of KB), so a script's small write
// passed again, at random (a 200 with headers where fail closed wants 503).
// So the data goes in first, 2 MiB of it, and maxmemory is set to 1 MiB
// afterwards: the values alone keep used_memory a whole MiB over.
func TestNoevictionOverMemoryFollowsFailPolicy(t *testing.T) {
	const data, maxmemory = 2 << 20, 1 << 20
	s := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	rdb := s.Client(t, nil)
	ctx := context.Background()
	value := strings.Repeat("x", 64<<10)
	for i := range data / len(value) {
		if err := rdb.Set(ctx, "data:"+strconv.Itoa(i), value, 0).Err(); err != nil {
			t.Fatalf("filling Redis: write %d: %v", i, err)
		}
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.Itoa(maxmemory)).Err(); err != nil {
		t.Fatalf("CONFIG SET maxmemory: %v", err)
	}
	// The smallest write is refused, or the subtests would test nothing.
	if err := rdb.Set(ctx, "probe", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a 1-byte SET over maxmemory: %v, want an OOM error", err)
	}

	logs := &logRecorder{}
	lim := newLimiter(t, rdb, core.WithLogger(slog.New(logs)))
	h, err := lim.Ping(ctx)
	if err != nil || h.MayEvict || h.MaxMemoryPolicy != "noeviction" || h.MaxMemory != maxmemory {
		t.Fatalf("Ping: %+v, %v; want noeviction with %d bytes, no risk", h, err, maxmemory)
	}
	for _, fail := range []string{"closed", "open"} {
		t.Run(fail, func(t *testing.T) {
			policy, err := httplimit.New(httplimit.Config{Limiter: lim, Limit: core.PerMinute(5), FailClosed: fail == "closed", Name: fail})
			if err != nil {
				t.Fatal(err)
			}
			h := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			want := map[string]int{"closed": 503, "open": 200}[fail]
			for i := range 3 {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				if rec.Code != want || rec.Header().Get("X-RateLimit-Limit") != "" {
					t.Errorf("request %d: %d with X-RateLimit-Limit %q, want %d without", i+1, rec.Code, rec.Header().Get("X-RateLimit-Limit"), want)
				}
			}
		})
	}
	// The failures reached the breaker, which logged the outage once.
	if got := count(logs.records(), "WARN redlimit: redis call failed"); got != 1 {
		t.Errorf("failure records: %d, want 1; logs: %q", got, logs.records())
	}
}

func count(recs []string, prefix string) int {
	return len(slices.DeleteFunc(slices.Clone(recs), func(r string) bool { return !strings.HasPrefix(r, prefix) }))
}
