package bench

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
	"github.com/ulule/limiter/v3"
	sredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// evalCapture is a go-redis hook that keeps the first EVALSHA a client
// sends: the exact script call an implementation makes for one decision.
type evalCapture struct {
	mu   sync.Mutex
	args []string
}

func (c *evalCapture) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *evalCapture) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			c.mu.Lock()
			if c.args == nil {
				for _, a := range cmd.Args() {
					c.args = append(c.args, fmt.Sprint(a))
				}
			}
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (c *evalCapture) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// captureEval makes one decision with the implementation that decide
// builds on a fresh client, for key, and returns the EVALSHA it sent
// ("evalsha", sha, numkeys, keys..., args...). Its script is then in
// Redis' script cache (an implementation loads it on NOSCRIPT).
func captureEval(decide func(ctx context.Context, rdb *redis.Client, key string) error) ([]string, error) {
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	var c evalCapture
	rdb.AddHook(&c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := decide(ctx, rdb, runPrefix+":capture"); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.args) < 4 {
		return nil, fmt.Errorf("no EVALSHA captured: %q", c.args)
	}
	return c.args, nil
}

// ceilingCalls are the script calls of one allowed decision of each
// implementation, as captured from it.
var ceilingCalls = []struct {
	name   string
	decide func(ctx context.Context, rdb *redis.Client, key string) error
}{
	{"our token bucket (plain)", func(ctx context.Context, rdb *redis.Client, key string) error {
		l, err := core.New(rdb, core.WithBatching(1))
		if err != nil {
			return err
		}
		_, err = l.Allow(ctx, key, core.Limit{Rate: allowed.quota().rate, Period: allowed.quota().period})
		return err
	}},
	{"redis_rate's GCRA", func(ctx context.Context, rdb *redis.Client, key string) error {
		q := allowed.quota()
		_, err := redis_rate.NewLimiter(rdb).Allow(ctx, key, redis_rate.Limit{Rate: q.rate, Burst: q.rate, Period: q.period})
		return err
	}},
	{"ulule's fixed window", func(ctx context.Context, rdb *redis.Client, key string) error {
		store, err := sredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
		if err != nil {
			return err
		}
		q := allowed.quota()
		_, err = limiter.New(store, limiter.Rate{Period: q.period, Limit: int64(q.rate)}).Get(ctx, key)
		return err
	}},
}

// ceiling is one redis-benchmark run: a command with 256 clients,
// pipelined pipeline deep, its requests per second and the server's CPU per
// request.
type ceiling struct {
	what     string
	ours     bool // our script (else a peer's, or return 1)
	pipeline int
	rps      float64
	cpu      string
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

// ceilingRequests is how many calls each redis-benchmark run makes.
const ceilingRequests = 100000

// redisCeilings runs redis-benchmark against REDIS_URL's server: the
// script call of one decision of ours (plain), of redis_rate and of ulule,
// each as captured from the implementation, on 10000 random keys, and
// EVALSHA of "return 1"; with 256 clients, pipelined 16 deep and not
// pipelined. It calls then with each result. The Redis readings bracket
// each run. It logs and does nothing when redis-benchmark is not
// installed.
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
	base := []string{"-h", host, "-p", port, "--dbnum", strconv.Itoa(opt.DB), "-q", "-n", strconv.Itoa(ceilingRequests), "-c", "256"}
	if opt.Password != "" {
		base = append(base, "-a", opt.Password)
	}
	type command struct {
		what  string
		ours  bool
		flags []string // redis-benchmark's
		args  []string // the command
	}
	var cmds []command
	for i, c := range ceilingCalls {
		args, err := captureEval(c.decide)
		if err != nil {
			t.Errorf("capturing %s: %v", c.name, err)
			continue
		}
		// Every key of the call on 10000 random keys of this run.
		nkeys, _ := strconv.Atoi(args[2])
		for k := 3; k < 3+nkeys && k < len(args); k++ {
			args[k] = strings.ReplaceAll(args[k], runPrefix+":capture", fmt.Sprintf("%s:rb%d:__rand_int__", runPrefix, i))
		}
		t.Logf("%s: %s", c.name, strings.Join(args[2:], " "))
		cmds = append(cmds, command{"`EVALSHA`, " + c.name + ", 10000 keys", i == 0, []string{"-r", "10000"}, args})
	}
	trivial, err := clientFor(t, "ceiling").rdb.ScriptLoad(context.Background(), "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	cmds = append(cmds, command{"`EVALSHA` of `return 1`", false, nil, []string{"evalsha", trivial, "0"}})
	for _, c := range cmds {
		for _, p := range []int{16, 1} {
			args := append(append(append([]string{}, base...), "-P", strconv.Itoa(p)), c.flags...)
			args = append(args, c.args...)
			cmd := exec.Command(path, args...)
			var stdout bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stdout
			win := redisWindow()
			err := cmd.Run()
			rd, rerr := win()
			if err != nil {
				t.Errorf("redis-benchmark %s: %v\n%s", strings.Join(args, " "), err, stdout.String())
				continue
			}
			m := rpsRe.FindAllStringSubmatch(stdout.String(), -1)
			if m == nil {
				t.Errorf("redis-benchmark %s: no requests per second in\n%s", strings.Join(args, " "), stdout.String())
				continue
			}
			rps, _ := strconv.ParseFloat(m[len(m)-1][1], 64)
			ceil := ceiling{what: fmt.Sprintf("redis-benchmark -c 256 -P %d, %s", p, c.what), ours: c.ours, pipeline: p, rps: rps, cpu: "n/a"}
			if rerr == nil {
				// redis-benchmark also sends a few CONFIG GETs: a trace.
				ceil.cpu = fmt.Sprintf("%.2f", rd.cpu.Seconds()*1e6/ceilingRequests)
				if rd.disturbed(ceilingRequests * respLen(c.args)) {
					ceil.cpu += "*"
				}
			}
			t.Logf("redis-benchmark %s: %.0f requests/s, Redis CPU %s µs each", strings.Join(args, " "), rps, ceil.cpu)
			then(ceil)
		}
	}
}

// TestOneCallScript checks that oneCallScript and tokenBucketArgs, which
// go-redis alone runs, are the script call core makes for one plain
// decision.
func TestOneCallScript(t *testing.T) {
	needRedis(t)
	args, err := captureEval(ceilingCalls[0].decide)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unlinkMatching("*" + runPrefix + ":capture*") }()
	src, err := oneCallScript(core.TokenBucket)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte(src))
	want := []string{"evalsha", hex.EncodeToString(sum[:]), "1", tokenBucketKey(runPrefix + ":capture")}
	for _, a := range tokenBucketArgs(allowed.quota()) {
		want = append(want, fmt.Sprint(a))
	}
	if strings.Join(args, " ") != strings.Join(want, " ") {
		t.Errorf("core sends\n\t%q\nthe bench's copy is\n\t%q", args, want)
	}
}
