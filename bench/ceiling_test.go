package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
)

// ceilingCall is the script call of one allowed decision of an
// implementation, as captured from it (see captureOurs, capturePeer), and
// the placeholder key it was captured for.
type ceilingCall struct {
	name    string
	ours    bool
	capture func() (call scriptCall, placeholder string, err error)
}

var ceilingCalls = []ceilingCall{
	{"our token bucket (plain)", true, func() (scriptCall, string, error) {
		q := allowed.quota()
		return captureOurs(core.Limit{Rate: q.rate, Period: q.period}, core.WithBatching(1))
	}},
	{"redis_rate's GCRA", false, func() (scriptCall, string, error) { return capturePeer(redisRate) }},
	{"ulule's fixed window", false, func() (scriptCall, string, error) { return capturePeer(ulule) }},
}

// capturePeer returns the call one allowed decision of im makes, once its
// script is in Redis' cache (an EVALSHA), on the capture client, and the
// placeholder key it was made for. The call's keys are deleted.
func capturePeer(im impl) (scriptCall, string, error) {
	c, err := clientNamed("capture")
	if err != nil {
		return scriptCall{}, "", err
	}
	key := fmt.Sprintf("%s:capture%d", runPrefix, nsSeq.Add(1))
	d, release, err := im.make(c.rdb, allowed.quota(), []string{key})
	if err != nil {
		return scriptCall{}, "", err
	}
	defer release()
	call, err := captureSettled(false, func(ctx context.Context) error {
		_, err := d(ctx, 0)
		return err
	})
	if derr := unlinkKeys(call.keys()...); err == nil && derr != nil {
		err = derr
	}
	return call, key, err
}

// benchLibrary is the function library the ceiling loads for its FCALL
// of return 1 (Redis 7), named for this run; dropBenchFunctions deletes it.
var (
	benchLibrary = fmt.Sprintf("rlbench_%d_%d", os.Getpid(), time.Now().UnixNano())
	benchLoaded  atomic.Bool
)

// loadBenchFunction loads benchLibrary, with one function returning 1, and
// returns the function's name.
func loadBenchFunction(ctx context.Context) (string, error) {
	rdb, err := adminClient()
	if err != nil {
		return "", err
	}
	fn := benchLibrary + "_one"
	src := "#!lua name=" + benchLibrary + "\nredis.register_function('" + fn + "', function() return 1 end)\n"
	if err := rdb.FunctionLoadReplace(ctx, src).Err(); err != nil {
		return "", err
	}
	benchLoaded.Store(true)
	return fn, nil
}

// dropBenchFunctions deletes benchLibrary if this run loaded it.
func dropBenchFunctions() error {
	if !benchLoaded.Load() {
		return nil
	}
	rdb, err := adminClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.FunctionDelete(ctx, benchLibrary).Err(); err != nil {
		return fmt.Errorf("FUNCTION DELETE %s: %w", benchLibrary, err)
	}
	benchLoaded.Store(false)
	return nil
}

// ceiling is one redis-benchmark run: a command with 256 clients,
// pipelined pipeline deep, its requests per second, the server's CPU per
// request (NaN when unknown; note "*" when other clients' commands were in
// the window) and the commandstats usec per script call.
type ceiling struct {
	what     string
	ours     bool // our script (else a peer's, or return 1)
	pipeline int
	rps      float64
	cpu      float64
	note     string
	script   float64
}

var rpsRe = regexp.MustCompile(`([0-9.]+) requests per second`)

// respLen is the size of args sent as one RESP command (redis-benchmark
// replaces __rand_int__ by as many digits).
func respLen(args []string) int64 {
	n := len(fmt.Sprintf("*%d\r\n", len(args)))
	for _, a := range args {
		n += len(fmt.Sprintf("$%d\r\n", len(a))) + len(a) + 2
	}
	return int64(n)
}

// ceilingRequests is how many calls each redis-benchmark run makes: 100000
// per second of BENCH_DURATION (so 100000 at the default 1s), at least
// 10000.
func ceilingRequests(d time.Duration) int {
	return max(10000, int(100000*d.Seconds()))
}

// ceilingPipelines are the depths each command is sent at.
var ceilingPipelines = []int{16, 1}

// ceilingCommand is one command redis-benchmark sends.
type ceilingCommand struct {
	what    string
	ours    bool
	flags   []string // redis-benchmark's
	args    []string // the command
	pattern string   // the keys it writes, deleted after each run
	// reload puts the script or function back in Redis, for a server whose
	// cache another client flushed (SCRIPT FLUSH, FUNCTION FLUSH).
	reload func() error
}

