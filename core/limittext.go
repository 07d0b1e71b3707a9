package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// String returns the Limit's text form. That is "<rate>/<period>", then the
// algorithm unless it is TokenBucket (or implied by a calendar month),
// then "burst=<n>" and "max-delay=<duration>" when set, "calendar" for
// calendar days and weeks, and "tz=<name>" for a Location. PerSecond(10)
// is "10/s", PerMinute(100) "100/min", PerHour(5000) "5000/h",
// PerMonth(10000, nil) "10000/month"; another period is a Go duration
// ("5/2s", "30/1m30s") or whole days or weeks ("3/2d", "1/w").
func (l Limit) String() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(l.Rate))
	b.WriteByte('/')
	switch l.Calendar {
	case Daily:
		b.WriteString("day calendar")
	case Weekly:
		b.WriteString("week calendar")
	case Monthly:
		b.WriteString("month")
	default:
		b.WriteString(formatPeriod(l.Period))
	}
	if l.Algorithm != TokenBucket && (l.Calendar == NoCalendar || l.Algorithm != FixedWindow) {
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
	if l.Location != nil {
		b.WriteString(" tz=")
		b.WriteString(l.Location.String())
	}
	return b.String()
}

// MarshalText returns the Limit's text form (see String).
func (l Limit) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses a Limit's text form and validates it. The period is
// a unit ("s", "sec", "second", "min", "minute", "h", "hour", "d", "day",
// "w", "week"), a number and a unit ("2min", "3d"), or a Go duration ("2s",
// "1m30s"), or "month", a calendar month; the fields after it, separated by
// spaces, are an algorithm name, "burst=<n>", "max-delay=<Go duration>",
// "calendar" (align a day or week to the calendar: a FixedWindow) and
// "tz=<IANA time zone>" (a calendar's time zone), in any order.
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
	calendar, algorithm := period == "month", false
	if !calendar {
		if out.Period, err = parsePeriod(period); err != nil {
			return err
		}
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
		case "tz":
			if out.Location, err = time.LoadLocation(value); err != nil || value == "" {
				return fmt.Errorf("%w: tz %q is not a time zone", ErrInvalidLimit, value)
			}
		case "calendar":
			calendar = true
		default:
			if err := out.Algorithm.UnmarshalText([]byte(f)); err != nil {
				return fmt.Errorf("%w: %q is neither an algorithm nor burst=, max-delay=, calendar or tz=", ErrInvalidLimit, f)
			}
			algorithm = true
		}
	}
	if calendar {
		if out.Calendar, ok = calendarUnits[period]; !ok {
			return fmt.Errorf("%w: calendar periods are day, week and month, got %q", ErrInvalidLimit, period)
		}
		out.Period = 0
		if !algorithm {
			out.Algorithm = FixedWindow
		}
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*l = out
	return nil
}

var calendarUnits = map[string]Calendar{"d": Daily, "day": Daily, "w": Weekly, "week": Weekly, "month": Monthly}

var periodUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour,
}

func parsePeriod(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	digits := len(s) - len(strings.TrimLeft(s, "0123456789"))
	unit, ok := periodUnits[s[digits:]]
	if !ok {
		return 0, fmt.Errorf("%w: period %q: want a unit (s, min, h, day, week), a number and a unit (2min), a Go duration (1m30s), or month", ErrInvalidLimit, s)
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
	const day, week = 24 * time.Hour, 7 * 24 * time.Hour
	switch {
	case d == time.Second:
		return "s"
	case d == time.Minute:
		return "min"
	case d == time.Hour:
		return "h"
	case d == day:
		return "d"
	case d == week:
		return "w"
	case d > 0 && d%week == 0:
		return strconv.FormatInt(int64(d/week), 10) + "w"
	case d > 0 && d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d > 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "min"
	}
	return d.String()
}
