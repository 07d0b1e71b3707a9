package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
	"github.com/ulule/limiter/v3"
	sredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// quota is one limit, expressed for every implementation.
type quota struct {
	rate   int
	period time.Duration
}

// traffic is how the load compares with the limit.
type traffic uint8

const (
	// allowed: a limit far above any load here (10M/s per key).
	allowed traffic = iota
	// denied: a tiny limit (1 per minute per key, spent before measuring):
	// ~100% denied.
	denied
	// abusive: one key limited to 1000/s under as much load as the
	// goroutines make: ~95% denied when every decision asks Redis.
	abusive
	// abusive100: the same at 100/s.
	abusive100
)

func (t traffic) String() string {
	return [...]string{"allowed", "denied", "abusive-1000/s", "abusive-100/s"}[t]
}

// benchName is t without a slash: allowed, denied, abusive1000, abusive100.
func (t traffic) benchName() string {
	return [...]string{"allowed", "denied", "abusive1000", "abusive100"}[t]
}

func (t traffic) quota() quota {
	switch t {
	case denied:
		return quota{1, time.Minute}
	case abusive:
		return quota{1000, time.Second}
	case abusive100:
		return quota{100, time.Second}
	}
	return quota{10_000_000, time.Second}
}

// scenario is one cell of the matrix: goroutines, distinct keys, traffic.
type scenario struct {
	g, keys int
	traffic traffic
}

func (s scenario) String() string {
	return fmt.Sprintf("g=%d/keys=%d/%s", s.g, s.keys, s.traffic)
}

// benchName is s in benchmark names, every part key=value (for
// benchstat's /g, /keys and /traffic).
func (s scenario) benchName() string {
	return fmt.Sprintf("g=%d/keys=%d/traffic=%s", s.g, s.keys, s.traffic.benchName())
}

// matrix is every scenario the issue asks for.
var matrix = func() []scenario {
	var m []scenario
	for _, t := range []traffic{allowed, denied} {
		for _, k := range []int{1, 10000} {
			for _, g := range []int{1, 16, 256} {
				m = append(m, scenario{g, k, t})
			}
		}
	}
	return m
}()

// impl is one rate limiter under test. make returns its decider for keys
// under q, and what releases it (a Limiter's Close); client names the
// go-redis client (pool and call counter) it uses.
type impl struct {
	name, client string
	make         func(rdb *redis.Client, q quota, keys []string) (d decider, release func(), err error)
}

// benchName is im's name in benchmark names: impl=<it>.
func (im impl) benchName() string { return strings.ReplaceAll(im.name, "/", "-") }

// benchTimeout replaces core's default timeout (50ms): at 256 goroutines on
// a shared 2-core machine a queued decision can take longer, and a timeout
// would count as an error, not a decision. The cost per call (a context
// with a deadline) is the same.
const benchTimeout = time.Second

// newLimiter is core.New with the bench's timeout, once the Limiter's
// background work at New is done: its first health check (INFO) has
// answered, and its decisions reach Redis in their settled form (FCALL of
// its library on Redis 7, once the background FUNCTION LOAD is through;
// see awaitForm). What the pool's new connections start later is waited
// out after priming (see setup).
func newLimiter(rdb *redis.Client, opts ...core.Option) (*core.Limiter, error) {
	l, err := core.New(rdb, append([]core.Option{core.WithTimeout(benchTimeout)}, opts...)...)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(quietMax); l.Health().Checked.IsZero(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			_ = l.Close()
			return nil, fmt.Errorf("no health check %v after core.New", quietMax)
		}
	}
	c, err := awaitForm(l)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	noteForm(c)
	return l, nil
}

func ours(name, client string, alg core.Algorithm, opts ...core.Option) impl {
	limit := func(q quota) core.Limit { return core.Limit{Algorithm: alg, Rate: q.rate, Period: q.period} }
	return oursDoing(name, client, limit, allowOnce, opts...)
}

// oursDoing is a contender of ours whose every request is do, on a Limiter
// made with opts, under limit(q).
func oursDoing(name, client string, limit func(quota) core.Limit, do func(ctx context.Context, l *core.Limiter, key string, lim core.Limit) (bool, error), opts ...core.Option) impl {
	return impl{name: name, client: client, make: func(rdb *redis.Client, q quota, keys []string) (decider, func(), error) {
		lim := limit(q)
		if err := lim.Validate(); err != nil {
			return nil, nil, err
		}
		l, err := newLimiter(rdb, opts...)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, i int) (bool, error) {
			return do(ctx, l, keys[i], lim)
		}, func() { _ = l.Close() }, nil
	}}
}

func allowOnce(ctx context.Context, l *core.Limiter, key string, lim core.Limit) (bool, error) {
	r, err := l.Allow(ctx, 1, lim.For(key))
	return r.Allowed, err
}

// Our contenders: every decision its own script call (plain), the default
// (concurrent decisions batched into one script call per Redis node), and
// the default with the deny cache. Each has a go-redis client of its own.
var (
	oursPlain   = ours("ours/plain", "ours-plain", core.TokenBucket, core.WithBatching(1))
	oursBatched = ours("ours/batched", "ours-batched", core.TokenBucket)
	oursBDC     = ours("ours/batched+denycache", "ours-batched-dc", core.TokenBucket, core.WithDenyCache(1<<17))
	// oursPDC is the plain client with the deny cache: the deny cache
	// table's reference, one Redis call per decision it does not answer.
	oursPDC = ours("ours/plain+denycache", "ours-plain-dc", core.TokenBucket, core.WithBatching(1), core.WithDenyCache(1<<17))
	// oursFW is the default Limiter on a fixed window: ulule's algorithm,
	// the targets' comparison with it.
	oursFW  = ours("ours/fixed_window", "ours-fw", core.FixedWindow)
	oursAll = []impl{oursPlain, oursBatched, oursBDC}
)

