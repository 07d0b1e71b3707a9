package core

import (
	"fmt"
	"time"
)

// Algorithm selects how a Limit is enforced. See the package documentation
// for what each one guarantees and costs. Its text form (String,
// MarshalText, UnmarshalText) is its snake_case name, so an Algorithm can
// come from a flag (flag.TextVar), JSON or YAML.
type Algorithm uint8

const (
	// TokenBucket admits bursts of up to Burst and refills continuously at
	// Rate per Period. It is the default (the zero value).
	TokenBucket Algorithm = iota
	// SlidingWindow admits at most Rate in any window of length Period,
	// exactly, by keeping a log of the admitted requests.
	SlidingWindow
	// SlidingWindowCounter approximates SlidingWindow in O(1) memory by
	// weighting the previous fixed window's count by its overlap.
	SlidingWindowCounter
	// FixedWindow admits at most Rate per calendar-aligned window of length
	// Period; up to 2*Rate can pass around a window boundary.
	FixedWindow
	// LeakyBucket shapes traffic: requests leave at an even pace of Rate per
	// Period, each admitted with the Delay it must wait, while at most Burst
	// are queued.
	LeakyBucket
)

// algorithm is everything the engine knows of one Algorithm. Each has one
// row in algorithms, so a new algorithm is a script and a row.
type algorithm struct {
	name string
	// suffixes end the Redis keys of one state, in the order of its
	// script's KEYS. The "2" marks the format of this version's scripts,
	// so a key an earlier version wrote is never misread: it expires.
	suffixes []string
	// source is the algorithm's script (scripts/<name>.lua).
	source string
	// burst: Limit.Burst is the capacity (else Rate is).
	burst bool
	// refund: units taken can be given back (see Limiter.Refund).
	refund bool
	// args is the Limit as the script's ARGV lists it.
	args func(params) []any
	// leaseLeft, for algorithms that can lease (see WithLeases), is how
	// long units granted in r stay in the window they were counted in.
	leaseLeft func(r Result, p params) time.Duration
}

var algorithms = [...]algorithm{
	TokenBucket: {name: "token_bucket", suffixes: []string{":tb2"}, source: tokenBucketLua,
		burst: true, refund: true, args: bucketArgs},
	SlidingWindow: {name: "sliding_window", suffixes: []string{":sw2", ":sw2m"}, source: slidingWindowLua,
		args: windowArgs},
	SlidingWindowCounter: {name: "sliding_window_counter", suffixes: []string{":swc2"}, source: slidingWindowCounterLua,
		refund: true, args: windowArgs,
		// Reset is the end of the next window once the current one counts.
		leaseLeft: func(r Result, p params) time.Duration { return r.ResetAfter - time.Duration(p.period)*time.Microsecond }},
	FixedWindow: {name: "fixed_window", suffixes: []string{":fw2"}, source: fixedWindowLua,
		refund: true, args: windowArgs,
		leaseLeft: func(r Result, _ params) time.Duration { return r.ResetAfter }},
	LeakyBucket: {name: "leaky_bucket", suffixes: []string{":lb2"}, source: leakyBucketLua,
		burst: true, refund: true, args: func(p params) []any { return append(bucketArgs(p), p.maxDelay) }},
}

func bucketArgs(p params) []any { return []any{p.period, p.rate, p.capacity} }
func windowArgs(p params) []any { return []any{p.period, p.rate} }

func (a Algorithm) known() bool { return int(a) < len(algorithms) }

// String returns the algorithm's snake_case name ("token_bucket").
func (a Algorithm) String() string {
	if a.known() {
		return algorithms[a].name
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// MarshalText returns the algorithm's name, or an error for an unknown one.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.known() {
		return nil, fmt.Errorf("%w: Algorithm %d is unknown", ErrInvalidLimit, a)
	}
	return []byte(algorithms[a].name), nil
}

// UnmarshalText sets a to the algorithm named by text: token_bucket,
// sliding_window, sliding_window_counter, fixed_window or leaky_bucket.
func (a *Algorithm) UnmarshalText(text []byte) error {
	for i := range algorithms {
		if algorithms[i].name == string(text) {
			*a = Algorithm(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown algorithm %q, want token_bucket, sliding_window, sliding_window_counter, fixed_window or leaky_bucket",
		ErrInvalidLimit, text)
}
