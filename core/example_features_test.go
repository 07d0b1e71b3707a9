package core_test

import (
	"context"
	"fmt"
	"time"
	_ "time/tzdata" // the example's time zone, on machines without zoneinfo

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

func ExamplePerMonth() {
	// A calendar window is found on the process' clock and held to
	// Redis' own: this miniredis runs on the real clock, as Redis does.
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()

	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	limiter, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	quota := core.PerMonth(10000, berlin) // or "10000/month tz=Europe/Berlin"

	res, err := limiter.Allow(ctx, 9500, quota.For("customer:7"))
	if err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	fmt.Println("allowed:", res.Allowed, "remaining:", res.Remaining)
	if res, err = limiter.Allow(ctx, 600, quota.For("customer:7")); err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	now := time.Now().In(berlin)
	nextMonth := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, berlin)
	fmt.Println("allowed:", res.Allowed, "retry at the next month in Berlin:", now.Add(res.RetryAfter).Sub(nextMonth).Abs() < time.Second)
	// Output:
	// allowed: true remaining: 500
	// allowed: false retry at the next month in Berlin: true
}

// A cost known only afterwards, such as the tokens of an LLM completion:
// take an estimate before the work, then Settle the real cost. Units not
// used come back; an excess becomes a debt later requests wait out.
func ExampleLimiter_Settle() {
	rdb, stop := exampleRedis()
	defer stop()

	limiter, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	budget := core.Limit{Rate: 1000, Period: time.Minute} // tokens per minute

	taken, err := limiter.Allow(ctx, 100, budget.For("tenant:acme")) // the estimate
	if err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	res, err := limiter.Settle(ctx, taken, 1600)
	if err != nil {
		fmt.Println("redis failed:", err) // the estimate stands
		return
	}
	fmt.Println("used 1600 of an estimate of 100; remaining:", res.Remaining)
	next, err := limiter.Allow(ctx, 1, budget.For("tenant:acme"))
	if err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	fmt.Println("next request allowed:", next.Allowed, "retry after:", next.RetryAfter)
	// Output:
	// used 1600 of an estimate of 100; remaining: 0
	// next request allowed: false retry after: 36.06s
}

// At most two jobs in flight per tenant, across every process on the
// Redis: Allow takes a permit, Refund gives it back when the job ends. A
// permit whose holder dies lapses after the Limit's Period (Renew keeps
// it for longer work).
func ExampleInFlight() {
	rdb, stop := exampleRedis()
	defer stop()

	limiter, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	jobs := core.InFlight(2)

	var held []core.Result // the permits taken, to give back
	for range 3 {
		res, err := limiter.Allow(ctx, 1, jobs.For("tenant:acme"))
		if err != nil {
			fmt.Println("redis failed:", err) // fail open or closed: your call
			return
		}
		fmt.Println(res.Allowed)
		if res.Allowed {
			held = append(held, res)
		}
	}
	if len(held) > 0 { // the first job ends
		if err := limiter.Refund(ctx, held[0]); err != nil {
			fmt.Println("redis failed:", err) // the permit lapses after the Period
		}
	}
	d, err := limiter.Allow(ctx, 1, jobs.For("tenant:acme"))
	if err != nil {
		fmt.Println("redis failed:", err)
		return
	}
	fmt.Println("after one ended:", d.Allowed)
	// Output:
	// true
	// true
	// false
	// after one ended: true
}

// Aligned windows reset together; staggered ones each at an offset of
// their key's own, the same on every instance that staggers.
func ExampleWithStaggeredWindows() {
	rdb, stop := exampleRedis()
	defer stop()

	limiter, err := core.New(rdb, core.WithStaggeredWindows())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	hourly := core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Hour}
	for _, user := range []string{"user:1", "user:2", "user:3"} {
		res, err := limiter.Allow(ctx, 1, hourly.For(user))
		if err != nil {
			fmt.Println("redis failed:", err)
			return
		}
		fmt.Println(user, "resets in", res.ResetAfter.Round(time.Minute))
	}
	// (Aligned, all three would reset in 56m, at 04:00.)
	// Output:
	// user:1 resets in 23m0s
	// user:2 resets in 1m0s
	// user:3 resets in 32m0s
}
