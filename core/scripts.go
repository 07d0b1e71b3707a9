package core

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Each script's header comment documents its KEYS, ARGV and reply. They all
// reply {allowed, remaining, retry_after µs, reset_after µs, delay µs}.
var (
	//go:embed scripts/token_bucket.lua
	tokenBucketLua string
	//go:embed scripts/sliding_window.lua
	slidingWindowLua string
	//go:embed scripts/sliding_window_counter.lua
	slidingWindowCounterLua string
	//go:embed scripts/fixed_window.lua
	fixedWindowLua string
	//go:embed scripts/leaky_bucket.lua
	leakyBucketLua string
)

// scripts is indexed by Algorithm. redis.Script runs EVALSHA and falls back
// to EVAL on NOSCRIPT (after a SCRIPT FLUSH or a failover), so the SHA is
// computed once here and never per call.
var scripts = [...]*redis.Script{
	TokenBucket:          redis.NewScript(tokenBucketLua),
	SlidingWindow:        redis.NewScript(slidingWindowLua),
	SlidingWindowCounter: redis.NewScript(slidingWindowCounterLua),
	FixedWindow:          redis.NewScript(fixedWindowLua),
	LeakyBucket:          redis.NewScript(leakyBucketLua),
}

// scriptArgs are the ARGV of the Limit's script, in the order its header
// comment lists them.
func scriptArgs(a Algorithm, p params, n int, peek bool) []any {
	pk := "0"
	if peek {
		pk = "1"
	}
	switch a {
	case TokenBucket:
		return []any{p.period, p.rate, p.capacity, n, pk}
	case LeakyBucket:
		return []any{p.period, p.rate, p.capacity, n, pk, p.maxDelay}
	default:
		return []any{p.period, p.rate, n, pk}
	}
}

// parseReply turns a script's reply into a Result. It checks every type, so
// a proxy or a changed script yields an error, never a panic.
func parseReply(v any, capacity int) (Result, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) != 5 {
		return Result{}, fmt.Errorf("%w: want 5 integers, got %T %v", ErrBadReply, v, v)
	}
	var ints [5]int64
	for i, x := range vals {
		n, ok := x.(int64)
		if !ok {
			return Result{}, fmt.Errorf("%w: element %d is %T, want int64", ErrBadReply, i, x)
		}
		ints[i] = n
	}
	return Result{
		Allowed:    ints[0] == 1,
		Limit:      capacity,
		Remaining:  int(ints[1]),
		RetryAfter: time.Duration(ints[2]) * time.Microsecond,
		ResetAfter: time.Duration(ints[3]) * time.Microsecond,
		Delay:      time.Duration(ints[4]) * time.Microsecond,
	}, nil
}