// ceilingCommands captures the script call of one decision of ours (plain),
// of redis_rate and of ulule, each from the implementation (on Redis 7 ours
// is an FCALL), with its keys on 10000 random keys of this run; then
// EVALSHA of "return 1", and on Redis 7 FCALL of a function returning 1.
func ceilingCommands(t *testing.T) []ceilingCommand {
	var cmds []ceilingCommand
	for i, c := range ceilingCalls {
		call, placeholder, err := c.capture()
		if err != nil {
			t.Errorf("capturing %s: %v", c.name, err)
			continue
		}
		rand := fmt.Sprintf("%s:rb%d:__rand_int__", runPrefix, i)
		args := call.swap(placeholder, rand).strings()
		t.Logf("%s: %s", c.name, strings.Join(args, " "))
		recapture := c.capture // a decision of the implementation loads its script again
		cmds = append(cmds, ceilingCommand{fmt.Sprintf("`%s`, %s, 10000 keys", strings.ToUpper(call.name()), c.name), c.ours,
			[]string{"-r", "10000"}, args, fmt.Sprintf("*%s:rb%d:*", runPrefix, i), func() error { _, _, err := recapture(); return err }})
	}
	ctx := context.Background()
	rdb, err := adminClient()
	if err != nil {
		t.Fatal(err)
	}
	trivial, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	cmds = append(cmds, ceilingCommand{what: "`EVALSHA` of `return 1`", args: []string{"evalsha", trivial, "0"},
		reload: func() error { return rdb.ScriptLoad(context.Background(), "return 1").Err() }})
	if serverHasFunctions() {
		fn, err := loadBenchFunction(ctx)
		if err != nil {
			t.Errorf("FUNCTION LOAD of return 1: %v", err)
		} else {
			cmds = append(cmds, ceilingCommand{what: "`FCALL` of a function returning 1", args: []string{"fcall", fn, "0"},
				reload: func() error { _, err := loadBenchFunction(context.Background()); return err }})
		}
	}
	return cmds
}

// redisCeiling runs redis-benchmark against REDIS_URL's server: c, n
// times, with 256 clients, pipelined p deep, with the Redis readings
// bracketing the run; then deletes the keys it wrote. ok is false (and t
// has an error) when the run failed.
func redisCeiling(t *testing.T, path string, c ceilingCommand, p, n int) (ceil ceiling, ok bool) {
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(opt.Addr, ":")
	args := []string{"-h", host, "-p", port, "--dbnum", strconv.Itoa(opt.DB), "-q", "-n", strconv.Itoa(n), "-c", "256"}
	if opt.Password != "" {
		args = append(args, "-a", opt.Password)
	}
	args = append(append(append(args, "-P", strconv.Itoa(p)), c.flags...), c.args...)
	var (
		stdout bytes.Buffer
		rd     redisDelta
		rerr   error
	)
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(path, args...)
		stdout.Reset()
		cmd.Stdout, cmd.Stderr = &stdout, &stdout
		win := redisWindow()
		err = cmd.Run()
		rd, rerr = win()
		if c.pattern != "" {
			if err := unlinkMatching(c.pattern); err != nil {
				t.Logf("deleting %s: %v", c.pattern, err)
			}
		}
		out := stdout.String()
		if err == nil || attempt > 0 || c.reload == nil || !strings.Contains(out, "NOSCRIPT") && !strings.Contains(out, "Function not found") {
			break
		}
		// Another client flushed the server's scripts or functions.
		t.Logf("redis-benchmark %s: %s; loading it again and retrying", c.what, strings.TrimSpace(out))
		if err := c.reload(); err != nil {
			t.Errorf("loading %s again: %v", c.what, err)
			return ceil, false
		}
	}
	if err != nil {
		t.Errorf("redis-benchmark %s: %v\n%s", strings.Join(args, " "), err, stdout.String())
		return ceil, false
	}
	m := rpsRe.FindAllStringSubmatch(stdout.String(), -1)
	if m == nil {
		t.Errorf("redis-benchmark %s: no requests per second in\n%s", strings.Join(args, " "), stdout.String())
		return ceil, false
	}
	rps, _ := strconv.ParseFloat(m[len(m)-1][1], 64)
	ceil = ceiling{what: fmt.Sprintf("redis-benchmark -c 256 -P %d, %s", p, c.what), ours: c.ours, pipeline: p, rps: rps,
		cpu: math.NaN(), script: math.NaN()}
	if rerr == nil {
		// redis-benchmark also sends a few CONFIG GETs: a trace.
		ceil.cpu = rd.cpu.Seconds() * 1e6 / float64(n)
		ceil.script = rd.scripts.usecPerCall()
		if rd.disturbed(int64(n)*respLen(c.args)) || rd.scripts.calls > int64(n) {
			ceil.note = "*"
		}
	}
	t.Logf("redis-benchmark %s: %.0f requests/s, Redis CPU %.2f%s µs each, commandstats %.2f µs per script call",
		strings.Join(args, " "), rps, ceil.cpu, ceil.note, ceil.script)
	return ceil, true
}

// TestCeilingReload checks that a redis-benchmark run of a call Redis no
// longer has (another client flushed its functions) loads it again and
// retries: an FCALL of the bench's own function, before it is loaded.
func TestCeilingReload(t *testing.T) {
	needRedis(t)
	path, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Skipf("no redis-benchmark: %v", err)
	}
	if !serverHasFunctions() {
		t.Skipf("Redis %s has no functions", redisVersion())
	}
	if err := dropBenchFunctions(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dropBenchFunctions() }()
	c := ceilingCommand{what: "`FCALL` of a function returning 1", args: []string{"fcall", benchLibrary + "_one", "0"},
		reload: func() error { _, err := loadBenchFunction(context.Background()); return err }}
	ceil, ok := redisCeiling(t, path, c, 1, 1000)
	if !ok || !(ceil.rps > 0) || !benchLoaded.Load() {
		t.Errorf("redisCeiling = %+v, %v; loaded %v", ceil, ok, benchLoaded.Load())
	}
}
