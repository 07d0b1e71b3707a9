package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// outsideHostileSizes: the most descriptors and entries a request may
// carry are decided, one more is INVALID_ARGUMENT; a value of a megabyte
// is decided, and reaches Redis as a short key.
func outsideHostileSizes(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	dir := t.TempDir()
	configFile(t, dir, "h.yaml", "domain: h\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	s := serveProcess(t, bin, "redis://"+rs.Addr()+"/0", dir)
	deep := strings.Repeat("e=1,", 31) + "e=1"
	for _, tt := range []struct {
		descs, entries int
		ok             bool
	}{{64, 32, true}, {65, 1, false}, {1, 33, false}, {64, 1, true}} {
		req := &rlsv3.RateLimitRequest{Domain: "h"}
		for i := range tt.descs {
			spec := fmt.Sprintf("k=%d", i)
			if tt.entries > 1 {
				spec = strings.Join(strings.Split(deep, ",")[:tt.entries-1], ",") + "," + spec
			}
			req.Descriptors = append(req.Descriptors, request("h", spec).Descriptors[0])
		}
		_, err := s.try(req)
		if tt.ok && err != nil || !tt.ok && status.Code(err) != codes.InvalidArgument {
			t.Errorf("%d descriptors of %d entries: %v", tt.descs, tt.entries, err)
		}
	}
	huge := strings.Repeat("v", 1<<20)
	for i, want := range []string{"OK; OK 1/2", "OK; OK 0/2", "OVER_LIMIT; OVER_LIMIT 0/2"} {
		if got := says(s.ask(t, request("h", "k="+huge))); got != want {
			t.Errorf("a 1 MB value, request %d: %s; want %s", i, got, want)
		}
	}
	keys := limitKeys(t, rs.Admin(t))
	for _, k := range keys {
		if len(k) > 256 {
			t.Errorf("a Redis key of %d bytes", len(k))
		}
	}
	if len(keys) != 65 { // the 64 of the first request, the huge one's
		t.Errorf("%d keys in Redis; want 65", len(keys))
	}
}

// outsideDistinctValues: many distinct values each get a key with a TTL
// (none lives forever), the service's memory does not grow with them, and
// detailed_metric's series stop at their bound.
func outsideDistinctValues(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	dir := t.TempDir()
	configFile(t, dir, "m.yaml", `domain: m
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: year, requests_per_unit: 5}
`)
	s := serveProcess(t, bin, "redis://"+rs.Addr()+"/0", dir)
	n := 20000
	if redistest.Long() {
		n = 60000
	}
	send := func(from, to int) {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(to); i = next.Add(1) - 1 {
					if resp, err := s.try(request("m", fmt.Sprintf("user=%d", i))); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
						t.Errorf("user %d: %v %v", i, says(resp), err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	send(0, n/2)
	before := rss(t, s.cmd.Process.Pid)
	send(n/2, n)
	after := rss(t, s.cmd.Process.Pid)
	if after > before+32<<20 {
		t.Errorf("the service grew from %d MB to %d MB over %d more distinct values", before>>20, after>>20, n/2)
	}
	adm := rs.Admin(t)
	ctx := context.Background()
	keys := limitKeys(t, adm)
	if len(keys) != n {
		t.Errorf("%d keys in Redis for %d distinct values", len(keys), n)
	}
	for _, k := range keys {
		if ttl := adm.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 366*24*time.Hour {
			t.Fatalf("%s has TTL %v", k, ttl)
		}
	}
	series := strings.Count(get(t, "http://"+s.http+"/metrics"), "ratelimit_service_rate_limit_total_hits{")
	if series > 10001 {
		t.Errorf("%d total_hits series; want at most 10000 and the configured one", series)
	}
}

// rss is a process's resident memory, from /proc.
func rss(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// outsideRedisPaused: while Redis answers nothing, the Limiter's local
// fallback decides by default, within its bound (at most the limit, for
// fewer instances than the limit) and counting nothing in Redis; with
// -envoy-failure-mode a request is UNAVAILABLE, for Envoy to decide, and
// counted as a Redis error. A request whose caller gives up while its
// first call waits on Redis leaves none of its units taken once Redis
// answers again.
func outsideRedisPaused(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	dir := t.TempDir()
	configFile(t, dir, "p.yaml", "domain: p\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 10}\n"+
		"  - key: b\n    rate_limit: {unit: day, requests_per_unit: 10}\n")
	url := "redis://" + rs.Addr() + "/0"
	local := serveProcess(t, bin, url, dir, "-timeout", "300ms")
	envoy := serveProcess(t, bin, url, dir, "-timeout", "300ms", "-envoy-failure-mode")
	patient := serveProcess(t, bin, url, dir, "-timeout", "20s")
	for _, s := range []*served{local, envoy, patient} {
		if got := says(s.ask(t, request("p", "a=warm"))); !strings.HasPrefix(got, "OK; OK ") {
			t.Fatalf("with Redis up: %s", got)
		}
	}
	// One connection, made before the pause: a new one's HELLO would wait.
	admin := rs.Client(t, func(o *redis.Options) { o.PoolSize, o.ReadTimeout, o.ContextTimeoutEnabled = 1, 10*time.Second, false })
	ctx := context.Background()
	must(t, admin.Ping(ctx).Err())
	pause := func() { must(t, admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err()) }
	unpause := func() { must(t, admin.Do(ctx, "CLIENT", "UNPAUSE").Err()) }
	pause()
	admitted := 0
	for range 12 {
		if resp := local.ask(t, request("p", "a=fallback")); resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted < 1 || admitted > 10 { // docs/limits.md: max(Rate, n) per Period, n = 3 here
		t.Errorf("Redis paused, by default: %d of 12 admitted; want the local fallback's, 1 to 10", admitted)
	}
	// Each is counted as the fallback's on /metrics (docs/operations.md,
	// "Decisions made without Redis"), which alerts read.
	if got := local.metricSum(t, "redlimit_degraded_decisions_total{", `reason="fallback"`); got < 12 {
		t.Errorf("Redis paused: /metrics counts %v decisions of the fallback, want the 12", got)
	}
	if _, err := envoy.try(request("p", "a=1")); status.Code(err) != codes.Unavailable {
		t.Errorf("Redis paused, -envoy-failure-mode: %v; want UNAVAILABLE", err)
	}
	cancelInRedis(t, patient, admin)
	unpause()
	const redisError = `ratelimit_service_should_rate_limit_error{err_type="redis_error"}`
	if got := envoy.metric(t, redisError); got != 1 {
		t.Errorf("-envoy-failure-mode: should_rate_limit_error{redis_error} = %v; want 1", got)
	}
	if got := local.metric(t, redisError); got != 0 {
		t.Errorf("by default: should_rate_limit_error{redis_error} = %v; want 0, the fallback decided", got)
	}
	// The cancellation may reach the service after Redis has answered the
	// first call (then the request is decided, as if Envoy had waited) or
	// before (then the first call's units are given back): all or nothing.
	waitFor(t, "the canceled request counted in all its descriptors or none", func() bool {
		got := says(patient.ask(t, request("p", "a=both+0", "b=both+0")))
		return got == "OK; OK 10/10; OK 10/10" || got == "OK; OK 8/10; OK 9/10"
	})
	// The calls given up had their connections closed, Redis never ran
	// them; and the fallback counts in process only.
	for _, key := range []string{"a=1+0", "a=fallback+0"} {
		if got := says(patient.ask(t, request("p", key))); got != "OK; OK 10/10" {
			t.Errorf("%s, asked while Redis was paused: %s; want it counted nowhere in Redis", key, got)
		}
	}
}

// cancelInRedis cancels a request at the worst instant: while the first
// of its two calls (hits 2, then hits 1) waits on a paused Redis.
func cancelInRedis(t *testing.T, s *served, admin *redis.Client) {
	ctx := context.Background()
	blocked := func() bool { return strings.Contains(admin.Do(ctx, "CLIENT", "LIST").String(), "flags=b") }
	waitFor(t, "the calls given up gone from Redis", func() bool { return !blocked() })
	req := request("p", "a=both+2", "b=both+1")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		resp, err := s.client.ShouldRateLimit(cctx, req)
		if err == nil {
			err = fmt.Errorf("answered %s", says(resp))
		}
		done <- err
	}()
	waitFor(t, "the call blocked in Redis", blocked)
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("canceled call: %v", err)
	}
}

// outsideRedisRestarted: Redis killed under load and started again (empty):
// every request is answered (the local fallback decides while Redis is
// down), and once Redis decides again a fresh key admits exactly its limit.
func outsideRedisRestarted(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	dir := t.TempDir()
	configFile(t, dir, "k.yaml", "domain: k\ndescriptors:\n  - key: c\n    rate_limit: {unit: day, requests_per_unit: 1000000}\n"+
		"  - key: f\n    rate_limit: {unit: day, requests_per_unit: 3}\n")
	s := serveProcess(t, bin, "redis://"+rs.Addr()+"/0", dir, "-timeout", "300ms")
	var stop atomic.Bool
	var wg sync.WaitGroup
	var answered atomic.Int64
	for c := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if _, err := s.try(request("k", fmt.Sprintf("c=%d", c))); err != nil {
					t.Errorf("an error, not an answer: %v", err)
					return
				}
				answered.Add(1)
			}
		})
	}
	waitFor(t, "load", func() bool { return answered.Load() > 100 })
	rs.Kill()
	mark := answered.Load()
	waitFor(t, "answers while Redis is down", func() bool { return answered.Load() > mark+100 })
	rs.Restart()
	stop.Store(true)
	wg.Wait()
	// Redis decides again once a fresh key's first request is answered
	// 2/3 and its key is in Redis (a call that timed out may still have
	// written it, while the fallback answered).
	adm := rs.Admin(t)
	probe := 0
	waitFor(t, "Redis deciding again", func() bool {
		probe++
		v := fmt.Sprintf("probe%d", probe)
		got := says(s.ask(t, request("k", "f="+v)))
		return got == "OK; OK 2/3" && slices.ContainsFunc(limitKeys(t, adm), func(k string) bool { return strings.Contains(k, ":f="+v+"}") })
	})
	for i, want := range []string{"OK; OK 2/3", "OK; OK 1/3", "OK; OK 0/3", "OVER_LIMIT; OVER_LIMIT 0/3"} {
		if got := says(s.ask(t, request("k", "f=fresh"))); got != want {
			t.Errorf("after the restart, request %d: %s; want %s", i, got, want)
		}
	}
}

