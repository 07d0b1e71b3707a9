package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
)

// cellDuration is how long each cell of the table measures.
func cellDuration(t *testing.T) time.Duration {
	if s := os.Getenv("BENCH_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("BENCH_DURATION=%q: %v", s, err)
		}
		return d
	}
	return time.Second
}

// cell measures im in s for d.
func cell(t *testing.T, im impl, s scenario, d time.Duration) stats {
	t.Helper()
	dec, c := setup(t, im, s)
	st := run(s.g, 0, d, s.keys, dec, c.ctr, nil, nil)
	if st.errs > 0 {
		t.Logf("%s %s: %d of %d decisions failed; first: %v", im.name, s, st.errs, st.ops, st.firstErr)
	}
	return st
}

// TestTable runs the whole matrix in one process and prints the markdown
// table recorded in BENCHMARKS.md. It takes about three minutes, so it only
// runs with BENCH_TABLE=1:
//
//	BENCH_TABLE=1 go test -run TestTable -v -timeout 15m
//
// BENCH_DURATION sets the time per cell (default 1s); BENCH_TABLE_OUT, a
// file to write the table to as well.
func TestTable(t *testing.T) {
	if os.Getenv("BENCH_TABLE") != "1" {
		t.Skip("set BENCH_TABLE=1 to run the whole matrix and print BENCHMARKS.md's table (about 3 minutes)")
	}
	needRedis(t)
	d := cellDuration(t)
	var out strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&out, format, a...) }
	start := time.Now()
	w("Measured %s, %s, GOMAXPROCS=%d, %s per cell, load average before: %s\n\n",
		start.UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), runtime.GOMAXPROCS(0), d, loadavg())

	// 1. The matrix: ours (plain and auto-pipelined token bucket, the
	// better of the two), the peers, and go-redis alone for allocations.
	w("### Decisions: ours vs redis_rate v10 vs ulule/limiter v3\n\n")
	w("Ours is the token bucket, plain (`plain`) or with `WithAutoPipeline` (`ap`), whichever did more here; every decision asks Redis (no deny cache). ")
	w("The last two columns add `WithDenyCache` to the auto-pipelined client: denied keys are then answered locally until their RetryAfter ends. ")
	w("allocs/op is the whole process per decision; `core` is that minus go-redis alone running the same script (`goredis_evalsha`).\n\n")
	w("| scenario | ours | ours ops/s | p50 µs | p99 µs | allocs/op (core) | redis_rate ops/s | ulule ops/s | ours/redis_rate | ours/ulule | ap+deny cache ops/s | ÷ redis_rate |\n")
	w("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range matrix {
		plain := cell(t, oursTB, s, d)
		ap := cell(t, oursAP, s, d)
		rr := cell(t, redisRate, s, d)
		ul := cell(t, ulule, s, d)
		base := cell(t, goredis, s, d)
		dc := cell(t, oursAPDC, s, d)
		best, name := &plain, "plain"
		if ap.opsPerSec() > plain.opsPerSec() {
			best, name = &ap, "ap"
		}
		w("| %s | %s | %.0f | %.0f | %.0f | %.1f (%+.1f) | %.0f | %.0f | %.2f | %.2f | %.0f | %.2f |\n",
			s, name, best.opsPerSec(), best.p(0.5), best.p(0.99), best.allocsPerOp(), best.allocsPerOp()-base.allocsPerOp(),
			rr.opsPerSec(), ul.opsPerSec(), best.opsPerSec()/rr.opsPerSec(), best.opsPerSec()/ul.opsPerSec(),
			dc.opsPerSec(), dc.opsPerSec()/rr.opsPerSec())
		t.Logf("%s: plain %.0f/s (%.1f allocs), ap %.0f/s (%.1f allocs, %.0f round trips/1k), redis_rate %.0f/s (%.1f allocs), ulule %.0f/s (%.1f allocs), goredis %.0f/s (%.1f allocs)",
			s, plain.opsPerSec(), plain.allocsPerOp(), ap.opsPerSec(), ap.allocsPerOp(), ap.tripsPer1k(),
			rr.opsPerSec(), rr.allocsPerOp(), ul.opsPerSec(), ul.allocsPerOp(), base.opsPerSec(), base.allocsPerOp())
	}

	// 2. Each algorithm.
	algScenarios := []scenario{{1, 10000, allowed}, {256, 10000, allowed}, {256, 10000, denied}}
	w("\n### Each algorithm (ops/s; plain / auto-pipelined)\n\n| algorithm |")
	for _, s := range algScenarios {
		w(" %s |", s)
	}
	w(" allocs/op at g=1 |\n|---|")
	for range algScenarios {
		w("--:|")
	}
	w("--:|\n")
	for _, alg := range []core.Algorithm{core.TokenBucket, core.SlidingWindow, core.SlidingWindowCounter, core.FixedWindow, core.LeakyBucket} {
		plain := ours("ours/"+alg.String(), "ours", alg)
		ap := ours("ours/"+alg.String()+"+autopipeline", "ours-ap", alg, core.WithAutoPipeline())
		w("| %s |", alg)
		var allocs float64
		for i, s := range algScenarios {
			p := cell(t, plain, s, d)
			if i == 0 {
				allocs = p.allocsPerOp()
				w(" %.0f |", p.opsPerSec())
				continue
			}
			a := cell(t, ap, s, d)
			w(" %.0f / %.0f |", p.opsPerSec(), a.opsPerSec())
		}
		w(" %.1f |\n", allocs)
	}

	// 3. The deny cache on one abused key.
	w("\n### Deny cache: one key, as many requests as the goroutines make\n\n")
	w("| limit | goroutines | without: ops/s | denied | Redis calls/1000 decisions | with: ops/s | denied | Redis calls/1000 decisions | fewer calls |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range abusiveScenarios {
		wo := cell(t, oursTB, s, d)
		wi := cell(t, oursDC, s, d)
		w("| %d/s | %d | %.0f | %.1f%% | %.1f | %.0f | %.1f%% | %.2f | %.0fx |\n", s.traffic.quota().rate, s.g,
			wo.opsPerSec(), wo.deniedPct(), wo.callsPer1k(), wi.opsPerSec(), wi.deniedPct(), wi.callsPer1k(), wo.callsPer1k()/wi.callsPer1k())
	}

	// 4. What Redis itself can do, each ceiling measured right before ours
	// auto-pipelined at 256 goroutines, so that both see the same machine.
	w("\n### The ceiling: redis-benchmark on the same server, next to ours auto-pipelined at 256 goroutines\n\n")
	w("| command | redis-benchmark -c 256 -P 16 | -c 256, no -P | ours ap, 1 key | %% of -P 16 | ours ap, 10000 keys | %% of -P 16 |\n")
	w("|---|--:|--:|--:|--:|--:|--:|\n")
	redisCeilings(t, func(c ceiling) {
		one := cell(t, oursAP, scenario{256, 1, allowed}, d)
		many := cell(t, oursAP, scenario{256, 10000, allowed}, d)
		w("| %s | %.0f | %.0f | %.0f | %.0f%% | %.0f | %.0f%% |\n", c.what, c.pipelined, c.plain,
			one.opsPerSec(), 100*one.opsPerSec()/c.pipelined, many.opsPerSec(), 100*many.opsPerSec()/c.pipelined)
	})

	// 5. HTTP, the three modes interleaved twice so drift hits them alike.
	w("\n### HTTP: hello world, %d keep-alive connections on loopback, 2 × %s per cell, interleaved\n\n", httpConns, d)
	w("| framework | bare req/s | limited req/s | ratio | limited+autopipeline req/s | ratio |\n|---|--:|--:|--:|--:|--:|\n")
	for _, app := range httpApps {
		var done = map[string]int64{}
		var secs = map[string]float64{}
		for range 2 {
			for _, mode := range httpModes {
				url, stop := app.start(t, httpLimiter(t, mode))
				httpLoad(url, httpConns, 4*httpConns, 0)
				n, bad, elapsed := httpLoad(url, httpConns, 0, d)
				stop()
				if bad > 0 {
					t.Errorf("%s %s: %d of %d requests were not 200", app.name, mode, bad, n)
				}
				done[mode] += n
				secs[mode] += elapsed.Seconds()
			}
		}
		rps := func(mode string) float64 { return float64(done[mode]) / secs[mode] }
		w("| %s | %.0f | %.0f | %.2f | %.0f | %.2f |\n", app.name, rps("bare"), rps("limited"), rps("limited")/rps("bare"),
			rps("limited+autopipeline"), rps("limited+autopipeline")/rps("bare"))
	}
	w("\nTotal %s; load average after: %s\n", time.Since(start).Round(time.Second), loadavg())

	fmt.Println(out.String())
	if path := os.Getenv("BENCH_TABLE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// ceiling is redis-benchmark's requests per second for one command with
// 256 clients, pipelined 16 deep and not pipelined.
type ceiling struct {
	what             string
	pipelined, plain float64
}

var rpsRe = regexp.MustCompile(`([0-9.]+) requests per second`)

// redisCeilings runs redis-benchmark against REDIS_URL's server: EVALSHA of
// "return 1" and of our token bucket script, with 256 clients, pipelined 16
// deep and not pipelined, and calls then after each command. It logs and
// does nothing when redis-benchmark is not installed.
func redisCeilings(t *testing.T, then func(ceiling)) {
	path, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Logf("redis-benchmark not found: no ceiling (%v)", err)
		return
	}
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(opt.Addr, ":")
	base := []string{"-h", host, "-p", port, "--dbnum", strconv.Itoa(opt.DB), "-q", "-n", "200000", "-c", "256"}
	if opt.Password != "" {
		base = append(base, "-a", opt.Password)
	}
	rdb := clientFor(t, "ceiling").rdb
	ctx := context.Background()
	trivial, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../core/scripts/token_bucket.lua")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := rdb.ScriptLoad(ctx, string(src)).Result()
	if err != nil {
		t.Fatal(err)
	}
	var tbArgs []string
	for _, a := range tokenBucketArgs(allowed.quota()) {
		tbArgs = append(tbArgs, fmt.Sprint(a))
	}
	cmds := []struct {
		what string
		args []string
	}{
		{"`EVALSHA` of `return 1`", []string{"evalsha", trivial, "0"}},
		{"`EVALSHA` of our token bucket, 10000 keys", append([]string{"-r", "10000", "evalsha", tb, "1", runPrefix + ":rb:__rand_int__"}, tbArgs...)},
	}
	for _, c := range cmds {
		ceil := ceiling{what: c.what}
		for _, p := range []int{16, 1} {
			args := append(append([]string{}, base...), "-P", strconv.Itoa(p))
			args = append(args, c.args...)
			cmd := exec.Command(path, args...)
			var stdout bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stdout
			if err := cmd.Run(); err != nil {
				t.Errorf("redis-benchmark %s: %v\n%s", strings.Join(args, " "), err, stdout.String())
				continue
			}
			m := rpsRe.FindAllStringSubmatch(stdout.String(), -1)
			if m == nil {
				t.Errorf("redis-benchmark %s: no requests per second in\n%s", strings.Join(args, " "), stdout.String())
				continue
			}
			rps, _ := strconv.ParseFloat(m[len(m)-1][1], 64)
			t.Logf("redis-benchmark %s: %.0f requests/s", strings.Join(args, " "), rps)
			if p > 1 {
				ceil.pipelined = rps
			} else {
				ceil.plain = rps
			}
		}
		if ceil.pipelined > 0 {
			then(ceil)
		}
	}
}
