package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// TestInstructions counts the instructions the Redis server executes per
// decision, for every contender of the targets, on a redis-server that
// runs under valgrind's callgrind (bench/instructions.sh starts one and
// runs this test against it). Unlike time, an instruction count does not
// move with what else the machine is doing: the same binary, calls and
// state give the same count, to within the server's own background work
// (serverCron), so a difference of a few percent is real here where the
// timed tables cannot show it. It counts what a decision costs Redis,
// not what it waits for.
//
// BENCH_CALLGRIND_PID is the valgrind process, BENCH_CALLGRIND_OUT the
// --callgrind-out-file it writes its dumps beside; REDIS_URL is its
// address.
func TestInstructions(t *testing.T) {
	pid, out := os.Getenv("BENCH_CALLGRIND_PID"), os.Getenv("BENCH_CALLGRIND_OUT")
	if pid == "" || out == "" {
		t.Skip("BENCH_CALLGRIND_PID and BENCH_CALLGRIND_OUT are not set: run bench/instructions.sh")
	}
	needRedis(t)
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("BENCH_INSTRUCTIONS_N")); err == nil && v > 0 {
		n = v
	}
	contenders := []impl{oursPlain, oursBatched, oursFWPlain, oursFW, redisRate, ulule}
	// fresh: every decision on a key of its own, unprimed, so that each
	// starts a fixed window (ours and ulule's alike).
	type cell struct {
		g, keys int
		fresh   bool
	}
	cells := []cell{{1, 1, false}, {1, 1000, false}, {16, 1, false}, {16, 1000, false}, {1, n, true}}
	// Windows an hour long, which priming opens: every decision measured
	// falls inside one (the fixed windows' common case; the fresh cell
	// measures their starts). A token bucket's cost does not depend on it.
	q := quota{allowed.quota().rate, time.Hour}
	type result struct {
		ir, calls float64
		cmds      string // the commands the script ran, per decision
	}
	res := map[string]map[cell]result{}
	info, err := infoClient()
	if err != nil {
		t.Fatal(err)
	}
	// Every algorithm alone, each decision its own call (the first cell
	// only): what a lone decision costs, by algorithm.
	var lone []impl
	for _, alg := range algorithms {
		if alg != core.TokenBucket && alg != core.FixedWindow {
			lone = append(lone, oursAlg(alg, false))
		}
	}
	for _, c := range cells {
		list := contenders
		switch {
		case c == cells[0]:
			list = append(append([]impl(nil), contenders...), lone...)
		case c.fresh:
			list = []impl{oursFWPlain, ulule}
		}
		for _, im := range list {
			cl := clientFor(t, im.client)
			keys, pattern := keySet(c.keys)
			d, release, err := im.make(cl.rdb, q, keys)
			if err != nil {
				t.Fatalf("%s: %v", im.name, err)
			}
			if !c.fresh {
				prime(c.g, c.keys, 2, d)
			}
			if !cl.ctr.quiesce() {
				t.Logf("%s: the client did not quiesce", im.name)
			}
			var ir float64
			var derr error
			var before, after map[string]int64
			s := run(c.g, int64(n), 0, c.keys, d, cl.ctr,
				func() {
					before = commandCalls(info)
					derr = callgrind(pid, "-z")
				},
				func() {
					if derr == nil {
						ir, derr = dumpInstructions(pid, out)
					}
					after = commandCalls(info)
				})
			release()
			if err := unlinkMatching(pattern); err != nil {
				t.Fatal(err)
			}
			if derr != nil {
				t.Fatalf("%s: callgrind: %v", im.name, derr)
			}
			if s.errs > 0 {
				t.Fatalf("%s g=%d keys=%d: %d decisions failed, the first: %v", im.name, c.g, c.keys, s.errs, s.firstErr)
			}
			r := result{ir: ir / float64(s.ops), calls: float64(s.cmds) / float64(s.ops), cmds: perDecision(before, after, s.ops)}
			if res[im.name] == nil {
				res[im.name] = map[cell]result{}
			}
			res[im.name][c] = r
			t.Logf("g=%d/keys=%d %s: %.0f instructions per decision, %.3f calls per decision, commands %s", c.g, c.keys, im.name, r.ir, r.calls, r.cmds)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| contender | cell | Redis calls per decision | Redis instructions per decision | ÷ redis_rate | ÷ ulule | commands run per decision |\n|---|---|--:|--:|--:|--:|---|\n")
	for _, c := range cells {
		rr, ul := res[redisRate.name][c].ir, res[ulule.name][c].ir
		list, name := contenders, fmt.Sprintf("g=%d/keys=%d", c.g, c.keys)
		switch {
		case c == cells[0]:
			list = append(append([]impl(nil), contenders...), lone...)
		case c.fresh:
			list, name = []impl{oursFWPlain, ulule}, "window starts"
		}
		for _, im := range list {
			r := res[im.name][c]
			byRR := "" // (not measured in the fresh cell)
			if rr > 0 {
				byRR = fmt.Sprintf("%.2f", r.ir/rr)
			}
			fmt.Fprintf(&b, "| %s | %s | %.2f | %.0f | %s | %.2f | %s |\n", im.name, name, r.calls, r.ir, byRR, r.ir/ul, r.cmds)
		}
	}
	t.Log(b.String())
	if path := os.Getenv("BENCH_TABLE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// commandCalls is INFO commandstats: the calls of each command so far,
// those a script or function ran included.
func commandCalls(rdb *redis.Client) map[string]int64 {
	out := map[string]int64{}
	v, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return out
	}
	for _, line := range strings.Split(v, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// perDecision spells the commands run between before and after, per
// decision, the script calls themselves and the harness' own (INFO,
// PING) left out: "hincrby 1.00, pttl 1.00".
func perDecision(before, after map[string]int64, ops int64) string {
	var parts []string
	for name, n := range after {
		switch name {
		case "fcall", "fcall_ro", "evalsha", "eval", "info", "ping", "function|load", "function|list", "script|load", "script|exists":
			continue
		}
		if d := n - before[name]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(d)/float64(max(ops, 1))))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// oursFWPlain is the fixed window, every decision its own call: the lone
// call's cost against ulule's.
var oursFWPlain = ours("ours/fixed_window/plain", "ours-plain", core.FixedWindow, core.WithBatching(1))

// callgrind runs callgrind_control with args on pid.
func callgrind(pid string, args ...string) error {
	out, err := exec.Command("callgrind_control", append(args, pid)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s %s: %v: %s", strings.Join(args, " "), pid, err, out)
	}
	return nil
}

// dumpInstructions has pid dump its counts since they were last zeroed and
// returns the instructions in the dump (its "summary:" line).
func dumpInstructions(pid, out string) (float64, error) {
	old, _ := filepath.Glob(out + ".*")
	for _, f := range old {
		_ = os.Remove(f)
	}
	if err := callgrind(pid, "-d"); err != nil {
		return 0, err
	}
	// callgrind_control returns once the dump is requested; valgrind writes
	// it when the server next runs.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		files, _ := filepath.Glob(out + ".*")
		for _, f := range files {
			if v, ok := summary(f); ok {
				return v, nil
			}
		}
	}
	return 0, fmt.Errorf("no dump beside %s within 10s", out)
}

// summary reads the total of a complete callgrind dump.
func summary(path string) (float64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer func() { _ = f.Close() }() // read only
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var total float64
	found := false
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "totals:"); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, false
			}
			total, found = x, true
		}
	}
	return total, found
}

// TestCallgrindSummary: a dump's total is read from its totals line, and a
// dump still being written (no totals line yet) is not read at all.
func TestCallgrindSummary(t *testing.T) {
	dir := t.TempDir()
	done := filepath.Join(dir, "done")
	partial := filepath.Join(dir, "partial")
	head := "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 1234567\nfl=(1) x.c\nfn=(1) f\n16 99\n"
	if err := os.WriteFile(done, []byte(head+"\ntotals: 1234567\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(partial, []byte(head), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, ok := summary(done); !ok || v != 1234567 {
		t.Errorf("summary(done) = %v, %v; want 1234567, true", v, ok)
	}
	if v, ok := summary(partial); ok {
		t.Errorf("summary(partial) = %v, true; want no total", v)
	}
}
