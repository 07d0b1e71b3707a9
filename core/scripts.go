package core

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
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
	//go:embed scripts/layers.lua
	layersLua string
)

// scripts is indexed by Algorithm. redis.Script runs EVALSHA and falls back
// to EVAL on NOSCRIPT (after a SCRIPT FLUSH or a failover), so the SHA is
// computed once here and never per call.
var scripts = [len(sources)]*redis.Script{}

var sources = [...]string{
	TokenBucket:          tokenBucketLua,
	SlidingWindow:        slidingWindowLua,
	SlidingWindowCounter: slidingWindowCounterLua,
	FixedWindow:          fixedWindowLua,
	LeakyBucket:          leakyBucketLua,
}

func init() {
	for a, src := range sources {
		scripts[a] = redis.NewScript(src)
	}
}

// layersScript decides several Limits of one caller atomically. It is
// built from the algorithms' own scripts, each wrapped as a function, so
// their arithmetic is written once.
var layersScript = redis.NewScript(buildLayersScript())

func buildLayersScript() string {
	var b strings.Builder
	b.WriteString("local algs = {}\n")
	for a := range sources {
		// Each script reads KEYS and ARGV and ends in a return: as the body
		// of function(KEYS, ARGV) it runs unchanged.
		b.WriteString("algs[" + strconv.Itoa(a+1) + "] = function(KEYS, ARGV)\n")
		b.WriteString(sources[a])
		b.WriteString("\nend\n")
	}
	b.WriteString(layersLua)
	return b.String()
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

// peekArg is the 1-based position of the peek flag in scriptArgs.
func peekArg(a Algorithm) int {
	if a == TokenBucket || a == LeakyBucket {
		return 5
	}
	return 4
}

// parseReply turns a script's reply into a Result. It checks every type, so
// a proxy or a changed script yields an error, never a panic.
func parseReply(v any, capacity int) (Result, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) != 5 {
		return Result{}, fmt.Errorf("%w: want 5 integers, got %T %v", ErrBadReply, v, v)
	}
	return parseInts(vals, capacity)
}

func parseInts(vals []any, capacity int) (Result, error) {
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
