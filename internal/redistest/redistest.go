// Package redistest gives tests their Redis: a miniredis with a controlled
// clock, the real Redis named by REDIS_URL, the real Redis Cluster named
// by REDIS_CLUSTER_ADDRS, or a redis-server of the test's own
// (StartServer), which the test may kill, pause and restart.
//
// REDIS_SERVER names the server program StartServer runs: a path or a name
// on PATH, redis-server by default. Set it to run the suites against
// another release or another server (REDIS_SERVER=valkey-server, say);
// StartServer passes only the options that server's version knows.
//
// A real-Redis test without its variable is skipped with a message that
// says so, except under CI (CI=true), where a missing Redis fails the test:
// a green CI run must never mean the real-Redis suites did not run.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Epoch is the time miniredis starts at in Mini: a fixed, recent instant, so
// runs are reproducible.
var Epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Mini starts a miniredis whose TIME is Epoch until the test moves it with
// SetTime, and a client for it. Both are closed when the test ends.
func Mini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(Epoch)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return mr, rdb
}

// Real returns a client for REDIS_URL; when it is unset, for a
// redis-server the test binary starts once (shared.go) if the server
// program is on PATH; else it skips the test (fails it under CI). The
// caller should use keys unique to the test, or FlushDB: the database is
// shared with whatever else runs.
func Real(t testing.TB) *redis.Client {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if bin, ok := serverOnPath(); url == "" && ok {
		var err error
		if url, err = sharedURL(bin); err != nil {
			t.Fatalf("REDIS_URL is not set, and starting %s failed: %v", bin, err)
		}
	}
	if url == "" {
		missing(t, "REDIS_URL", "a real Redis, e.g. REDIS_URL=redis://127.0.0.1:6379/0, or redis-server on PATH")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("REDIS_URL=%q: %v", url, err)
	}
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ping(t, rdb, url)
	return rdb
}

// ClusterAddrs returns the seed addresses in REDIS_CLUSTER_ADDRS; when it
// is unset, those of a Cluster of the test's own (StartCluster) if
// redis-server is on the PATH, as the single-server suites start theirs;
// else it skips the test (fails it under CI).
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	if ownCluster() {
		return ownClusterAddrs(t)
	}
	addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		missing(t, "REDIS_CLUSTER_ADDRS", "a Redis Cluster, e.g. REDIS_CLUSTER_ADDRS=127.0.0.1:7001,127.0.0.1:7002 (.ci/run starts one)")
	}
	return strings.Split(addrs, ",")
}

// Cluster returns a ClusterClient for REDIS_CLUSTER_ADDRS, or skips the test
// when it is unset (fails it under CI).
func Cluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ping(t, rdb, strings.Join(addrs, ","))
	return rdb
}

func missing(t testing.TB, env, what string) {
	t.Helper()
	Missing(t, "%s is not set; this test needs %s", env, what)
}

func ping(t testing.TB, rdb redis.UniversalClient, where string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s does not answer: %v", where, err)
	}
}

// NeedFunctions skips a test of Redis functions (FUNCTION, FCALL) on a
// server that refuses them, such as Redis 6.2, where the Limiter decides
// by script instead: such a server is no missing prerequisite, so the test
// is skipped under CI as well.
func NeedFunctions(t testing.TB, rdb redis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := rdb.Do(ctx, "function", "list", "libraryname", "redistest-probe").Err()
	var refused redis.Error
	if !errors.As(err, &refused) {
		if err != nil {
			t.Fatalf("asking the server whether it has FUNCTION: %v", err)
		}
		return
	}
	msg := fmt.Sprintf("the server refuses FUNCTION (%v): Redis functions need Redis 7 or Valkey", err)
	skips.Lock()
	if skips.reasons == nil {
		skips.reasons = map[string]int{}
	}
	skips.reasons[msg]++
	skips.Unlock()
	t.Skipf("SKIPPED: %s", msg)
}

// skips counts the tests skipped for want of a Redis, by reason.
var skips struct {
	sync.Mutex
	reasons map[string]int
	reduced map[string]int
}

// Missing skips a test whose prerequisite (a Redis, redis-server) is
// absent, loudly (see Main), or fails it under CI, where every test must
// run: a green CI must never mean a suite did not run.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("under CI=%s: %s; this test must not be skipped there", os.Getenv("CI"), msg)
	}
	skips.Lock()
	if skips.reasons == nil {
		skips.reasons = map[string]int{}
	}
	skips.reasons[msg]++
	skips.Unlock()
	t.Skipf("SKIPPED: %s", msg)
}

