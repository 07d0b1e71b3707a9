package core

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limit is a quota: Rate units per Period, enforced by Algorithm. The zero
// Limit is invalid; PerSecond, PerMinute and PerHour build common ones, and
// its text form ("10/s", "100/min burst=200", "5/2s sliding_window") lets
// one come from a flag, an environment variable, JSON or YAML.
//
// A Limit is a plain value: changing the Limit passed for a key takes effect
// on the next call, without a Reset and without handing out free units.
type Limit struct {
	// Algorithm enforces the quota. Default: TokenBucket.
	Algorithm Algorithm
	// Rate is how many units (requests, or their cost) Period allows. Must
	// be > 0.
	Rate int
	// Period is the length of the window, or the time the buckets take to
	// refill (drain) Rate units. Must be >= 1µs; it is used in whole
	// microseconds, rounded up, so the Limit enforced is never looser than
	// the one given.
	Period time.Duration
	// Burst is the capacity of TokenBucket and the queue length of
	// LeakyBucket, in units. Ignored by the window algorithms.
	// Default (0): Rate.
	Burst int
	// MaxDelay caps the Delay a LeakyBucket request may be given: a request
	// that would have to wait longer is denied without taking capacity.
	// Ignored by the other algorithms. Default (0): no cap beyond Burst.
	MaxDelay time.Duration
}

// PerSecond returns a token bucket of n per second, burst n.
func PerSecond(n int) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute returns a token bucket of n per minute, burst n.
func PerMinute(n int) Limit { return Limit{Rate: n, Period: time.Minute} }

// PerHour returns a token bucket of n per hour, burst n.
func PerHour(n int) Limit { return Limit{Rate: n, Period: time.Hour} }

// ErrInvalidLimit is wrapped by every error about a Limit that cannot be
// enforced or parsed; the message names the field.
var ErrInvalidLimit = errors.New("core: invalid limit")

// maxExact is the largest integer a Lua (IEEE double) number holds exactly.
// The scripts compute in integers scaled to microseconds, so every sum
// they form must stay below it.
const maxExact = 1 << 53

