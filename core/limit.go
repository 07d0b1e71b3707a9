package core

import (
	"errors"
	"fmt"
	"time"
)

// Algorithm selects how a Limit is enforced. See the package documentation
// for what each one guarantees and costs.
type Algorithm uint8

const (
	// TokenBucket admits bursts of up to Burst and refills continuously at
	// Rate per Period. It is the default (the zero value).
	TokenBucket Algorithm = iota
	// SlidingWindow admits at most Rate in any window of length Period,
	// exactly, by keeping one sorted-set entry per admitted unit of cost.
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

var algorithmNames = [...]string{
	TokenBucket:          "token_bucket",
	SlidingWindow:        "sliding_window",
	SlidingWindowCounter: "sliding_window_counter",
	FixedWindow:          "fixed_window",
	LeakyBucket:          "leaky_bucket",
}

// String returns the algorithm's snake_case name, as ParseAlgorithm accepts it.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the Algorithm named s ("token_bucket",
// "sliding_window", "sliding_window_counter", "fixed_window", "leaky_bucket").
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if name == s {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q", ErrInvalidLimit, s)
}

// Limit is a quota: Rate requests per Period, enforced by Algorithm.
//
// A Limit is a plain value; changing the Limit passed for a key takes effect
// on the next call, without a Reset and without handing out free requests.
type Limit struct {
	// Algorithm enforces the quota. Default: TokenBucket.
	Algorithm Algorithm
	// Rate is how many requests (units of cost) Period allows. Must be > 0.
	Rate int
	// Period is the length of the window, or the time the buckets take to
	// refill (drain) Rate units. Must be >= 1µs; it is used in whole
	// microseconds, rounded up, so the Limit enforced is never looser than
	// the one given.
	Period time.Duration
	// Burst is the capacity of TokenBucket and the queue length of
	// LeakyBucket, in units of cost. Ignored by the window algorithms.
	// Default (0): Rate.
	Burst int
	// MaxDelay caps the Delay a LeakyBucket request may be given: a request
	// that would have to wait longer is denied without consuming capacity.
	// Ignored by the other algorithms. Default (0): no cap beyond Burst.
	MaxDelay time.Duration
}

// PerSecond returns a token bucket of n requests per second, burst n.
func PerSecond(n int) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute returns a token bucket of n requests per minute, burst n.
func PerMinute(n int) Limit { return Limit{Rate: n, Period: time.Minute} }

// PerHour returns a token bucket of n requests per hour, burst n.
func PerHour(n int) Limit { return Limit{Rate: n, Period: time.Hour} }

// With returns a copy of l enforced by algorithm a.
func (l Limit) With(a Algorithm) Limit {
	l.Algorithm = a
	return l
}

// ErrInvalidLimit is wrapped by every error that Limit.Validate returns.
var ErrInvalidLimit = errors.New("core: invalid limit")

// maxExact is the largest integer a Lua (IEEE double) number holds exactly.
// The scripts compute in integers scaled to microseconds, so every product
// they form must stay below it.
const maxExact = 1 << 53

// Validate reports whether l can be enforced, with an error that names the
// offending field.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// Capacity is the most a key can hold at once: Burst (default Rate) for the
// buckets, Rate for the window algorithms. It is Result.Limit, so
// 0 <= Result.Remaining <= Capacity always holds.
func (l Limit) Capacity() int {
	if l.hasBurst() && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

func (l Limit) hasBurst() bool {
	return l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket
}

// params is a validated Limit in the integer units the scripts use.
//
// Time is in microseconds. The buckets count capacity in units of
// 1/period of a token so that the refill per microsecond (rate) is an
// integer; period and rate are first divided by their GCD to keep the
// products small. The window algorithms only need period.
type params struct {
	period   int64 // µs, reduced by gcd for the buckets
	rate     int64 // refill per µs in scaled units (buckets), or Rate (windows)
	capacity int64 // Capacity() in requests
	maxDelay int64 // µs, LeakyBucket only; 0 = none
}

func (l Limit) params() (params, error) {
	switch {
	case int(l.Algorithm) >= len(algorithmNames):
		return params{}, fmt.Errorf("%w: Algorithm %d is unknown", ErrInvalidLimit, l.Algorithm)
	case l.Rate <= 0:
		return params{}, fmt.Errorf("%w: Rate must be > 0, got %d", ErrInvalidLimit, l.Rate)
	case l.Period < time.Microsecond:
		return params{}, fmt.Errorf("%w: Period must be >= 1µs, got %v", ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return params{}, fmt.Errorf("%w: Burst must be >= 0, got %d", ErrInvalidLimit, l.Burst)
	case l.MaxDelay < 0:
		return params{}, fmt.Errorf("%w: MaxDelay must be >= 0, got %v", ErrInvalidLimit, l.MaxDelay)
	}
	period := l.Period.Microseconds()
	if l.Period%time.Microsecond != 0 {
		period++
	}
	capacity := int64(l.Capacity())
	p := params{period: period, rate: int64(l.Rate), capacity: capacity, maxDelay: l.MaxDelay.Microseconds()}
	if p.maxDelay == 0 && l.MaxDelay > 0 {
		p.maxDelay = 1 // a bound under 1µs, not "no bound" (0)
	}
	if l.hasBurst() {
		g := gcd(period, p.rate)
		p.period, p.rate = period/g, p.rate/g
	}
	// The largest sum a script forms is under twice capacity*period (a full
	// bucket plus a cost in scaled units, or the weighted window counts);
	// current Unix time in µs plus two periods must also stay exact.
	if capacity > maxExact/2/p.period || period > maxExact/4 {
		return params{}, fmt.Errorf("%w: Rate/Burst %d over Period %v exceeds the exact range of Redis Lua numbers (2 × capacity × period in µs must be < 2^53)",
			ErrInvalidLimit, capacity, l.Period)
	}
	return p, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
