package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
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

// cell measures im in s for d, and deletes its keys.
func cell(t *testing.T, im impl, s scenario, d time.Duration) *stats {
	t.Helper()
	dec, c, done := setup(t, im, s)
	defer done()
	st := run(s.g, 0, d, s.keys, dec, c.ctr, nil, nil)
	if st.errs > 0 {
		t.Logf("%s %s: %d of %d decisions failed; first: %v", im.name, s, st.errs, st.ops, st.firstErr)
	}
	if st.redisErr != nil {
		t.Logf("%s %s: no Redis CPU reading: %v", im.name, s, st.redisErr)
	} else if st.redis.disturbed(0) {
		t.Logf("%s %s: Redis read %d bytes from other clients (%d from us): its CPU reading includes their work",
			im.name, s, st.redis.foreign(0), st.redis.sent)
	}
	return &st
}

// cpu formats a Redis CPU reading in µs per decision, marked with * when
// other clients' commands were in the window.
func cpu(st *stats) string {
	v := st.redisCPUPerOp()
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%s", v, st.cpuNote())
}

// ratio formats a/b, or "—" when either is unknown.
func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// tableSections are the parts of TestTable, in order; BENCH_ONLY (a comma
// list of them) runs some only.
var tableSections = []string{"decisions", "algorithms", "denycache", "ceiling", "http"}

func sectionsWanted(t *testing.T) map[string]bool {
	want := map[string]bool{}
	only := os.Getenv("BENCH_ONLY")
	if only == "" {
		only = strings.Join(tableSections, ",")
	}
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(tableSections, name) {
			t.Fatalf("BENCH_ONLY=%q: unknown section %q, want some of %s", only, name, strings.Join(tableSections, ","))
		}
		want[name] = true
	}
	return want
}

// contender is one row of a scenario in the decision table.
type contender struct {
	im    impl
	label string
	// only reports the scenarios it runs in.
	only func(scenario) bool
}

// decisionContenders are the decision table's rows for each scenario.
func decisionContenders() []contender {
	all := func(scenario) bool { return true }
	hot := func(s scenario) bool { return s.keys == 1 }
	cs := []contender{
		{oursPlain, "ours plain (`WithBatching(1)`)", all},
		{oursBatched, "ours batched (default)", all},
		{oursBDC, "ours batched + deny cache", all},
	}
	for _, im := range leaseImpls {
		cs = append(cs, contender{im, leaseLabel(im), hot})
	}
	return append(cs,
		contender{redisRate, "redis_rate (GCRA)", all},
		contender{ulule, "ulule (fixed window)", all},
		contender{goredis, "go-redis alone, our script", func(s scenario) bool { return s.g == 1 }},
	)
}

