package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// exampleRedis starts a miniredis whose clock stands still at a fixed
// instant, so the examples print the same numbers on every run, and
// returns a client of it and a stop that closes both. In production, rdb
// is a client for a real Redis or Redis Cluster, made with
// ContextTimeoutEnabled.
func exampleRedis() (rdb *redis.Client, stop func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	mr.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rdb = redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() {
		// Closing a client of a server that is going away has nothing to
		// report that an example could act on.
		_ = rdb.Close()
		mr.Close()
	}
}

func ExampleLimiter_Allow() {
	rdb, stop := exampleRedis()
	defer stop()

	limiter, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	res, err := limiter.Allow(context.Background(), 1, core.PerSecond(10).For("user:42"))
	switch {
	case err != nil:
		fmt.Println("redis failed:", err) // fail open or closed: your call
	case !res.Allowed:
		fmt.Println("denied; retry in", res.RetryAfter)
	default:
		fmt.Println("allowed;", res.Remaining, "left; full again in", res.ResetAfter)
	}
	// Output:
	// allowed; 9 left; full again in 100ms
}

func ExampleLimiter_Allow_denied() {
	rdb, stop := exampleRedis()
	defer stop()

	limiter, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	limit := core.PerMinute(3)
	if _, err := limiter.Allow(ctx, 3, limit.For("user:42")); err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	res, err := limiter.Allow(ctx, 1, limit.For("user:42"))
	if err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	fmt.Println("allowed:", res.Allowed)
	fmt.Println("retry after:", res.RetryAfter)
	// Output:
	// allowed: false
	// retry after: 20s
}

// A batch worker takes what the limit lets it, and gives back what it did
// not use.
func ExampleLimiter_AllowAtMost() {
	rdb, stop := exampleRedis()
	defer stop()

	limiter, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	limit := core.PerMinute(100)
	res, err := limiter.AllowAtMost(ctx, 250, limit.For("export-job"))
	if err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	fmt.Println("granted:", res.Granted)
	sent := 80 // the rest failed before it was sent
	if _, err := limiter.Settle(ctx, res, sent); err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	if res, err = limiter.Peek(ctx, limit.For("export-job")); err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	fmt.Println("remaining:", res.Remaining)
	// Output:
	// granted: 100
	// remaining: 20
}

func ExampleLimiter_Allow_leakyBucket() {
	rdb, stop := exampleRedis()
	defer stop()

	limiter, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	// Two requests per second leave the queue, at most four wait in it.
	limit := core.Limit{Algorithm: core.LeakyBucket, Rate: 2, Period: time.Second, Burst: 4}
	for i := range 5 {
		res, err := limiter.Allow(context.Background(), 1, limit.For("outbound-api"))
		if err != nil {
			fmt.Println("redis failed:", err)
			return
		}
		if res.Allowed {
			fmt.Printf("request %d: go after %v\n", i, res.Delay) // time.Sleep(res.Delay)
		} else {
			fmt.Printf("request %d: queue full, retry after %v\n", i, res.RetryAfter)
		}
	}
	// Output:
	// request 0: go after 0s
	// request 1: go after 500ms
	// request 2: go after 1s
	// request 3: go after 1.5s
	// request 4: queue full, retry after 500ms
}

// One key under two Limits: a request is admitted only if both admit it,
// and then counts in both. Result.Rules says what each decided.
func ExampleLimiter_Allow_rules() {
	rdb, stop := exampleRedis()
	defer stop()

	limiter, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	rules := []core.Rule{core.PerSecond(10).For("user:42"), core.PerHour(12).For("user:42")}
	for i := range 3 {
		res, err := limiter.Allow(ctx, 5, rules...)
		if err != nil {
			fmt.Println("redis failed:", err)
			return
		}
		fmt.Printf("request %d: allowed %v (per second %v, per hour %v)\n", i, res.Allowed, res.Rules[0].Allowed, res.Rules[1].Allowed)
	}
	// Output:
	// request 0: allowed true (per second true, per hour true)
	// request 1: allowed true (per second true, per hour true)
	// request 2: allowed false (per second false, per hour false)
}

func ExampleLimit_UnmarshalText() {
	for _, s := range []string{"10/s", "100/min burst=200", "5/2s sliding_window", "1/day"} {
		var l core.Limit
		if err := l.UnmarshalText([]byte(s)); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-20q rate %d per %v, capacity %d, %s\n", s, l.Rate, l.Period, l.Capacity(), l.Algorithm)
	}
	var l core.Limit
	err := l.UnmarshalText([]byte("10 per second"))
	fmt.Println(errors.Is(err, core.ErrInvalidLimit))
	// Output:
	// "10/s"               rate 10 per 1s, capacity 10, token_bucket
	// "100/min burst=200"  rate 100 per 1m0s, capacity 200, token_bucket
	// "5/2s sliding_window" rate 5 per 2s, capacity 5, sliding_window
	// "1/day"              rate 1 per 24h0m0s, capacity 1, token_bucket
	// true
}