// modeName names a Limiter that batches, or one that does not.
func modeName(batched bool) string {
	if batched {
		return "batched"
	}
	return "plain"
}

// oursAlg is algorithm alg, plain or batched.
func oursAlg(alg core.Algorithm, batched bool) impl {
	if batched {
		return ours("ours/"+alg.String()+"/batched", "ours-batched", alg)
	}
	return ours("ours/"+alg.String()+"/plain", "ours-plain", alg, core.WithBatching(1))
}

var algorithms = []core.Algorithm{core.TokenBucket, core.SlidingWindow, core.SlidingWindowCounter, core.FixedWindow, core.LeakyBucket}

// redisRate is go-redis/redis_rate v10 (GCRA), Allow with the same quota
// (PerSecond(n) is Limit{Rate: n, Burst: n, Period: time.Second}).
var redisRate = impl{name: "redis_rate", client: "redis_rate", make: func(rdb *redis.Client, q quota, keys []string) (decider, func(), error) {
	rl := redis_rate.NewLimiter(rdb)
	lim := redis_rate.Limit{Rate: q.rate, Burst: q.rate, Period: q.period}
	return func(ctx context.Context, i int) (bool, error) {
		r, err := rl.Allow(ctx, keys[i], lim)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}, func() {}, nil
}}

// ulule is ulule/limiter v3 with its Redis store (a fixed window), Get.
var ulule = impl{name: "ulule", client: "ulule", make: func(rdb *redis.Client, q quota, keys []string) (decider, func(), error) {
	store, err := sredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
	if err != nil {
		return nil, nil, err
	}
	l := limiter.New(store, limiter.Rate{Period: q.period, Limit: int64(q.rate)})
	return func(ctx context.Context, i int) (bool, error) {
		c, err := l.Get(ctx, keys[i])
		return !c.Reached, err
	}, func() {}, nil
}}

// goredis is the floor under our token bucket: the call one plain
// decision makes, captured from a real Limiter for the cell's quota (see
// captureOurs: an FCALL of its library on Redis 7, an EVALSHA elsewhere),
// replayed through go-redis alone with each key swapped in and the
// arguments built beforehand: the same go-redis method core calls
// (FCall, EvalSha; Do for any other command), so every allocation it
// reports is go-redis' own. Our allocs/op minus this one is what the core
// adds. TestOneCallScript checks the replay against a fresh capture.
var goredis = impl{name: "goredis", client: "goredis", make: func(rdb *redis.Client, q quota, keys []string) (decider, func(), error) {
	call, placeholder, err := captureOurs(core.Limit{Rate: q.rate, Period: q.period}, core.WithBatching(1))
	if err != nil {
		return nil, nil, err
	}
	calls := make([]scriptCall, len(keys))
	rkeys := make([][]string, len(keys))
	tails := make([][]any, len(keys))
	for i, k := range keys {
		calls[i] = call.swap(placeholder, k)
		rkeys[i], tails[i] = calls[i].keys(), calls[i].tail()
	}
	target := call.target()
	var do func(ctx context.Context, i int) *redis.Cmd
	switch call.name() {
	case "fcall":
		do = func(ctx context.Context, i int) *redis.Cmd { return rdb.FCall(ctx, target, rkeys[i], tails[i]...) }
	case "evalsha":
		do = func(ctx context.Context, i int) *redis.Cmd { return rdb.EvalSha(ctx, target, rkeys[i], tails[i]...) }
	default:
		do = func(ctx context.Context, i int) *redis.Cmd { return rdb.Do(ctx, calls[i].args...) }
	}
	return func(ctx context.Context, i int) (bool, error) {
		v, err := do(ctx, i).Result()
		if err != nil {
			return false, err
		}
		// The driver's reply: the clock, then per request granted,
		// remaining, retry_after, reset_after, delay (core/scripts/driver.lua).
		vals, ok := v.([]any)
		if !ok || len(vals) < 6 {
			return false, fmt.Errorf("goredis: reply %v, want the clock and 5 integers", v)
		}
		granted, ok := vals[1].(int64)
		if !ok {
			return false, fmt.Errorf("goredis: reply %v, want integers", v)
		}
		return granted > 0, nil
	}, func() {}, nil
}}

// setup makes im's decider for s on fresh keys, primes it (see prime) and
// waits until its client is quiet (see quiesce). done releases the decider
// and deletes the keys it wrote, so that they neither expire nor weigh on
// Redis during a later measurement.
func setup(tb testing.TB, im impl, s scenario) (d decider, c client, done func()) {
	tb.Helper()
	c = clientFor(tb, im.client)
	keys, pattern := keySet(s.keys)
	d, release, err := im.make(c.rdb, s.traffic.quota(), keys)
	if err != nil {
		tb.Fatalf("%s: %v", im.name, err)
	}
	passes := 1
	if s.traffic == denied {
		passes = 2
	}
	prime(s.g, s.keys, passes, d)
	if !c.ctr.quiesce() {
		tb.Logf("%s %s: the client did not go quiet for %v within %v after priming: background work may be in the window", im.name, s, quietFor, quietMax)
	}
	return d, c, func() {
		release()
		if err := unlinkMatching(pattern); err != nil {
			fmt.Fprintf(os.Stderr, "bench: deleting %s: %v\n", pattern, err)
		}
	}
}
