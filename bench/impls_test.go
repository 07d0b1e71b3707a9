package bench

import (
	"context"
	"fmt"
	"os"
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

// benchTimeout replaces core.DefaultTimeout (50ms): at 256 goroutines on a
// shared 2-core machine a queued decision can take longer, and a timeout
// would count as an error, not a decision. The cost per call (a context
// with a deadline) is the same.
const benchTimeout = time.Second

func ours(name, client string, alg core.Algorithm, opts ...core.Option) impl {
	return impl{name: name, client: client, make: func(rdb *redis.Client, q quota, keys []string) (decider, error) {
		l := core.New(rdb, append([]core.Option{core.WithTimeout(benchTimeout)}, opts...)...)
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

var (
	oursTB = ours("ours/token_bucket", "ours", core.TokenBucket)
	oursAP = ours("ours/token_bucket+autopipeline", "ours-ap", core.TokenBucket, core.WithAutoPipeline())
	oursDC = ours("ours/token_bucket+denycache", "ours", core.TokenBucket, core.WithDenyCache(1<<17))
	// oursAPDC is the configuration for abusive traffic at high concurrency.
	oursAPDC = ours("ours/token_bucket+autopipeline+denycache", "ours-apdc", core.TokenBucket,
		core.WithAutoPipeline(), core.WithDenyCache(1<<17))
	oursAll = []impl{
		oursTB,
		ours("ours/sliding_window", "ours", core.SlidingWindow),
		ours("ours/sliding_window_counter", "ours", core.SlidingWindowCounter),
		ours("ours/fixed_window", "ours", core.FixedWindow),
		ours("ours/leaky_bucket", "ours", core.LeakyBucket),
		oursAP,
		oursDC,
	}
)

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

// goredis is the floor under our token bucket: its script run through
// go-redis' Script.Run (EVALSHA) with keys and arguments built beforehand,
// so every allocation it reports is go-redis' own. Our allocs/op minus
// this one is what the core adds.
var goredis = impl{name: "goredis_evalsha", client: "goredis", make: func(rdb *redis.Client, q quota, keys []string) (decider, error) {
	src, err := os.ReadFile("../core/scripts/token_bucket.lua")
	if err != nil {
		return nil, err
	}
	script := redis.NewScript(string(src))
	rkeys := make([][]string, len(keys))
	for i, k := range keys {
		rkeys[i] = []string{"ratelimit:{" + k + "}:tb"}
	}
	args := tokenBucketArgs(q)
	return func(ctx context.Context, i int) (bool, error) {
		v, err := script.Run(ctx, rdb, rkeys[i], args...).Int64Slice()
		if err != nil {
			return false, err
		}
		return len(v) > 0 && v[0] == 1, nil
	}, nil
}}

// tokenBucketArgs is the ARGV core sends for a token bucket of q, cost 1
// (see core/scripts/token_bucket.lua).
func tokenBucketArgs(q quota) []any {
	period, rate := q.period.Microseconds(), int64(q.rate)
	a, b := period, rate
	for b != 0 {
		a, b = b, a%b
	}
	return []any{period / a, rate / a, int64(q.rate), 1, "0"}
}

// setup makes im's decider for s on fresh keys and primes it (see prime).
func setup(tb testing.TB, im impl, s scenario) (decider, client) {
	tb.Helper()
	c := clientFor(tb, im.client)
	d, err := im.make(c.rdb, s.traffic.quota(), keySet(s.keys))
	if err != nil {
		tb.Fatalf("%s: %v", im.name, err)
	}
	prime(s.g, s.keys, d)
	return d, c
}
