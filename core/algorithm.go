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
	// FixedWindow admits at most Rate per window of length Period aligned
	// to the Unix epoch, or per calendar day, week or month (see
	// Limit.Calendar); up to 2*Rate can pass around a window boundary.
	// Redis keeps a window's end as its key's expiry, in milliseconds, so
	// a Period is rounded up to a whole millisecond, and Rate is at most
	// 2^33 (a calendar's, 2^40); its waits are whole milliseconds.
	FixedWindow
	// LeakyBucket shapes traffic: requests leave at an even pace of Rate per
	// Period, each admitted with the Delay it must wait, while at most Burst
	// are queued.
	LeakyBucket
	// Concurrency admits at most Rate requests in flight at once: a request
	// takes a permit and gives it back with Refund when it ends. A permit
	// whose holder never gives it back (a crashed process) lapses Period
	// after it was taken or last renewed (see Limiter.Renew).
	Concurrency
)

// algorithm is everything the engine knows of one Algorithm. Each has one
// row in algorithms, so a new algorithm is a script and a row.
type algorithm struct {
	name string
	// script is the algorithm's index in the library's algorithms table
	// (scripts/prelude.lua).
	script int
	// suffixes end the Redis keys of one state, in the order of its
	// script's KEYS. The digit marks the format of this version's scripts
	// (3; 4 for the period FixedWindow's integer and the buckets' count of units taken), so a key an earlier
	// version wrote is never misread: it expires.
	suffixes []string
	// source is the algorithm's script (scripts/<name>.lua).
	source string
	// burst: Limit.Burst is the capacity (else Rate is).
	burst bool
	// ids: every request names a permit (Concurrency).
	ids bool
	// tagged: a receipt names the window its units were taken in, the
	// fifth integer of the script's reply, not the call's clock (a period
	// FixedWindow, which reads no clock inside a window).
	tagged bool
	// positions: a take's reply carries its position in the state's count
	// of units taken, which its give-back names (the buckets; see POS in
	// scripts/prelude.lua).
	positions bool
	// queues: an admitted request waits its Result.Delay in a queue that
	// drains at the rate (LeakyBucket), so Wait measures a deadline
	// against the queue ahead, not against RetryAfter alone.
	queues bool
	// args is the Limit as its algorithm's file lists it.
	args func(params) []int64
	// local is what the local fallback holds the algorithm's keys to
	// (see sketch); localPermits (the zero value) is Concurrency's.
	local localBound
	// leaseLeft, for algorithms that can lease (see WithLeases), is how
	// long units granted in r stay in the window they were counted in.
	leaseLeft func(r Result, p params) time.Duration
}

var algorithms = [...]algorithm{
	TokenBucket: {name: "token_bucket", script: 1, suffixes: []string{":tb4"}, source: tokenBucketLua,
		burst: true, positions: true, local: localBucket, args: bucketArgs},
	SlidingWindow: {name: "sliding_window", script: 2, suffixes: []string{":sw3", ":sw3m"}, source: slidingWindowLua,
		local: localWindow, args: windowArgs},
	SlidingWindowCounter: {name: "sliding_window_counter", script: 3, suffixes: []string{":swc3"}, source: slidingWindowCounterLua,
		local: localWindow, args: func(p params) []int64 { return []int64{p.period, p.rate, p.tick} },
		// Reset is the end of the next window once the current one counts.
		leaseLeft: func(r Result, p params) time.Duration { return r.ResetAfter - time.Duration(p.period)*time.Microsecond }},
	FixedWindow: {name: "fixed_window", script: 4, suffixes: []string{":fw4"}, source: fixedWindowLua,
		tagged: true, local: localWindow, args: func(p params) []int64 { return []int64{p.period, p.rate, 0} },
		// Its waits are read from its key's expiry, whole ms, up to 2 ms
		// past the window's end (see Result.RetryAfter): a lease ends
		// that much before, so no unit of it is spent in the next window.
		leaseLeft: func(r Result, _ params) time.Duration { return r.ResetAfter - 2*time.Millisecond }},
	LeakyBucket: {name: "leaky_bucket", script: 5, suffixes: []string{":lb4"}, source: leakyBucketLua,
		burst: true, positions: true, queues: true, local: localBucket, args: func(p params) []int64 { return []int64{p.period, p.rate, p.capacity, p.maxDelay, p.tick, p.debt} }},
	Concurrency: {name: "concurrency", script: 6, suffixes: []string{":cc3"}, source: concurrencyLua,
		ids: true, local: localPermits, args: windowArgs},
}

// calendarWindow is FixedWindow over calendar windows: a script of
// fixed_window.lua's, with a state of its own. Its ARGV (the windows'
// starts) depend on the time, so the plan builds them (see calendar.go).
var calendarWindow = algorithm{name: "fixed_window", script: 7, suffixes: []string{":cw3"}, source: fixedWindowLua,
	local: localWindow, leaseLeft: func(r Result, _ params) time.Duration { return r.ResetAfter }}

// staggeredWindow is FixedWindow over a Period whose windows start at an
// offset of each key's own (WithStaggeredWindows): fixed_window.lua's
// script with its last param 1, and a state of its own, so that a Limiter
// that staggers and one that does not never read each other's windows.
var staggeredWindow = func() algorithm {
	a := algorithms[FixedWindow]
	a.suffixes = []string{":fw4o"}
	a.args = func(p params) []int64 { return []int64{p.period, p.rate, 1} }
	return a
}()

// rows are every row a state key may have: the algorithms', the calendar
// window's and the staggered window's.
func rows() []algorithm { return append(algorithms[:], calendarWindow, staggeredWindow) }

func bucketArgs(p params) []int64 { return []int64{p.period, p.rate, p.capacity, p.tick, p.debt} }
func windowArgs(p params) []int64 { return []int64{p.period, p.rate} }

func (a Algorithm) known() bool { return int(a) < len(algorithms) }

// queues reports whether l's requests wait their Delay in a queue (see
// algorithm.queues); false for an unknown Algorithm.
func (l Limit) queues() bool { return l.Algorithm.known() && l.row().queues }

// row is the engine's row for l: its algorithm's, or the calendar
// window's.
func (l Limit) row() *algorithm {
	if l.Calendar != NoCalendar {
		return &calendarWindow
	}
	return &algorithms[l.Algorithm]
}

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
// sliding_window, sliding_window_counter, fixed_window, leaky_bucket or
// concurrency.
func (a *Algorithm) UnmarshalText(text []byte) error {
	for i := range algorithms {
		if algorithms[i].name == string(text) {
			*a = Algorithm(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown algorithm %q, want token_bucket, sliding_window, sliding_window_counter, fixed_window, leaky_bucket or concurrency",
		ErrInvalidLimit, text)
}
