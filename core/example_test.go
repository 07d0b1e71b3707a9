package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// exampleRedis starts a miniredis whose clock stands still at a fixed
// instant, so the examples print the same numbers on every run. In
// production, rdb is a client for a real Redis or Redis Cluster.
func exampleRedis() (*miniredis.Miniredis, *redis.Client) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	mr.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return mr, redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
}

func ExampleLimiter_Allow() {
	mr, rdb := exampleRedis()
	defer mr.Close()
	defer rdb.Close()

	limiter := core.New(rdb, core.WithTimeout(time.Second))
	res, err := limiter.Allow(context.Background(), "user:42", core.PerSecond(10))
	if err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	fmt.Println("allowed:", res.Allowed)
	fmt.Println("remaining:", res.Remaining, "of", res.Limit)
	fmt.Println("full again in:", res.ResetAfter)
	// Output:
	// allowed: true
	// remaining: 9 of 10
	// full again in: 100ms
}

func ExampleLimiter_AllowN_denied() {
	mr, rdb := exampleRedis()
	defer mr.Close()
	defer rdb.Close()

	limiter := core.New(rdb, core.WithTimeout(time.Second))
	ctx := context.Background()
	limit := core.PerMinute(3)
	if _, err := limiter.AllowN(ctx, "user:42", limit, 3); err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	res, err := limiter.Allow(ctx, "user:42", limit)
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

func ExampleLimiter_Allow_leakyBucket() {
	mr, rdb := exampleRedis()
	defer mr.Close()
	defer rdb.Close()

	limiter := core.New(rdb, core.WithTimeout(time.Second))
	// Two requests per second leave the queue, at most four wait in it.
	limit := core.Limit{Algorithm: core.LeakyBucket, Rate: 2, Period: time.Second, Burst: 4}
	for i := range 5 {
		res, err := limiter.Allow(context.Background(), "outbound-api", limit)
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

func ExampleLimiter_Peek() {
	mr, rdb := exampleRedis()
	defer mr.Close()
	defer rdb.Close()

	limiter := core.New(rdb, core.WithTimeout(time.Second))
	ctx := context.Background()
	limit := core.PerHour(100).With(core.SlidingWindow)
	if _, err := limiter.AllowN(ctx, "user:42", limit, 40); err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	res, err := limiter.Peek(ctx, "user:42", limit) // consumes nothing
	if err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	fmt.Println("remaining:", res.Remaining)
	// Output:
	// remaining: 60
}
