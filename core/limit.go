package core

import (
	"fmt"
	"time"
)

// Limit is a quota: Rate units per Period, enforced by Algorithm. The zero
// Limit is invalid; PerSecond, PerMinute, PerHour, PerMonth and InFlight
// build common ones, and its text form ("10/s", "100/min burst=200",
// "5/2s sliding_window", "10000/month tz=Europe/Berlin") lets one come from
// a flag, an environment variable, JSON or YAML.
//
// A Limit is a plain value: changing the Rate, Period or Burst passed for a
// key takes effect on the next call, without a Reset (docs/limits.md says
// what each algorithm carries over, and a lengthened window's bound).
// Each algorithm keeps its own state: moving a key to another Algorithm
// starts it with that algorithm's whole quota.
type Limit struct {
	// Algorithm enforces the quota. Default: TokenBucket.
	Algorithm Algorithm
	// Rate is how many units (requests, or their cost) Period allows, at
	// most 2^40; for Concurrency, how many requests may be in flight, at
	// most 2^20. Must be > 0.
	Rate int
	// Period is the length of the window, or the time the buckets take to
	// refill (drain) Rate units: at least 1µs and at most 2^46µs (about 2.2
	// years), at least 1ms for Concurrency, where it is how long a permit
	// lasts unless renewed. It is used in whole microseconds, rounded up,
	// so the Limit enforced is never looser than the one given. 0 with a
	// Calendar.
	Period time.Duration
	// Burst is the capacity of TokenBucket and the queue length of
	// LeakyBucket, in units, at most 2^40. Ignored by the other
	// algorithms. Default (0): Rate.
	Burst int
	// MaxDelay caps the Delay a LeakyBucket request may be given: a request
	// that would have to wait longer is denied without taking capacity.
	// Ignored by the other algorithms. Default (0): no cap beyond Burst.
	MaxDelay time.Duration
	// Calendar aligns a FixedWindow's windows to calendar days, ISO weeks
	// (from Monday) or months, starting at local midnight in Location, so
	// that 10000 per month resets on the 1st. Period must then be 0.
	// Default: NoCalendar (windows of Period, aligned to the Unix epoch).
	Calendar Calendar
	// Location is the time zone of a Calendar's days. Default (nil): UTC.
	Location *time.Location
}

// PerSecond returns a token bucket of n per second, burst n.
func PerSecond(n int) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute returns a token bucket of n per minute, burst n.
func PerMinute(n int) Limit { return Limit{Rate: n, Period: time.Minute} }

// PerHour returns a token bucket of n per hour, burst n.
func PerHour(n int) Limit { return Limit{Rate: n, Period: time.Hour} }

// PerMonth returns a fixed window of n per calendar month in loc (nil:
// UTC), starting at midnight on the 1st.
func PerMonth(n int, loc *time.Location) Limit {
	return Limit{Algorithm: FixedWindow, Rate: n, Calendar: Monthly, Location: loc}
}

// InFlight returns a Concurrency limit of n requests in flight, whose
// permits lapse 10 seconds after they were taken or last renewed.
func InFlight(n int) Limit { return Limit{Algorithm: Concurrency, Rate: n, Period: 10 * time.Second} }

const (
	maxRate        = 1 << 40
	maxConcurrency = 1 << 20
	// maxWindowRate bounds a period FixedWindow's Rate: its state holds
	// the count in the low 35 bits of an integer (see fixed_window.lua).
	maxWindowRate = 1 << 33
	maxPeriod     = 1 << 46 // µs
	// maxScaled bounds a scaled capacity (a bucket's, or a counter
	// window's rate times its ticks), so that every sum a script forms
	// stays below 2^53, which a Lua (IEEE double) number holds exactly.
	maxScaled = 1 << 50
	// maxCharge bounds the n of one charge, so that its code (n*8 + mode)
	// is an integer a Lua number holds exactly.
	maxCharge = 1 << 49
	// maxDebt and maxDebtWait bound a bucket's debt: in scaled units, so
	// that every sum stays below 2^53 (a debt plus a full bucket), and in
	// time (µs, about 142 years), so that every wait is a time.Duration.
	maxDebt     = 1 << 52
	maxDebtWait = 1 << 52
)