// outsideDrain: SIGTERM while a decision waits on Redis: the health checks
// over HTTP (/healthz, and /healthcheck where envoyproxy/ratelimit's users
// probe) fail at once, the call in flight is answered once Redis is back,
// and the process exits 0.
func outsideDrain(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	dir := t.TempDir()
	configFile(t, dir, "d.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 10}\n")
	s := serveProcess(t, bin, "redis://"+rs.Addr()+"/0", dir, "-timeout", "20s")
	s.ask(t, request("d", "a=warm"))
	health := func(path string) int {
		resp, err := http.Get("http://" + s.http + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"/healthz", "/healthcheck"} {
		if code := health(p); code != http.StatusOK {
			t.Fatalf("GET %s: %d before SIGTERM", p, code)
		}
	}
	admin := rs.Client(t, func(o *redis.Options) { o.PoolSize, o.ReadTimeout, o.ContextTimeoutEnabled = 1, 10*time.Second, false })
	ctx := context.Background()
	must(t, admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err())
	answer := make(chan string, 1)
	go func() {
		resp, err := s.try(request("d", "a=inflight"))
		answer <- fmt.Sprint(says(resp), err)
	}()
	waitFor(t, "the call blocked in Redis", func() bool {
		return strings.Contains(admin.Do(ctx, "CLIENT", "LIST").String(), "flags=b")
	})
	must(t, s.cmd.Process.Signal(syscall.SIGTERM))
	for _, p := range []string{"/healthz", "/healthcheck"} {
		waitFor(t, "unhealthy while draining", func() bool { return health(p) == http.StatusServiceUnavailable })
	}
	must(t, admin.Do(ctx, "CLIENT", "UNPAUSE").Err())
	if got := <-answer; got != "OK; OK 9/10<nil>" {
		t.Errorf("the call in flight at SIGTERM: %s; want it answered", got)
	}
	select {
	case <-s.exited:
		if code := s.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit %d after draining: %s", code, s.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("still running 30s after SIGTERM and the last call")
	}
}
