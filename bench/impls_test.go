package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
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
// under q; client names the go-redis client (pool and call counter) it uses.
type impl struct {
	name, client string
	make         func(rdb *redis.Client, q quota, keys []string) (decider, error)
}

// benchTimeout replaces core's default timeout (50ms): at 256 goroutines on
// a shared 2-core machine a queued decision can take longer, and a timeout
// would count as an error, not a decision. The cost per call (a context
// with a deadline) is the same.
const benchTimeout = time.Second

// newLimiter is core.New with the bench's timeout, after the Limiter's
// first background health check (an INFO) is done, so that it does not
// land in a measured window.
func newLimiter(rdb *redis.Client, opts ...core.Option) (*core.Limiter, error) {
	l, err := core.New(rdb, append([]core.Option{core.WithTimeout(benchTimeout)}, opts...)...)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(2 * time.Second); l.Health().Checked.IsZero() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return l, nil
}

func ours(name, client string, alg core.Algorithm, opts ...core.Option) impl {
	return impl{name: name, client: client, make: func(rdb *redis.Client, q quota, keys []string) (decider, error) {
		l, err := newLimiter(rdb, opts...)
		if err != nil {
			return nil, err
		}
		lim := core.Limit{Algorithm: alg, Rate: q.rate, Period: q.period}
		if err := lim.Validate(); err != nil {
			return nil, err
		}
		return func(ctx context.Context, i int) (bool, error) {
			r, err := l.Allow(ctx, keys[i], lim)
			return r.Allowed, err
		}, nil
	}}
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
	oursAll = []impl{oursPlain, oursBatched, oursBDC}
)

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
var redisRate = impl{name: "redis_rate", client: "redis_rate", make: func(rdb *redis.Client, q quota, keys []string) (decider, error) {
	rl := redis_rate.NewLimiter(rdb)
	lim := redis_rate.Limit{Rate: q.rate, Burst: q.rate, Period: q.period}
	return func(ctx context.Context, i int) (bool, error) {
		r, err := rl.Allow(ctx, keys[i], lim)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}, nil
}}

// ulule is ulule/limiter v3 with its Redis store (a fixed window), Get.
var ulule = impl{name: "ulule", client: "ulule", make: func(rdb *redis.Client, q quota, keys []string) (decider, error) {
	store, err := sredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
	if err != nil {
		return nil, err
	}
	l := limiter.New(store, limiter.Rate{Period: q.period, Limit: int64(q.rate)})
	return func(ctx context.Context, i int) (bool, error) {
		c, err := l.Get(ctx, keys[i])
		return !c.Reached, err
	}, nil
}}

// goredis is the floor under our token bucket: the script one plain
// decision runs (see oneCallScript), through go-redis' Script.Run (EVALSHA)
// with keys and arguments built beforehand, so every allocation it reports
// is go-redis' own. Our allocs/op minus this one is what the core adds.
var goredis = impl{name: "goredis_evalsha", client: "goredis", make: func(rdb *redis.Client, q quota, keys []string) (decider, error) {
	src, err := oneCallScript(core.TokenBucket)
	if err != nil {
		return nil, err
	}
	script := redis.NewScript(src)
	rkeys := make([][]string, len(keys))
	for i, k := range keys {
		rkeys[i] = []string{tokenBucketKey(k)}
	}
	args := tokenBucketArgs(q)
	return func(ctx context.Context, i int) (bool, error) {
		v, err := script.Run(ctx, rdb, rkeys[i], args...).Int64Slice()
		if err != nil {
			return false, err
		}
		return len(v) > 0 && v[0] > 0, nil
	}, nil
}}

// oneCallScript is the script core runs for one decision under alg, built
// from core/scripts as core/scripts.go builds it: the prelude, the
// algorithm's script, then the batch driver, which a lone decision goes
// through with one request.
func oneCallScript(alg core.Algorithm) (string, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile("../core/scripts/" + name + ".lua")
		return string(b), err
	}
	prelude, err := read("prelude")
	if err != nil {
		return "", err
	}
	body, err := read(alg.String())
	if err != nil {
		return "", err
	}
	batch, err := read("batch")
	if err != nil {
		return "", err
	}
	return prelude + "do\n" + body + "\nend\nlocal A = algorithms[" + strconv.Itoa(int(alg)+1) + "]\n" + batch, nil
}

// tokenBucketKey is the Redis key core keeps a token bucket in, for a key
// without braces (core/rediskey.go, core/algorithm.go).
func tokenBucketKey(k string) string { return "ratelimit:{" + k + "}:tb2" }

// tokenBucketArgs is the ARGV core sends for one decision of cost 1 on a
// token bucket of q (core/scripts/token_bucket.lua, batch.lua): the
// period in µs and the rate, both divided by their gcd, the capacity; then
// one request: 1, n = 1, mode CONSUME (0).
func tokenBucketArgs(q quota) []any {
	period, rate := q.period.Microseconds(), int64(q.rate)
	a, b := period, rate
	for b != 0 {
		a, b = b, a%b
	}
	return []any{period / a, rate / a, int64(q.rate), 1, 1, 0}
}

// setup makes im's decider for s on fresh keys and primes it (see prime).
// done deletes the keys it wrote, so that they neither expire nor weigh on
// Redis during a later measurement.
func setup(tb testing.TB, im impl, s scenario) (d decider, c client, done func()) {
	tb.Helper()
	c = clientFor(tb, im.client)
	keys, pattern := keySet(s.keys)
	d, err := im.make(c.rdb, s.traffic.quota(), keys)
	if err != nil {
		tb.Fatalf("%s: %v", im.name, err)
	}
	passes := 1
	if s.traffic == denied {
		passes = 2
	}
	prime(s.g, s.keys, passes, d)
	return d, c, func() {
		if err := unlinkMatching(pattern); err != nil {
			fmt.Fprintf(os.Stderr, "bench: deleting %s: %v\n", pattern, err)
		}
	}
}