// Validate reports whether l can be enforced, with an error that names the
// offending field.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// Capacity is the most a key can hold at once: Burst (default Rate) for the
// buckets, Rate for the window algorithms. It is the largest cost a request
// may have, and 0 <= Result.Remaining <= Capacity always holds.
func (l Limit) Capacity() int {
	if l.Algorithm.known() && algorithms[l.Algorithm].burst && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// params is a validated Limit in the integer units the scripts use.
//
// Time is in microseconds. The buckets count capacity in units of
// 1/period of a token so that the refill per microsecond (rate) is an
// integer; period and rate are first divided by their GCD to keep the
// products small. The window algorithms only need period.
type params struct {
	period   int64 // µs, reduced by the gcd for the buckets
	rate     int64 // refill per µs in scaled units (buckets), or Rate (windows)
	capacity int64 // Capacity()
	maxDelay int64 // µs, LeakyBucket only; 0 = none
}

func (l Limit) params() (params, error) {
	switch {
	case !l.Algorithm.known():
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
	p := params{period: period, rate: int64(l.Rate), capacity: int64(l.Capacity()), maxDelay: l.MaxDelay.Microseconds()}
	if p.maxDelay == 0 && l.MaxDelay > 0 {
		p.maxDelay = 1 // a bound under 1µs, not "no bound" (0)
	}
	if algorithms[l.Algorithm].burst {
		g := gcd(period, p.rate)
		p.period, p.rate = period/g, p.rate/g
	}
	// The largest sum a script forms is under twice capacity*period (a full
	// bucket plus a cost in scaled units, or the weighted window counts);
	// current Unix time in µs plus two periods must also stay exact.
	if p.capacity > maxExact/2/p.period || period > maxExact/4 {
		return params{}, fmt.Errorf("%w: Rate/Burst %d over Period %v exceeds the exact range of Redis Lua numbers (2 × capacity × period in µs must be < 2^53)",
			ErrInvalidLimit, p.capacity, l.Period)
	}
	return p, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// String returns the Limit's text form: "<rate>/<period>", then the
// algorithm unless it is TokenBucket, then "burst=<n>" and
// "max-delay=<duration>" when set. PerSecond(10) is "10/s", PerMinute(100)
// "100/min", PerHour(5000) "5000/h"; another period is a Go duration
// ("5/2s", "30/1m30s").
func (l Limit) String() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(l.Rate))
	b.WriteByte('/')
	b.WriteString(formatPeriod(l.Period))
	if l.Algorithm != TokenBucket {
		b.WriteByte(' ')
		b.WriteString(l.Algorithm.String())
	}
	if l.Burst != 0 {
		b.WriteString(" burst=")
		b.WriteString(strconv.Itoa(l.Burst))
	}
	if l.MaxDelay != 0 {
		b.WriteString(" max-delay=")
		b.WriteString(l.MaxDelay.String())
	}
	return b.String()
}

// MarshalText returns the Limit's text form (see String).
func (l Limit) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses a Limit's text form and validates it. The period is
// a unit ("s", "sec", "second", "min", "minute", "h", "hour", "day"), a
// number and a unit ("2min"), or a Go duration ("2s", "1m30s"); the fields
// after it, separated by spaces, are an algorithm name, "burst=<n>" and
// "max-delay=<Go duration>", in any order.
func (l *Limit) UnmarshalText(text []byte) error {
	fields := strings.Fields(string(text))
	if len(fields) == 0 {
		return fmt.Errorf("%w: empty, want \"<rate>/<period>\" such as 10/s", ErrInvalidLimit)
	}
	rate, period, ok := strings.Cut(fields[0], "/")
	if !ok {
		return fmt.Errorf("%w: %q: want \"<rate>/<period>\" such as 10/s", ErrInvalidLimit, fields[0])
	}
	var out Limit
	var err error
	if out.Rate, err = strconv.Atoi(rate); err != nil {
		return fmt.Errorf("%w: rate %q is not an integer", ErrInvalidLimit, rate)
	}
	if out.Period, err = parsePeriod(period); err != nil {
		return err
	}
	for _, f := range fields[1:] {
		name, value, _ := strings.Cut(f, "=")
		switch name {
		case "burst":
			if out.Burst, err = strconv.Atoi(value); err != nil {
				return fmt.Errorf("%w: burst %q is not an integer", ErrInvalidLimit, value)
			}
		case "max-delay":
			if out.MaxDelay, err = time.ParseDuration(value); err != nil {
				return fmt.Errorf("%w: max-delay %q is not a Go duration", ErrInvalidLimit, value)
			}
		default:
			if err := out.Algorithm.UnmarshalText([]byte(f)); err != nil {
				return fmt.Errorf("%w: %q is neither an algorithm nor burst= or max-delay=", ErrInvalidLimit, f)
			}
		}
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*l = out
	return nil
}

var periodUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

func parsePeriod(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	digits := len(s) - len(strings.TrimLeft(s, "0123456789"))
	unit, ok := periodUnits[s[digits:]]
	if !ok {
		return 0, fmt.Errorf("%w: period %q: want a unit (s, min, h, day), a number and a unit (2min), or a Go duration (1m30s)", ErrInvalidLimit, s)
	}
	n := int64(1)
	if digits > 0 {
		var err error
		if n, err = strconv.ParseInt(s[:digits], 10, 64); err != nil || n > int64(1<<62)/int64(unit) {
			return 0, fmt.Errorf("%w: period %q is too long", ErrInvalidLimit, s)
		}
	}
	return time.Duration(n) * unit, nil
}

func formatPeriod(d time.Duration) string {
	switch {
	case d == time.Second:
		return "s"
	case d == time.Minute:
		return "min"
	case d == time.Hour:
		return "h"
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d > 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "min"
	}
	return d.String()
}
