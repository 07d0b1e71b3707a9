package security

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttplimit"
)

func TestMain(m *testing.M) { redistest.MainLong(m) }

// pinger measures another client's view of Redis: the slowest PING while
// it runs, one every millisecond.
type pinger struct {
	stop  chan struct{}
	done  chan struct{}
	worst atomic.Int64 // ns
}

func startPinger(t *testing.T, s *redistest.Server) *pinger {
	t.Helper()
	c := s.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = false; o.ReadTimeout = 30 * time.Second })
	p := &pinger{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			start := time.Now()
			_ = c.Ping(context.Background()).Err()
			if d := int64(time.Since(start)); d > p.worst.Load() {
				p.worst.Store(d)
			}
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *pinger) halt() time.Duration {
	close(p.stop)
	<-p.done
	return time.Duration(p.worst.Load())
}

func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

func newLimiter(t *testing.T, rdb redis.UniversalClient, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.New(rdb, append([]core.Option{core.WithLogger(nil), core.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestHugeCostDoesNotBlockRedis: one Allow of cost 1e6 on a SlidingWindow of
// 1e6 per second used to add a million sorted-set members (126 MB) and
// block Redis for 1.9 s. It is now one weighted entry: well under 1 KB,
// and another client's PING never waits more than a few milliseconds.
// Denials of maximal cost on a log of many small requests are O(log N)
// each too, where each used to skip the whole log.
func TestHugeCostDoesNotBlockRedis(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Admin(t)
	lim := newLimiter(t, s.Client(t, nil))
	ctx := context.Background()
	limit := core.Limit{Algorithm: core.SlidingWindow, Rate: 1_000_000, Period: time.Second}

	// Load the scripts and open the connections first: the script cache
	// and client buffers are Redis memory too, paid once.
	if _, err := lim.Allow(ctx, 1, limit.For("warm-up")); err != nil {
		t.Fatal(err)
	}
	// used_memory moves with client buffers too (the pinger's): it is
	// logged, and the keys' own MEMORY USAGE is what is held to 1 KB.
	before := usedMemory(t, admin)
	p := startPinger(t, s)
	res, err := lim.Allow(ctx, 1_000_000, limit.For("uploader"))
	worst := p.halt()
	if err != nil || !res.Allowed {
		t.Fatalf("Allow(1e6) = %+v, %v; want admitted", res, err)
	}
	grew := usedMemory(t, admin) - before
	var keyBytes int64
	for _, k := range []string{"ratelimit:{uploader}:sw3", "ratelimit:{uploader}:sw3m"} {
		n, err := admin.MemoryUsage(ctx, k).Result()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", k, err)
		}
		keyBytes += n
	}
	t.Logf("Allow(1e6): Redis memory +%d B (its keys: %d B), slowest PING meanwhile %v", grew, keyBytes, worst)
	if keyBytes > 1024 {
		t.Errorf("one Allow of cost 1e6 stored %d B of keys, want under 1 KB", keyBytes)
	}
	if worst > 20*time.Millisecond {
		t.Errorf("another client's PING waited %v during Allow(1e6), want a few ms", worst)
	}

	// A log of 100000 small requests, then denials of maximal cost: each
	// finds its wait with one lookup, not by walking the log.
	crowd := core.Limit{Algorithm: core.SlidingWindow, Rate: 1_000_000, Period: time.Hour}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100_000 / 8 {
				if _, err := lim.Allow(ctx, 1, crowd.For("crowd")); err != nil {
					t.Errorf("Allow %d/%d: %v", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The log groups requests beyond 1024 per window: it holds at most
	// 1025 entries, whatever the crowd sent, and counts every unit.
	if n, _ := admin.ZCard(ctx, "ratelimit:{crowd}:sw3").Result(); n > 1025 {
		t.Fatalf("the crowd's log holds %d entries, want at most 1025", n)
	}
	if p, err := lim.Peek(ctx, crowd.For("crowd")); err != nil || p.Remaining != 1_000_000-100_000 {
		t.Fatalf("Peek after 100000 requests: %+v, %v; want 900000 remaining", p, err)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p = startPinger(t, s)
	start := time.Now()
	const denials = 200
	for i := range denials {
		// Costs vary by one, as an attacker's would, to miss the deny cache.
		res, err := lim.Allow(ctx, 999_000+i, crowd.For("crowd"))
		if err != nil || res.Allowed || res.RetryAfter <= 0 {
			t.Fatalf("denial %d: %+v, %v; want denied with a RetryAfter", i, res, err)
		}
	}
	took := time.Since(start)
	worst = p.halt()
	perCall := commandUsec(t, admin, "fcall", "evalsha") // FCALL on Redis 7, else EVALSHA
	t.Logf("%d denials of ~1e6 on a log of 1e5 entries: %v in all, %.1f µs of Redis each, slowest PING %v", denials, took, perCall, worst)
	if perCall > 500 {
		t.Errorf("a maximal denial costs Redis %.0f µs, want O(log N): well under a millisecond", perCall)
	}
}

// commandUsec is INFO commandstats' usec_per_call of the first of cmds
// that Redis ran.
func commandUsec(t *testing.T, c *redis.Client, cmds ...string) float64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range cmds {
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":"); ok {
				for _, f := range strings.Split(strings.TrimSpace(rest), ",") {
					if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
						x, _ := strconv.ParseFloat(v, 64)
						return x
					}
				}
			}
		}
	}
	t.Fatalf("none of %v in INFO commandstats", cmds)
	return 0
}

// TestUploadBytesEndToEnd is the attack the issue found, end to end: a
// net/http server limits upload bytes per IP with a SlidingWindow of 1e6
// per minute, costed by Content-Length, failing closed; an attacker sends
// one small request declaring a huge length. Sixteen other clients of the
// same Redis used to get 503 for 2.3 s; now none does.
func TestUploadBytesEndToEnd(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t, nil)
	lim := newLimiter(t, rdb, core.WithTimeout(100*time.Millisecond))
	policy, err := httplimit.New(httplimit.Config{
		Limiter: lim, Name: "upload-bytes", FailClosed: true,
		Limit: core.Limit{Algorithm: core.SlidingWindow, Rate: 1_000_000, Period: time.Minute},
		Cost: func(r httplimit.Request) int {
			return int(max(1, nethttplimit.HTTPRequest(r).ContentLength))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := nethttplimit.New(policy)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))

	var wg sync.WaitGroup
	var served, unavailable atomic.Int64
	stop := make(chan struct{})
	for c := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := httptest.NewRequest("POST", "/upload", strings.NewReader("x"))
				r.RemoteAddr = fmt.Sprintf("198.51.100.%d:1", c)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				served.Add(1)
				if rec.Code == http.StatusServiceUnavailable {
					unavailable.Add(1)
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	attack := httptest.NewRequest("POST", "/upload", strings.NewReader(""))
	attack.ContentLength = 1_000_000 // declared, never sent
	attack.RemoteAddr = "203.0.113.66:1"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, attack)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("attack answered %d; %d requests of 16 other clients, %d got 503", rec.Code, served.Load(), unavailable.Load())
	if rec.Code != http.StatusOK {
		t.Errorf("the attacker's request (its full quota): %d, want 200", rec.Code)
	}
	if n := unavailable.Load(); n != 0 {
		t.Errorf("%d requests of other clients got 503 around the attack, want none", n)
	}
}
