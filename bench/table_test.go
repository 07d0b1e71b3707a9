package bench

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cellDuration is how long each cell of the table measures (BENCH_DURATION,
// default 1s).
func cellDuration(t *testing.T) time.Duration {
	if s := os.Getenv("BENCH_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("BENCH_DURATION=%q: want a positive duration (%v)", s, err)
		}
		return d
	}
	return time.Second
}

// benchRounds is how many rounds TestTable runs (BENCH_ROUNDS, default 3).
func benchRounds(t *testing.T) int {
	if s := os.Getenv("BENCH_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BENCH_ROUNDS=%q: want an integer >= 1", s)
		}
		return n
	}
	return 3
}

// cell measures im in s for d, and deletes its keys.
func cell(t *testing.T, round int, im impl, s scenario, d time.Duration) *stats {
	t.Helper()
	dec, c, done := setup(t, im, s)
	defer done()
	st := run(s.g, 0, d, s.keys, dec, c.ctr, nil, nil)
	if st.errs > 0 {
		t.Logf("round %d %s %s: %d of %d decisions failed; first: %v", round+1, im.name, s, st.errs, st.ops, st.firstErr)
	}
	if st.ops == 0 {
		t.Logf("round %d %s %s: no decision in the window", round+1, im.name, s)
	}
	if st.redisErr != nil {
		t.Logf("round %d %s %s: no Redis reading: %v", round+1, im.name, s, st.redisErr)
	} else if st.redis.disturbed(0) {
		t.Logf("round %d %s %s: Redis read %d bytes from other clients (%d from us): its CPU reading includes their work",
			round+1, im.name, s, st.redis.foreign(0), st.redis.sent)
	}
	t.Logf("round %d %s %s: %.0f/s, Redis CPU %.2f%s µs, script %.2f%s µs (%s), p50 %.0f p99 %.0f µs, %.1f allocs, %.0f calls/1k, %.0f trips/1k",
		round+1, s, im.name, st.opsPerSec(), st.redisCPUPerOp(), st.cpuNote(), st.scriptPerOp(), st.scriptNote(), st.form(),
		st.p(0.5), st.p(0.99), st.allocsPerOp(), st.callsPer1k(), st.tripsPer1k())
	return &st
}

// Ranges over rounds. A cell's value in each round goes into a []float64
// (NaN where it is unknown); tables print min–max, and ratios are taken
// within each round (the contenders of a round ran minutes apart at
// most), then min–max.

// span formats vals as min–max with prec decimals: one number when both
// print alike, "—" when none is known, and a trailing "?" when some round
// is unknown.
func span(vals []float64, prec int) string {
	lo, hi, n := math.Inf(1), math.Inf(-1), 0
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi, n = math.Min(lo, v), math.Max(hi, v), n+1
	}
	if n == 0 {
		return "—"
	}
	a, b := strconv.FormatFloat(lo, 'f', prec, 64), strconv.FormatFloat(hi, 'f', prec, 64)
	s := a
	if a != b {
		s = a + "–" + b
	}
	if n < len(vals) {
		s += "?"
	}
	return s
}

// every reports whether vals has a known value for each of rounds rounds,
// each satisfying ok.
func every(vals []float64, rounds int, ok func(float64) bool) bool {
	if len(vals) != rounds {
		return false
	}
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) || !ok(v) {
			return false
		}
	}
	return true
}

func atLeast(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }
func atMost(x float64) func(float64) bool  { return func(v float64) bool { return v <= x } }

// series is one cell's stats over the rounds (nil where not measured).
type series []*stats

// of is f of every round, NaN where not measured.
func (ss series) of(f func(*stats) float64) []float64 {
	out := make([]float64, len(ss))
	for i, st := range ss {
		out[i] = math.NaN()
		if st != nil {
			out[i] = f(st)
		}
	}
	return out
}

// ratio is f(a)/f(b), round by round.
func ratio(a, b series, f func(*stats) float64) []float64 {
	out := make([]float64, max(len(a), len(b)))
	for i := range out {
		out[i] = math.NaN()
		if i < len(a) && i < len(b) && a[i] != nil && b[i] != nil {
			if y := f(b[i]); y != 0 {
				out[i] = f(a[i]) / y
			}
		}
	}
	return out
}

// note is the union of the notes of the rounds ("*": other clients in a
// window; "!": decisions failed).
func (ss series) note(f func(*stats) string) string {
	var n string
	for _, st := range ss {
		if st != nil {
			for _, r := range f(st) {
				if !strings.ContainsRune(n, r) {
					n += string(r)
				}
			}
		}
	}
	return n
}