// TestTable runs every table of BENCHMARKS.md in one process and prints
// them in markdown. It takes about four minutes, so it only runs with
// BENCH_TABLE=1:
//
//	BENCH_TABLE=1 go test -run TestTable -v -timeout 15m
//
// BENCH_DURATION sets the time per cell (default 1s); BENCH_ONLY, a comma
// list of the sections to run (decisions, algorithms, denycache, ceiling,
// http; default all); BENCH_TABLE_OUT, a file to write the tables to as
// well.
func TestTable(t *testing.T) {
	if os.Getenv("BENCH_TABLE") != "1" {
		t.Skip("set BENCH_TABLE=1 to run every table of BENCHMARKS.md (about 4 minutes)")
	}
	needRedis(t)
	d := cellDuration(t)
	want := sectionsWanted(t)
	var out strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&out, format, a...) }
	start := time.Now()
	idle, idleForeign, err := redisIdle(time.Second)
	idleNote := "unknown"
	if err == nil {
		idleNote = fmt.Sprintf("%.0f µs per second", float64(idle)/float64(time.Microsecond))
		if idleForeign > 0 {
			idleNote += fmt.Sprintf(", while other clients sent it %d bytes", idleForeign)
		}
	}
	w("Measured %s, %s, GOMAXPROCS=%d, Redis %s, %s per cell, load average before: %s; Redis CPU while idle: %s\n\n",
		start.UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), runtime.GOMAXPROCS(0), redisVersion(t), d, loadavg(), idleNote)
	w("Redis CPU is the redis-server process's user + sys time (`INFO cpu`) over the measured window, divided by the decisions made in it. ")
	w("A reading marked * had commands from other clients in its window (logged with -v), so it is high.\n\n")
	res := map[string]map[string]*stats{}
	get := func(s scenario, name string) *stats {
		if st := res[s.String()][name]; st != nil {
			return st
		}
		return &stats{redisErr: errNotRun}
	}

	if want["decisions"] {
		w("### Decisions: ours vs redis_rate v10 vs ulule/limiter v3\n\n")
		w("Ours is the token bucket. *plain*: every decision is its own script call. *batched* (the default): concurrent decisions go to Redis together, one script call per batch. ")
		w("The deny cache answers denied keys locally until their RetryAfter ends. ")
		if len(leaseImpls) > 0 {
			w("*leases* (one-key rows): the Limiter takes up to 1/16 of the key's quota from Redis in one call and spends it in process; leases need a window, so its limit is a fixed window of the same quota. ")
			w("On the denied rows (1 per minute) 1/16 of the quota is under the 2 units a lease needs, so no lease is taken and it decides in Redis, batched. ")
		}
		w("allocs/op is the whole process per decision; *go-redis alone* runs our script with keys and arguments built beforehand, so ours minus it is what the core adds. ")
		w("The ratios compare each row with redis_rate and ulule in the same scenario: ops/s ÷ theirs, and Redis CPU per decision ÷ theirs.\n\n")
		w("| scenario | contender | ops/s | Redis CPU µs/decision | p50 µs | p99 µs | allocs/op | ops/s ÷ redis_rate | Redis CPU ÷ redis_rate | ops/s ÷ ulule |\n")
		w("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range matrix {
			res[s.String()] = map[string]*stats{}
			var rows []contender
			for _, c := range decisionContenders() {
				if c.only(s) {
					res[s.String()][c.im.name] = cell(t, c.im, s, d)
					rows = append(rows, c)
				}
			}
			rr, ul := get(s, redisRate.name), get(s, ulule.name)
			for _, c := range rows {
				st := get(s, c.im.name)
				w("| %s | %s | %.0f | %s | %.0f | %.0f | %.1f | %s | %s | %s |\n", s, c.label, st.opsPerSec(), cpu(st),
					st.p(0.5), st.p(0.99), st.allocsPerOp(), ratio(st.opsPerSec(), rr.opsPerSec()),
					ratio(st.redisCPUPerOp(), rr.redisCPUPerOp()), ratio(st.opsPerSec(), ul.opsPerSec()))
			}
			var log []string
			for _, c := range rows {
				st := get(s, c.im.name)
				log = append(log, fmt.Sprintf("%s %.0f/s %s µs Redis CPU %.1f allocs %.0f calls/1k %.0f trips/1k",
					c.im.name, st.opsPerSec(), cpu(st), st.allocsPerOp(), st.callsPer1k(), st.tripsPer1k()))
			}
			t.Logf("%s: %s", s, strings.Join(log, "; "))
		}
	}

	if want["algorithms"] {
		w("\n### Each algorithm, plain and batched\n\n")
		w("At one goroutine a batched Limiter makes the same lone calls as a plain one, so only plain is measured there.\n\n")
		w("| algorithm | scenario | plain ops/s | plain Redis CPU µs/decision | batched ops/s | batched Redis CPU µs/decision | plain allocs/op |\n")
		w("|---|---|--:|--:|--:|--:|--:|\n")
		for _, alg := range algorithms {
			for _, s := range algScenarios {
				p := cell(t, oursAlg(alg, false), s, d)
				bops, bcpu := "—", "—"
				if s.g > 1 {
					b := cell(t, oursAlg(alg, true), s, d)
					bops, bcpu = fmt.Sprintf("%.0f", b.opsPerSec()), cpu(b)
				}
				w("| %s | %s | %.0f | %s | %s | %s | %.1f |\n", alg, s, p.opsPerSec(), cpu(p), bops, bcpu, p.allocsPerOp())
			}
		}
	}

	var denyFewer = map[string]float64{} // scenario/contender -> fewer calls than without the cache
	if want["denycache"] {
		w("\n### Deny cache: one key, as many requests as the goroutines make\n\n")
		w("| limit | goroutines | contender | ops/s | denied | Redis calls/1000 decisions | Redis CPU µs/decision | calls ÷ without the cache |\n")
		w("|---|--:|---|--:|--:|--:|--:|--:|\n")
		for _, s := range abusiveScenarios {
			var without *stats
			for _, im := range denyCacheImpls {
				st := cell(t, im, s, d)
				fewer := "—"
				if im.name == oursPDC.name || im.name == oursBDC.name {
					f := without.callsPer1k() / math.Max(st.callsPer1k(), 1e-9)
					denyFewer[s.String()+"/"+im.name] = f
					fewer = fmt.Sprintf("%.0fx fewer", f)
				} else {
					without = st
				}
				w("| %d/s | %d | %s | %.0f | %.1f%% | %.2f | %s | %s |\n", s.traffic.quota().rate, s.g, strings.TrimPrefix(im.name, "ours/"),
					st.opsPerSec(), st.deniedPct(), st.callsPer1k(), cpu(st), fewer)
			}
		}
	}

	if want["ceiling"] {
		w("\n### The ceiling: redis-benchmark on the same server, and ours batched at 256 goroutines\n\n")
		w("redis-benchmark sends the script call of one decision, as captured from each implementation (ours: one plain decision, its script being the prelude, the token bucket and the batch driver), ")
		w("on 10000 random keys, and `EVALSHA` of `return 1`, with 256 clients, pipelined 16 deep and not pipelined. Redis CPU is per call; for ours batched, per decision.\n\n")
		w("| what | calls or decisions/s | Redis CPU µs each | ops/s ÷ our script -P 16 |\n|---|--:|--:|--:|\n")
		var scriptP16 float64
		redisCeilings(t, func(c ceiling) {
			if c.ours && c.pipeline > 1 {
				scriptP16 = c.rps
			}
			w("| %s | %.0f | %s | %s |\n", c.what, c.rps, c.cpu, ratio(c.rps, scriptP16))
		})
		for _, s := range []scenario{{256, 1, allowed}, {256, 10000, allowed}} {
			st := cell(t, oursBatched, s, d)
			w("| ours batched, %s | %.0f | %s | %s |\n", s, st.opsPerSec(), cpu(st), ratio(st.opsPerSec(), scriptP16))
		}
	}

	httpRatio := map[string]float64{}
	if want["http"] {
		w("\n### HTTP: hello world, %d keep-alive connections on loopback, 2 × %s per cell, interleaved\n\n", httpConns, d)
		w("Every request comes from 127.0.0.1, so all of them are decided on one key (a hot key), at a limit of 10,000,000 per second: all admitted. ")
		w("The Redis CPU of a bare app is the server's idle CPU spread over its requests: the floor under the other rows.\n\n")
		w("| framework | mode | req/s | ÷ bare | Redis CPU µs/request |\n|---|---|--:|--:|--:|\n")
		for _, app := range httpApps {
			modes := modesOf(app)
			type acc struct {
				done, bad int64
				secs      float64
				cpu       time.Duration
				cmds      int64
				foreign   bool
				err       error
			}
			accs := make([]acc, len(modes))
			for range 2 {
				for i, mode := range modes {
					r := httpMeasure(t, app, mode, 0, d, nil, nil)
					if r.bad > 0 {
						t.Errorf("%s %s: %d of %d requests were not 200", app.name, mode.name, r.bad, r.done)
					}
					a := &accs[i]
					a.done += r.done
					a.secs += r.elapsed.Seconds()
					a.cpu += r.redis.cpu
					a.cmds += r.cmds
					a.foreign = a.foreign || r.redis.disturbed(0)
					if r.redisErr != nil {
						a.err = r.redisErr
					}
				}
			}
			bare := float64(accs[0].done) / accs[0].secs
			for i, mode := range modes {
				a := accs[i]
				rps := float64(a.done) / a.secs
				c := "n/a"
				if a.err == nil && a.done > 0 {
					c = fmt.Sprintf("%.2f", a.cpu.Seconds()*1e6/float64(a.done))
					if a.foreign {
						c += "*"
					}
				}
				httpRatio[app.name+"/"+mode.name] = rps / bare
				w("| %s | %s | %.0f | %.2f | %s |\n", app.name, mode.label, rps, rps/bare, c)
			}
		}
	}

	if want["decisions"] {
		writeTargets(w, get, denyFewer, httpRatio)
	}
	w("\nTotal %s; load average after: %s\n", time.Since(start).Round(time.Second), loadavg())

	fmt.Println(out.String())
	if path := os.Getenv("BENCH_TABLE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

var errNotRun = errors.New("not measured")

// verdict is "met" or "**missed**".
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// writeTargets writes issue #12's targets, each with this run's numbers
// and whether they are met.
func writeTargets(w func(string, ...any), get func(scenario, string) *stats, denyFewer, httpRatio map[string]float64) {
	w("\n### Targets, this run\n\n| target | measured | verdict |\n|---|---|---|\n")
	cpuRatio := func(s scenario, name string) float64 {
		return get(s, name).redisCPUPerOp() / get(s, redisRate.name).redisCPUPerOp()
	}
	opsRatio := func(s scenario, name, peer string) float64 {
		return get(s, name).opsPerSec() / get(s, peer).opsPerSec()
	}

	// (a) Redis CPU per plain decision on uniform keys.
	var parts []string
	ok := true
	for _, s := range matrix {
		if s.keys == 1 {
			continue
		}
		r := cpuRatio(s, oursPlain.name)
		ok = ok && r <= 0.8
		parts = append(parts, fmt.Sprintf("%s %.2f", s, r))
	}
	w("| (a) Redis CPU per token-bucket decision, plain, 10000 keys ≤ 0.8 × redis_rate's | %s | %s |\n", strings.Join(parts, "; "), verdict(ok))

	// (b) 256 goroutines, one key, admitted.
	hot := scenario{256, 1, allowed}
	ro, rc := opsRatio(hot, oursBatched.name, redisRate.name), cpuRatio(hot, oursBatched.name)
	w("| (b) %s, ours batched: ≥ 3 × redis_rate's decisions/s, ≤ 1/3 of its Redis CPU per decision | %.2f × the decisions/s, %.2f × the Redis CPU | %s |\n",
		hot, ro, rc, verdict(ro >= 3 && rc <= 1.0/3))

	// (c) 16 goroutines, plain against both peers.
	parts, ok = nil, true
	for _, s := range matrix {
		if s.g != 16 {
			continue
		}
		a, b := opsRatio(s, oursPlain.name, redisRate.name), opsRatio(s, oursPlain.name, ulule.name)
		ok = ok && a >= 1 && b >= 1
		parts = append(parts, fmt.Sprintf("%s %.2f / %.2f", s, a, b))
	}
	w("| (c) 16 goroutines, ours plain ≥ redis_rate and ≥ ulule (ops/s ÷ redis_rate / ÷ ulule) | %s | %s |\n", strings.Join(parts, "; "), verdict(ok))

	// (d) No regression.
	parts = nil
	for _, s := range matrix {
		if s.g != 1 {
			continue
		}
		p, base := get(s, oursPlain.name), get(s, goredis.name)
		parts = append(parts, fmt.Sprintf("%s %.1f (core +%.1f)", s, p.allocsPerOp(), p.allocsPerOp()-base.allocsPerOp()))
	}
	w("| (d) allocs per decision, plain, 1 goroutine (before: 17.0-18.0, core +5.0) | %s | compare |\n", strings.Join(parts, "; "))
	parts = nil
	for _, s := range matrix {
		if s.g != 1 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f (redis_rate %.0f)", s, get(s, oursPlain.name).p(0.99), get(s, redisRate.name).p(0.99)))
	}
	w("| (d) p99 µs at 1 goroutine, plain (before, on a quiet machine: 110-150) | %s | compare |\n", strings.Join(parts, "; "))
	if len(denyFewer) > 0 {
		parts = nil
		for _, s := range abusiveScenarios {
			parts = append(parts, fmt.Sprintf("%d/s g=%d: plain %.0fx, batched %.0fx", s.traffic.quota().rate, s.g,
				denyFewer[s.String()+"/"+oursPDC.name], denyFewer[s.String()+"/"+oursBDC.name]))
		}
		w("| (d) deny cache, fewer Redis calls (before, plain: 467x, 3x at 1000/s; 4062x, 604x at 100/s) | %s | compare |\n", strings.Join(parts, "; "))
	}

	// Leases.
	for _, im := range leaseImpls {
		parts, ok = nil, true
		for _, s := range matrix {
			if s.keys != 1 || s.traffic != allowed {
				continue
			}
			r := opsRatio(s, im.name, redisRate.name)
			ok = ok && r >= 10
			parts = append(parts, fmt.Sprintf("%s %.1f", s, r))
		}
		w("| %s: ≥ 10 × redis_rate's decisions/s on a hot key | %s | %s |\n", leaseLabel(im), strings.Join(parts, "; "), verdict(ok))
	}
	for _, m := range httpExtraModes {
		if r, found := httpRatio["net/http/"+m.name]; found {
			w("| net/http %s: limited/bare ≥ 0.8 | %.2f | %s |\n", m.label, r, verdict(r >= 0.8))
		}
	}
}

func redisVersion(t *testing.T) string {
	rdb, err := infoClient()
	if err != nil {
		return "unknown"
	}
	text, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
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