// Validate reports whether l can be enforced, with an error that names the
// offending field.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// Capacity is the most a key can hold at once: Burst (default Rate) for the
// buckets, Rate for the others. It is the largest cost a request may have,
// and 0 <= Result.Remaining <= Capacity always holds.
func (l Limit) Capacity() int {
	if l.Algorithm.known() && algorithms[l.Algorithm].burst && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// params is a validated Limit in the integer units the scripts use.
//
// Time is in microseconds, or for limits too large for that in ticks of a
// power of ten microseconds (tick). The buckets count capacity in units of
// 1/period of a token so that the refill per tick (rate) is an integer;
// period and rate are first divided by their GCD to keep the products
// small. The window algorithms count in units.
type params struct {
	period   int64 // µs (windows), or ticks reduced by the gcd (buckets)
	rate     int64 // refill per tick in scaled units (buckets), or Rate
	capacity int64 // Capacity()
	maxDelay int64 // µs, LeakyBucket only; 0 = none
	tick     int64 // µs per tick (buckets, SlidingWindowCounter)
	debt     int64 // scaled units a bucket may hold below empty (see deepest)
}

func (l Limit) params() (params, error) {
	if err := l.check(); err != nil {
		return params{}, err
	}
	if l.Calendar != NoCalendar {
		return params{rate: int64(l.Rate), capacity: int64(l.Rate), tick: 1}, nil
	}
	period := l.Period.Microseconds()
	if l.Period%time.Microsecond != 0 {
		period++
	}
	if l.Algorithm == FixedWindow { // a window ends with its key's expiry: whole ms
		period = ceilDiv(period, 1000) * 1000
	}
	p := params{period: period, rate: int64(l.Rate), capacity: int64(l.Capacity()), maxDelay: l.MaxDelay.Microseconds(), tick: 1}
	if p.maxDelay == 0 && l.MaxDelay > 0 {
		p.maxDelay = 1 // a bound under 1µs, not "no bound" (0)
	}
	switch {
	case algorithms[l.Algorithm].burst:
		// The smallest tick whose scaled capacity is exact.
		for p.tick = 1; p.tick <= period; p.tick *= 10 {
			ticks := ceilDiv(period, p.tick)
			g := gcd(ticks, int64(l.Rate))
			if p.capacity <= maxScaled/(ticks/g) {
				p.period, p.rate = ticks/g, int64(l.Rate)/g
				p.debt = p.deepest()
				return p, nil
			}
		}
		return params{}, fmt.Errorf("%w: Burst %d over Period %v is beyond exact integer arithmetic at any tick", ErrInvalidLimit, p.capacity, l.Period)
	case l.Algorithm == SlidingWindowCounter:
		for p.tick = 1; p.tick <= period; p.tick *= 10 {
			if p.rate <= maxScaled/ceilDiv(period, p.tick) {
				return p, nil
			}
		}
		return params{}, fmt.Errorf("%w: Rate %d over Period %v is beyond exact integer arithmetic at any tick", ErrInvalidLimit, p.rate, l.Period)
	}
	return p, nil
}

// check validates the fields one by one.
func (l Limit) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidLimit}, args...)...)
	}
	switch {
	case !l.Algorithm.known():
		return bad("Algorithm %d is unknown", l.Algorithm)
	case l.Rate <= 0:
		return bad("Rate must be > 0, got %d", l.Rate)
	case l.Rate > maxRate:
		return bad("Rate must be <= 2^40, got %d", l.Rate)
	case l.Burst < 0 || l.Burst > maxRate:
		return bad("Burst must be 0 to 2^40, got %d", l.Burst)
	case l.MaxDelay < 0:
		return bad("MaxDelay must be >= 0, got %v", l.MaxDelay)
	case l.Calendar != NoCalendar:
		switch {
		case !l.Calendar.known():
			return bad("Calendar %d is unknown", l.Calendar)
		case l.Algorithm != FixedWindow:
			return bad("a Calendar needs Algorithm FixedWindow, got %s", l.Algorithm)
		case l.Period != 0:
			return bad("Period must be 0 with a Calendar, got %v", l.Period)
		}
		return nil
	case l.Location != nil:
		return bad("Location is only for a Calendar")
	case l.Period < time.Microsecond:
		return bad("Period must be >= 1µs, got %v", l.Period)
	case l.Period > maxPeriod*time.Microsecond:
		return bad("Period must be <= 2^46µs (about 2.2 years), got %v", l.Period)
	case l.Algorithm == FixedWindow && l.Rate > maxWindowRate:
		return bad("Rate must be <= 2^33 for a FixedWindow over a Period, got %d", l.Rate)
	case l.Algorithm == Concurrency && l.Rate > maxConcurrency:
		return bad("Rate must be <= 2^20 for Concurrency, got %d", l.Rate)
	case l.Algorithm == Concurrency && l.Period < time.Millisecond:
		return bad("Period must be >= 1ms for Concurrency (a permit's life), got %v", l.Period)
	}
	return nil
}

// deepest is the debt a bucket of p may hold below empty, in scaled
// units: at most maxDebt, so that every sum stays exact; at most what one
// charge of maxCharge units takes from a full bucket, so that one charge
// reaches it; and at most what refills to full within maxDebtWait, so that
// no wait overflows.
func (p params) deepest() int64 {
	full := p.capacity * p.period // <= maxScaled
	d := int64(maxDebt)
	if p.period <= (maxDebt+full)/maxCharge {
		d = min(d, maxCharge*p.period-full)
	}
	if ticks := maxDebtWait / p.tick; p.rate <= (maxDebt+full)/ticks {
		d = min(d, ticks*p.rate-full)
	}
	return max(d, 0)
}

// mostCharged is the largest n a charge of layer p takes: beyond it, the
// state is as deep in debt as it can be (a bucket), or 2^40 units, more
// than any window's Rate, for the windows.
func (p params) mostCharged(row *algorithm) int64 {
	if !row.burst {
		return maxRate
	}
	return max(1, ceilDiv(p.capacity*p.period+p.debt, p.period))
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b } // a >= 0, b > 0