func (ss series) forms() string {
	var fs []string
	for _, st := range ss {
		if st != nil && !slices.Contains(fs, st.form()) {
			fs = append(fs, st.form())
		}
	}
	return strings.Join(fs, ", ")
}

// errNote marks a cell in which decisions failed, or none was made.
func errNote(st *stats) string {
	if st.errs > 0 || st.ops == 0 {
		return "!"
	}
	return ""
}

func opsPerSec(st *stats) float64   { return st.opsPerSec() }
func cpuPerOp(st *stats) float64    { return st.redisCPUPerOp() }
func scriptPerOp(st *stats) float64 { return st.scriptPerOp() }
func p50(st *stats) float64         { return st.p(0.5) }
func p99(st *stats) float64         { return st.p(0.99) }
func allocsPerOp(st *stats) float64 { return st.allocsPerOp() }
func callsPer1k(st *stats) float64  { return st.callsPer1k() }
func deniedPct(st *stats) float64   { return st.deniedPct() }

// tableSections are the parts of TestTable, in order; BENCH_ONLY (a comma
// list of them) runs some only.
var tableSections = []string{"decisions", "algorithms", "features", "denycache", "ceiling", "http"}

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
		contender{oursFW, "ours fixed window (default)", all},
		contender{redisRate, "redis_rate (GCRA)", all},
		contender{ulule, "ulule (fixed window)", all},
		contender{goredis, "go-redis alone, our call", func(s scenario) bool { return s.g == 1 }},
	)
}

// rotate returns xs rotated left by r: each round starts with another
// contender, so that none always runs first (right after the previous
// scenario's keys were deleted) or last.
func rotate[T any](xs []T, r int) []T {
	if len(xs) == 0 {
		return xs
	}
	r %= len(xs)
	return append(append([]T{}, xs[r:]...), xs[:r]...)
}

// tableRun is one TestTable run: its settings and what it measured.
type tableRun struct {
	t      *testing.T
	d      time.Duration
	rounds int
	cells  map[string]series // by section/scenario/contender
	// ceiling: redis-benchmark results by row, in first-seen order.
	ceilCmds []ceilingCommand
	ceilPath string
	ceil     map[string][]*ceiling
	httpRuns map[string][]*httpRun // by app/mode
}

func (tr *tableRun) put(key string, round int, st *stats) {
	ss := tr.cells[key]
	if ss == nil {
		ss = make(series, tr.rounds)
		tr.cells[key] = ss
	}
	ss[round] = st
}

// get is the series of key; a series of nils when it was not measured.
func (tr *tableRun) get(key string) series {
	if ss := tr.cells[key]; ss != nil {
		return ss
	}
	return make(series, tr.rounds)
}

func decKey(s scenario, im impl) string { return "decisions/" + s.String() + "/" + im.name }