// Long reports whether the long suites run in full: under CI, or when
// REDIS_URL names a real Redis. Otherwise a suite may cut its work (say
// so with Reduced) to keep the default run short.
func Long() bool { return os.Getenv("CI") != "" || os.Getenv("REDIS_URL") != "" }

// Reduced notes, for Main's summary, that a test ran a reduced workload
// because Long is false.
func Reduced(t testing.TB, what string) {
	t.Helper()
	skips.Lock()
	if skips.reduced == nil {
		skips.reduced = map[string]int{}
	}
	skips.reduced[what]++
	skips.Unlock()
}

// MainLong is Main for a package of long suites: without Long it runs
// nothing, and says so, like a skip.
func MainLong(m *testing.M) {
	if !Long() {
		// The line testing prints when -run matches nothing: go test then
		// ends the package's "ok" line with "[no tests to run]", the one
		// word of a passing package that reaches a file too
		// (TestMainLongSaysNoTestsRan).
		fmt.Fprintln(os.Stderr, "testing: warning: no tests to run")
		printSummary(fmt.Sprintf("%s: SKIPPED every test: a long suite, run under CI=true or with REDIS_URL set (it starts its own redis-server processes)\n", pkgName()))
		os.Exit(0)
	}
	Main(m)
}

// Main runs a package's tests, then says which were skipped for want of a
// Redis, one line per reason. go test shows nothing of a package that
// passes unless -v is given, so the lines go to the terminal (/dev/tty)
// when there is one, and to stderr otherwise.
func Main(m *testing.M) {
	code := m.Run()
	skips.Lock()
	reasons := make([]string, 0, len(skips.reasons))
	for r := range skips.reasons {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	var b strings.Builder
	for _, r := range reasons {
		fmt.Fprintf(&b, "%s: SKIPPED %d tests: %s\n", pkgName(), skips.reasons[r], r)
	}
	reduced := make([]string, 0, len(skips.reduced))
	for r := range skips.reduced {
		reduced = append(reduced, r)
	}
	sort.Strings(reduced)
	for _, r := range reduced {
		fmt.Fprintf(&b, "%s: REDUCED %d tests: %s (CI=true or REDIS_URL runs them in full)\n", pkgName(), skips.reduced[r], r)
	}
	skips.Unlock()
	printSummary(b.String())
	os.Exit(code)
}

// printSummary writes the lines where they will be seen: into the test's
// own output under go test -json (gotestsum, through which CI runs the README's test command,
// prints it), else to the terminal (/dev/tty) when there is one, since go
// test hides the output of a package that passes, and to stderr
// otherwise, or when writing to the terminal fails: a skip must never go
// unsaid.
func printSummary(lines string) {
	if lines == "" {
		return
	}
	if slices.Contains(os.Args[1:], "-test.v=test2json") {
		_, _ = io.WriteString(os.Stdout, lines)
		return
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		_, werr := io.WriteString(tty, lines)
		if cerr := tty.Close(); werr == nil && cerr == nil {
			return
		}
	}
	// The last place to say it: a failed write here has nowhere to go.
	_, _ = io.WriteString(os.Stderr, lines)
}

// pkgName is the test binary's package, from its name ("core.test").
func pkgName() string {
	name := os.Args[0]
	if i := strings.LastIndexAny(name, "/\\"); i >= 0 {
		name = name[i+1:]
	}
	return strings.TrimSuffix(name, ".test")
}

// LogBuffer collects log output that goroutines write while a test reads
// it: a Limiter logs from its own goroutines (the first load, the health
// check), which a plain bytes.Buffer would race with.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Now is Redis' clock (TIME): what its windows are aligned on and its
// expiries judged by.
func Now(tb testing.TB, rdb redis.UniversalClient) time.Time {
	tb.Helper()
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		tb.Fatalf("TIME: %v", err)
	}
	return tm
}

// highs is the latest time SetTime set on each miniredis.
var highs sync.Map // *miniredis.Miniredis -> time.Time

// SetTime sets mr's clock to t, and counts its keys' TTLs down by as much
// as t passes the latest time it set, as a real Redis' keys expire with
// its clock: mr.SetTime alone leaves every TTL where it was, so a window
// that ends with its key's expiry (a FixedWindow's) would never end. A
// step back moves the clock only; a real Redis' expiries are instants, so
// its keys do not come back either.
func SetTime(mr *miniredis.Miniredis, t time.Time) {
	mr.SetTime(t)
	prev, _ := highs.Load(mr)
	high, ok := prev.(time.Time)
	if !ok {
		high = Epoch
	}
	if d := t.Sub(high); d > 0 {
		mr.FastForward(d)
		highs.Store(mr, t)
	}
}