// TestTable runs every table of BENCHMARKS.md in one process and prints
// them in markdown. It takes a while (about 15 minutes at the defaults), so
// it only runs with BENCH_TABLE=1:
//
//	BENCH_TABLE=1 go test -count=1 -run TestTable -v -timeout 60m
//
// It runs BENCH_ROUNDS rounds (default 3); each round measures every cell
// of every section once, the contenders of a cell one after the other in
// an order rotated each round. Every number printed is min–max over the
// rounds, every ratio is taken within a round first, and a target is met
// only if it holds in every round.
//
// BENCH_DURATION sets the time per cell (default 1s); BENCH_ONLY, a comma
// list of the sections to run (decisions, algorithms, features, denycache,
// ceiling, http; default all); BENCH_TABLE_OUT, a file to write the tables
// to as well.
func TestTable(t *testing.T) {
	if os.Getenv("BENCH_TABLE") != "1" {
		t.Skip("set BENCH_TABLE=1 to run every table of BENCHMARKS.md (about 15 minutes)")
	}
	needRedis(t)
	tr := &tableRun{t: t, d: cellDuration(t), rounds: benchRounds(t), cells: map[string]series{},
		ceil: map[string][]*ceiling{}, httpRuns: map[string][]*httpRun{}}
	want := sectionsWanted(t)
	start := time.Now()
	loadBefore := loadavg()
	idleBefore := idleNote()

	for r := range tr.rounds {
		t.Logf("round %d of %d, load average %s", r+1, tr.rounds, loadavg())
		if want["decisions"] {
			tr.measureDecisions(r)
		}
		if want["algorithms"] {
			tr.measureAlgorithms(r)
		}
		if want["features"] {
			tr.measureFeatures(r)
		}
		if want["denycache"] {
			tr.measureDenyCache(r)
		}
		if want["ceiling"] {
			tr.measureCeiling(r)
		}
		if want["http"] {
			tr.measureHTTP(r)
		}
	}
	loadAfter := loadavg()
	idleAfter := idleNote()
	total := time.Since(start).Round(time.Second)

	var out strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&out, format, a...) }
	w("Measured %s, %s, GOMAXPROCS=%d, Redis %s, %s per cell, %d round(s), %s in all.\n\n",
		start.UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), runtime.GOMAXPROCS(0), redisVersion(), tr.d, tr.rounds, total)
	w("- Command: `%s`\n", commandLine())
	w("- Test binary: `%s`\n", binaryLine())
	w("- Commit: %s\n", gitCommit())
	w("- Load average (/proc/loadavg) before the run: `%s`; after it: `%s`\n", loadBefore, loadAfter)
	w("- Redis CPU while idle: %s before the run, %s after it\n", idleBefore, idleAfter)
	w("- Our Limiters decided with: %s\n\n", formsNote())
	w("Each number is min–max over the %d round(s) (one number when they agree). Each round measures every cell once, the contenders of a cell one after the other, their order rotated by one each round; ", tr.rounds)
	w("each cell's keys are deleted after it. A ratio is taken within each round, then min–max; a target is met only if it holds in every round. ")
	w("Redis CPU is the redis-server process's user + sys time (`INFO cpu`) over the measured window, divided by the decisions made in it; ")
	w("script µs is the time Redis spent executing the script commands (`INFO commandstats` usec of FCALL, EVALSHA, EVAL, diffed around the window) per decision: wall-clock time inside the command, so a Redis that other load on the machine descheduled reads high there, while Redis CPU counts CPU time only. ")
	w("A reading marked * had commands from other clients in its window (logged with -v), so it is high; ! marks a cell in which decisions failed, or none was made (logged).\n\n")

	if want["decisions"] {
		tr.writeDecisions(w)
	}
	if want["algorithms"] {
		tr.writeAlgorithms(w)
	}
	if want["features"] {
		tr.writeFeatures(w)
	}
	if want["denycache"] {
		tr.writeDenyCache(w)
	}
	if want["ceiling"] {
		tr.writeCeiling(w)
	}
	if want["http"] {
		tr.writeHTTP(w)
	}
	if want["decisions"] {
		tr.writeTargets(w)
		tr.writeIssueTargets(w, want)
	}

	fmt.Println(out.String())
	if path := os.Getenv("BENCH_TABLE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// Decisions.

func (tr *tableRun) measureDecisions(r int) {
	for _, s := range matrix {
		var cs []contender
		for _, c := range decisionContenders() {
			if c.only(s) {
				cs = append(cs, c)
			}
		}
		for _, c := range rotate(cs, r) {
			tr.put(decKey(s, c.im), r, cell(tr.t, r, c.im, s, tr.d))
		}
	}
}

func (tr *tableRun) writeDecisions(w func(string, ...any)) {
	w("### Decisions: ours vs redis_rate v10 vs ulule/limiter v3\n\n")
	w("Ours is the token bucket unless the row says otherwise. *plain*: every decision is its own call. *batched* (the default): concurrent decisions go to Redis together, one call per batch. ")
	w("The deny cache answers denied keys locally until their RetryAfter ends. ")
	if len(leaseImpls) > 0 {
		w("*leases* (one-key rows): the Limiter takes up to 1/16 of the key's quota from Redis in one call and spends it in process; leases need a window, so its limit is a fixed window of the same quota. ")
		w("On the denied rows (1 per minute) 1/16 of the quota is under the 2 units a lease needs, so no lease is taken and it decides in Redis, batched. ")
	}
	w("*ours fixed window* is the default Limiter on a fixed window, ulule's algorithm. ")
	w("*go-redis alone* replays the call one plain decision of ours makes, captured from a real Limiter (its command, function or SHA, keys and arguments), with each key swapped in, built beforehand, through the go-redis method core calls; ours minus it is what the core adds. ")
	w("*Redis command* is what the window's decisions reached Redis as (from commandstats). ")
	w("The ratios compare each row with redis_rate and ulule in the same scenario and round: ops/s ÷ theirs, and Redis CPU per decision ÷ theirs.\n\n")
	w("| scenario | contender | Redis command | ops/s | Redis CPU µs/decision | script µs/decision | p50 µs | p99 µs | allocs/op | ops/s ÷ redis_rate | Redis CPU ÷ redis_rate | ops/s ÷ ulule |\n")
	w("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range matrix {
		rr, ul := tr.get(decKey(s, redisRate)), tr.get(decKey(s, ulule))
		for _, c := range decisionContenders() {
			if !c.only(s) {
				continue
			}
			ss := tr.get(decKey(s, c.im))
			w("| %s | %s | %s%s | %s%s | %s%s | %s%s | %s | %s | %s | %s | %s | %s |\n", s, c.label, ss.forms(), ss.note((*stats).scriptNote),
				span(ss.of(opsPerSec), 0), ss.note(errNote), span(ss.of(cpuPerOp), 2), ss.note((*stats).cpuNote),
				span(ss.of(scriptPerOp), 2), ss.note((*stats).scriptNote),
				span(ss.of(p50), 0), span(ss.of(p99), 0), span(ss.of(allocsPerOp), 1),
				span(ratio(ss, rr, opsPerSec), 2), span(ratio(ss, rr, cpuPerOp), 2), span(ratio(ss, ul, opsPerSec), 2))
		}
	}
}

// Algorithms.

func algKey(alg fmt.Stringer, s scenario, mode string) string {
	return "algorithms/" + alg.String() + "/" + s.String() + "/" + mode
}

func (tr *tableRun) measureAlgorithms(r int) {
	for _, alg := range algorithms {
		for _, s := range algScenarios {
			modes := []bool{false}
			if s.g > 1 {
				modes = rotate([]bool{false, true}, r)
			}
			for _, batched := range modes {
				tr.put(algKey(alg, s, modeName(batched)), r, cell(tr.t, r, oursAlg(alg, batched), s, tr.d))
			}
		}
	}
}

func (tr *tableRun) writeAlgorithms(w func(string, ...any)) {
	w("\n### Each algorithm, plain and batched\n\n")
	w("At one goroutine a batched Limiter makes the same lone calls as a plain one (TestOneCallScript checks it), so only plain is measured there.\n\n")
	w("| algorithm | scenario | plain ops/s | plain Redis CPU µs/decision | plain script µs/decision | batched ops/s | batched Redis CPU µs/decision | plain allocs/op |\n")
	w("|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, alg := range algorithms {
		for _, s := range algScenarios {
			p := tr.get(algKey(alg, s, "plain"))
			bops, bcpu := "—", "—"
			if s.g > 1 {
				b := tr.get(algKey(alg, s, "batched"))
				bops = span(b.of(opsPerSec), 0) + b.note(errNote)
				bcpu = span(b.of(cpuPerOp), 2) + b.note((*stats).cpuNote)
			}
			w("| %s | %s | %s%s | %s%s | %s%s | %s | %s | %s |\n", alg, s, span(p.of(opsPerSec), 0), p.note(errNote),
				span(p.of(cpuPerOp), 2), p.note((*stats).cpuNote), span(p.of(scriptPerOp), 2), p.note((*stats).scriptNote),
				bops, bcpu, span(p.of(allocsPerOp), 1))
		}
	}
}

// Deny cache.

func dcKey(s scenario, im impl) string { return "denycache/" + s.String() + "/" + im.name }

// denyPairs are the deny cache contenders and the client without the cache
// each is compared with.
var denyPairs = map[string]impl{oursPDC.name: oursPlain, oursBDC.name: oursBatched}

func (tr *tableRun) measureDenyCache(r int) {
	for _, s := range abusiveScenarios {
		for _, im := range rotate(denyCacheImpls, r) {
			tr.put(dcKey(s, im), r, cell(tr.t, r, im, s, tr.d))
		}
	}
}

// fewer is, round by round, how many times fewer Redis calls per decision
// im made in s than the same client without the deny cache.
func (tr *tableRun) fewer(s scenario, im impl) []float64 {
	return ratio(tr.get(dcKey(s, denyPairs[im.name])), tr.get(dcKey(s, im)), func(st *stats) float64 {
		return math.Max(st.callsPer1k(), 1e-9)
	})
}

func (tr *tableRun) writeDenyCache(w func(string, ...any)) {
	w("\n### Deny cache: one key, as many requests as the goroutines make\n\n")
	w("| limit | goroutines | contender | ops/s | denied %% | Redis calls/1000 decisions | Redis CPU µs/decision | calls ÷ without the cache |\n")
	w("|---|--:|---|--:|--:|--:|--:|--:|\n")
	for _, s := range abusiveScenarios {
		for _, im := range denyCacheImpls {
			ss := tr.get(dcKey(s, im))
			fewer := "—"
			if _, ok := denyPairs[im.name]; ok {
				fewer = span(tr.fewer(s, im), 0) + "x fewer"
			}
			w("| %d/s | %d | %s | %s%s | %s | %s | %s%s | %s |\n", s.traffic.quota().rate, s.g, strings.TrimPrefix(im.name, "ours/"),
				span(ss.of(opsPerSec), 0), ss.note(errNote), span(ss.of(deniedPct), 1), span(ss.of(callsPer1k), 2),
				span(ss.of(cpuPerOp), 2), ss.note((*stats).cpuNote), fewer)
		}
	}
}

// Ceiling.

var ceilingOurs = []scenario{{256, 1, allowed}, {256, 10000, allowed}}

func (tr *tableRun) measureCeiling(r int) {
	t := tr.t
	if r == 0 {
		path, err := exec.LookPath("redis-benchmark")
		if err != nil {
			t.Logf("redis-benchmark not found: no ceiling rows (%v)", err)
		} else {
			tr.ceilPath, tr.ceilCmds = path, ceilingCommands(t)
		}
	}
	if tr.ceilPath != "" {
		for _, c := range rotate(tr.ceilCmds, r) {
			for _, p := range ceilingPipelines {
				ceil, ok := redisCeiling(t, tr.ceilPath, c, p, ceilingRequests(tr.d))
				if !ok {
					continue
				}
				if tr.ceil[ceil.what] == nil {
					tr.ceil[ceil.what] = make([]*ceiling, tr.rounds)
				}
				tr.ceil[ceil.what][r] = &ceil
			}
		}
	}
	for _, s := range ceilingOurs {
		tr.put("ceiling/"+s.String(), r, cell(t, r, oursBatched, s, tr.d))
	}
}

// ceilOf is f of row what in every round.
func (tr *tableRun) ceilOf(what string, f func(*ceiling) float64) []float64 {
	out := make([]float64, tr.rounds)
	for i := range out {
		out[i] = math.NaN()
		if cs := tr.ceil[what]; cs != nil && cs[i] != nil {
			out[i] = f(cs[i])
		}
	}
	return out
}

func (tr *tableRun) writeCeiling(w func(string, ...any)) {
	w("\n### The ceiling: redis-benchmark on the same server, and ours batched at 256 goroutines\n\n")
	w("redis-benchmark sends the script call of one decision, as captured from each implementation (ours: one plain decision, an FCALL of its library on Redis 7), ")
	w("on 10000 random keys, and a call that returns 1, with 256 clients, pipelined 16 deep and not pipelined. Redis CPU and script µs are per call; for ours batched, per decision.\n\n")
	w("| what | calls or decisions/s | Redis CPU µs each | script µs each | ops/s ÷ our call -P 16 |\n|---|--:|--:|--:|--:|\n")
	var oursP16 string
	for _, c := range tr.ceilCmds {
		if c.ours {
			oursP16 = fmt.Sprintf("redis-benchmark -c 256 -P %d, %s", ceilingPipelines[0], c.what)
		}
	}
	ref := tr.ceilOf(oursP16, func(c *ceiling) float64 { return c.rps })
	perRound := func(vals []float64) []float64 {
		out := make([]float64, len(vals))
		for i, v := range vals {
			out[i] = v / ref[i]
		}
		return out
	}
	for _, c := range tr.ceilCmds {
		for _, p := range ceilingPipelines {
			what := fmt.Sprintf("redis-benchmark -c 256 -P %d, %s", p, c.what)
			var note string
			for _, cl := range tr.ceil[what] {
				if cl != nil && cl.note != "" {
					note = cl.note
				}
			}
			rps := tr.ceilOf(what, func(c *ceiling) float64 { return c.rps })
			w("| %s | %s | %s%s | %s | %s |\n", what, span(rps, 0), span(tr.ceilOf(what, func(c *ceiling) float64 { return c.cpu }), 2), note,
				span(tr.ceilOf(what, func(c *ceiling) float64 { return c.script }), 2), span(perRound(rps), 2))
		}
	}
	for _, s := range ceilingOurs {
		ss := tr.get("ceiling/" + s.String())
		w("| ours batched, %s | %s%s | %s%s | %s%s | %s |\n", s, span(ss.of(opsPerSec), 0), ss.note(errNote), span(ss.of(cpuPerOp), 2),
			ss.note((*stats).cpuNote), span(ss.of(scriptPerOp), 2), ss.note((*stats).scriptNote), span(perRound(ss.of(opsPerSec)), 2))
	}
}

// HTTP.

func (tr *tableRun) measureHTTP(r int) {
	t := tr.t
	for _, app := range httpApps {
		for _, mode := range rotate(modesOf(app), r) {
			run := httpMeasure(t, app, mode, 0, tr.d, nil, nil)
			if run.bad > 0 {
				t.Errorf("round %d %s %s: %d of %d requests were not 200", r+1, app.name, mode.name, run.bad, run.done)
			}
			key := app.name + "/" + mode.name
			if tr.httpRuns[key] == nil {
				tr.httpRuns[key] = make([]*httpRun, tr.rounds)
			}
			tr.httpRuns[key][r] = &run
			t.Logf("round %d http %s: %.0f req/s, Redis CPU %.2f µs/request", r+1, key, httpRPS(&run), httpCPU(&run))
		}
	}
}

func httpRPS(r *httpRun) float64 { return float64(r.done) / r.elapsed.Seconds() }

func httpCPU(r *httpRun) float64 {
	if r.redisErr != nil || r.done == 0 {
		return math.NaN()
	}
	return r.redis.cpu.Seconds() * 1e6 / float64(r.done)
}

// httpOf is f of app/mode in every round.
func (tr *tableRun) httpOf(key string, f func(*httpRun) float64) []float64 {
	out := make([]float64, tr.rounds)
	for i := range out {
		out[i] = math.NaN()
		if rs := tr.httpRuns[key]; rs != nil && rs[i] != nil {
			out[i] = f(rs[i])
		}
	}
	return out
}

// httpRatio is, round by round, app's req/s in mode ÷ bare.
func (tr *tableRun) httpRatio(app, mode string) []float64 {
	a, b := tr.httpOf(app+"/"+mode, httpRPS), tr.httpOf(app+"/"+httpBare.name, httpRPS)
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

func (tr *tableRun) writeHTTP(w func(string, ...any)) {
	w("\n### HTTP: hello world, %d keep-alive connections on loopback, %s per mode and round\n\n", httpConns, tr.d)
	w("Every request comes from 127.0.0.1, so all of them are decided on one key (a hot key), at a limit of 10,000,000 per second: all admitted. ")
	w("The Redis CPU of a bare app is the server's idle CPU spread over its requests: the floor under the other rows.\n\n")
	w("| framework | mode | req/s | ÷ bare | Redis CPU µs/request |\n|---|---|--:|--:|--:|\n")
	for _, app := range httpApps {
		for _, mode := range modesOf(app) {
			key := app.name + "/" + mode.name
			var note string
			for _, r := range tr.httpRuns[key] {
				if r != nil && r.redisErr == nil && r.redis.disturbed(0) {
					note = "*"
				}
			}
			w("| %s | %s | %s | %s | %s%s |\n", app.name, mode.label, span(tr.httpOf(key, httpRPS), 0), span(tr.httpRatio(app.name, mode.name), 2),
				span(tr.httpOf(key, httpCPU), 2), note)
		}
	}
}

// Targets.

// verdict is "met" or "**missed**".
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// writeTargets writes the targets of this harness: in every cell, ours
// (default, token bucket) ≥ redis_rate's decisions/s, ours (default, fixed
// window) ≥ ulule's, and the plain call's Redis CPU per decision ≤
// redis_rate's, by commandstats and by process CPU; each met only if it
// holds in every round.
func (tr *tableRun) writeTargets(w func(string, ...any)) {
	w("\n### Targets, this run (%d round(s); met only if it holds in every round)\n\n", tr.rounds)
	w("Ratios are taken within each round, then min–max. *ours token bucket* is the default `core.New` Limiter with `WithTimeout(1s)`; *ours fixed window*, the same on a fixed window; ")
	w("*plain* is `WithBatching(1)`, one call per decision, against redis_rate's GCRA (one EVALSHA per decision): script µs from `INFO commandstats`, Redis CPU from `INFO cpu`.\n\n")
	w("| cell | ours token bucket ÷ redis_rate, decisions/s (≥ 1) | ours fixed window ÷ ulule, decisions/s (≥ 1) | plain ÷ redis_rate, script µs/decision (≤ 1) | plain ÷ redis_rate, Redis CPU/decision (≤ 1) |\n")
	w("|---|--:|--:|--:|--:|\n")
	all := [4]bool{true, true, true, true}
	for _, s := range matrix {
		rr := tr.get(decKey(s, redisRate))
		vals := [4][]float64{
			ratio(tr.get(decKey(s, oursBatched)), rr, opsPerSec),
			ratio(tr.get(decKey(s, oursFW)), tr.get(decKey(s, ulule)), opsPerSec),
			ratio(tr.get(decKey(s, oursPlain)), rr, scriptPerOp),
			ratio(tr.get(decKey(s, oursPlain)), rr, cpuPerOp),
		}
		oks := [4]func(float64) bool{atLeast(1), atLeast(1), atMost(1), atMost(1)}
		var cols [4]string
		for i := range vals {
			ok := every(vals[i], tr.rounds, oks[i])
			all[i] = all[i] && ok
			cols[i] = span(vals[i], 2) + " " + verdict(ok)
		}
		w("| %s | %s | %s | %s | %s |\n", s, cols[0], cols[1], cols[2], cols[3])
	}
	w("| **every cell** | %s | %s | %s | %s |\n", verdict(all[0]), verdict(all[1]), verdict(all[2]), verdict(all[3]))
}

// writeIssueTargets writes issue #12's targets with this run's ranges.
func (tr *tableRun) writeIssueTargets(w func(string, ...any), want map[string]bool) {
	w("\n### Issue #12's targets, this run\n\n| target | measured (min–max over the rounds) | verdict |\n|---|---|---|\n")
	rows := func(pick func(scenario) bool, prec int, f func(s scenario) ([]float64, string), ok func(float64) bool) (string, bool) {
		var parts []string
		met := true
		for _, s := range matrix {
			if !pick(s) {
				continue
			}
			vals, extra := f(s)
			met = met && (ok == nil || every(vals, tr.rounds, ok))
			parts = append(parts, fmt.Sprintf("%s %s%s", s, span(vals, prec), extra))
		}
		return strings.Join(parts, "; "), met
	}
	uniform := func(s scenario) bool { return s.keys != 1 }
	m, ok := rows(uniform, 2, func(s scenario) ([]float64, string) {
		return ratio(tr.get(decKey(s, oursPlain)), tr.get(decKey(s, redisRate)), cpuPerOp), ""
	}, atMost(0.8))
	w("| (a) Redis CPU per token-bucket decision, plain, 10000 keys ≤ 0.8 × redis_rate's | %s | %s |\n", m, verdict(ok))

	hot := scenario{256, 1, allowed}
	ro := ratio(tr.get(decKey(hot, oursBatched)), tr.get(decKey(hot, redisRate)), opsPerSec)
	rc := ratio(tr.get(decKey(hot, oursBatched)), tr.get(decKey(hot, redisRate)), cpuPerOp)
	w("| (b) %s, ours batched: ≥ 3 × redis_rate's decisions/s, ≤ 1/3 of its Redis CPU per decision | %s × the decisions/s, %s × the Redis CPU | %s |\n",
		hot, span(ro, 2), span(rc, 2), verdict(every(ro, tr.rounds, atLeast(3)) && every(rc, tr.rounds, atMost(1.0/3))))

	var parts []string
	ok = true
	for _, s := range matrix {
		if s.g != 16 {
			continue
		}
		a := ratio(tr.get(decKey(s, oursPlain)), tr.get(decKey(s, redisRate)), opsPerSec)
		b := ratio(tr.get(decKey(s, oursPlain)), tr.get(decKey(s, ulule)), opsPerSec)
		ok = ok && every(a, tr.rounds, atLeast(1)) && every(b, tr.rounds, atLeast(1))
		parts = append(parts, fmt.Sprintf("%s %s / %s", s, span(a, 2), span(b, 2)))
	}
	w("| (c) 16 goroutines, ours plain ≥ redis_rate and ≥ ulule (ops/s ÷ redis_rate / ÷ ulule) | %s | %s |\n", strings.Join(parts, "; "), verdict(ok))

	single := func(s scenario) bool { return s.g == 1 }
	m, _ = rows(single, 1, func(s scenario) ([]float64, string) {
		p, base := tr.get(decKey(s, oursPlain)), tr.get(decKey(s, goredis))
		diff := make([]float64, tr.rounds)
		for i := range diff {
			diff[i] = math.NaN()
			if p[i] != nil && base[i] != nil {
				diff[i] = p[i].allocsPerOp() - base[i].allocsPerOp()
			}
		}
		return p.of(allocsPerOp), " (core +" + span(diff, 1) + ")"
	}, nil)
	w("| (d) allocs per decision, plain, 1 goroutine (before: 17.0-18.0, core +5.0) | %s | compare |\n", m)
	m, _ = rows(single, 0, func(s scenario) ([]float64, string) {
		return tr.get(decKey(s, oursPlain)).of(p99), " µs (redis_rate " + span(tr.get(decKey(s, redisRate)).of(p99), 0) + ")"
	}, nil)
	w("| (d) p99 µs at 1 goroutine, plain (before, on a quiet machine: 110-150) | %s | compare |\n", m)
	if want["denycache"] {
		parts = nil
		for _, s := range abusiveScenarios {
			parts = append(parts, fmt.Sprintf("%d/s g=%d: plain %sx, batched %sx", s.traffic.quota().rate, s.g,
				span(tr.fewer(s, oursPDC), 0), span(tr.fewer(s, oursBDC), 0)))
		}
		w("| (d) deny cache, fewer Redis calls (before, plain: 467x, 3x at 1000/s; 4062x, 604x at 100/s) | %s | compare |\n", strings.Join(parts, "; "))
	}
	for _, im := range leaseImpls {
		m, ok := rows(func(s scenario) bool { return s.keys == 1 && s.traffic == allowed }, 1, func(s scenario) ([]float64, string) {
			return ratio(tr.get(decKey(s, im)), tr.get(decKey(s, redisRate)), opsPerSec), ""
		}, atLeast(10))
		w("| %s: ≥ 10 × redis_rate's decisions/s on a hot key | %s | %s |\n", leaseLabel(im), m, verdict(ok))
	}
	if want["http"] {
		for _, m := range httpExtraModes {
			r := tr.httpRatio("net/http", m.name)
			w("| net/http %s: limited/bare ≥ 0.8 | %s | %s |\n", m.label, span(r, 2), verdict(every(r, tr.rounds, atLeast(0.8))))
		}
	}
}

// The header.

// loadavg is /proc/loadavg as it reads (1, 5 and 15 minute averages,
// runnable/total tasks, last pid).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// idleNote is the server's CPU per second while this process sends it
// nothing, over a second.
func idleNote() string {
	idle, foreign, err := redisIdle(time.Second)
	if err != nil {
		return "unknown"
	}
	s := fmt.Sprintf("%.0f µs per second", float64(idle)/float64(time.Microsecond))
	if foreign > 0 {
		s += fmt.Sprintf(" (while other clients sent it %d bytes)", foreign)
	}
	return s
}

// formsNote says which script command our Limiters' probes settled on.
func formsNote() string {
	formsMu.Lock()
	defer formsMu.Unlock()
	if len(formsSeen) == 0 {
		return "none made"
	}
	var parts []string
	for name, target := range formsSeen {
		switch name {
		case "FCALL":
			parts = append(parts, fmt.Sprintf("`FCALL %s` (the library loaded with FUNCTION LOAD, Redis 7 functions)", target))
		default:
			parts = append(parts, fmt.Sprintf("`%s %s` (a script per algorithm; no Redis 7 functions)", name, target))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// envShown are the variables that change what TestTable does, in the
// command line it prints.
var envShown = []string{"REDIS_URL", "BENCH_TABLE", "BENCH_ROUNDS", "BENCH_DURATION", "BENCH_ONLY", "BENCH_TABLE_OUT", "GOMAXPROCS", "GOGC", "GODEBUG", "GOFLAGS"}

// commandLine is the go test command that ran this binary: the variables
// above that are set (REDIS_URL without its password), and the test flags
// as go test passed them on (-test.x=v, printed -x=v).
func commandLine() string {
	var parts []string
	for _, k := range envShown {
		if v, ok := os.LookupEnv(k); ok {
			if k == "REDIS_URL" {
				v = redactURL(v)
			}
			parts = append(parts, k+"="+shellQuote(v))
		}
	}
	parts = append(parts, "go", "test")
	for _, a := range os.Args[1:] {
		if f, ok := strings.CutPrefix(a, "-test."); ok {
			if strings.HasPrefix(f, "paniconexit0") || strings.HasPrefix(f, "testlogfile") || strings.HasPrefix(f, "gocoverdir") {
				continue // go test's own plumbing
			}
			a = "-" + f
		}
		parts = append(parts, shellQuote(a))
	}
	return "cd bench && " + strings.Join(parts, " ")
}

// binaryLine is the test binary's own command line.
func binaryLine() string {
	parts := []string{filepath.Base(os.Args[0])}
	for _, a := range os.Args[1:] {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	return u.String()
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		safe := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=./:,@+%", r)
		return !safe
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// gitCommit is `git rev-parse --short HEAD`, and whether the work tree has
// changes (git status, with GIT_OPTIONAL_LOCKS=0 so that it writes
// nothing), or why it is unknown.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return fmt.Sprintf("unknown (git rev-parse: %v)", err)
	}
	commit := "`" + strings.TrimSpace(string(out)) + "`"
	cmd := exec.Command("git", "status", "--porcelain", "--untracked-files=normal", "--", "..")
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
	st, err := cmd.Output()
	if err != nil {
		return commit + " (git status failed: the work tree may differ)"
	}
	var modified, untracked int
	var dirs []string
	for line := range strings.Lines(string(st)) {
		line = strings.TrimRight(line, "\r\n")
		if len(line) < 4 {
			continue
		}
		if strings.HasPrefix(line, "??") {
			untracked++
		} else {
			modified++
		}
		p := strings.TrimPrefix(filepath.ToSlash(line[3:]), "../")
		if i := strings.IndexByte(p, '/'); i > 0 {
			p = p[:i]
		}
		if !slices.Contains(dirs, p) {
			dirs = append(dirs, p)
		}
	}
	if modified+untracked == 0 {
		return commit + ", clean work tree"
	}
	return fmt.Sprintf("%s plus uncommitted changes: %d modified and %d untracked paths (in %s)", commit, modified, untracked, strings.Join(dirs, ", "))
}
