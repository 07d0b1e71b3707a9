package core

import (
	"fmt"
	"strconv"
	"time"
)

// Calendar aligns a FixedWindow's windows to the calendar (see
// Limit.Calendar). Its text form is its name: "none", "day", "week",
// "month".
type Calendar uint8

const (
	// NoCalendar: windows of Limit.Period, aligned to the Unix epoch.
	NoCalendar Calendar = iota
	// Daily: each day from local midnight, or, on a day whose midnight a
	// clock change skips, from the instant it jumps past it (a day a zone
	// skips whole has no window).
	Daily
	// Weekly: each ISO week, from Monday at local midnight.
	Weekly
	// Monthly: each month, from the 1st at local midnight; 28 to 31 days.
	Monthly
)

var calendarNames = [...]string{"none", "day", "week", "month"}

func (c Calendar) known() bool { return int(c) < len(calendarNames) }

// String returns the calendar's name.
func (c Calendar) String() string {
	if c.known() {
		return calendarNames[c]
	}
	return "Calendar(" + strconv.Itoa(int(c)) + ")"
}

// MarshalText returns the calendar's name, or an error for an unknown one.
func (c Calendar) MarshalText() ([]byte, error) {
	if !c.known() {
		return nil, fmt.Errorf("%w: Calendar %d is unknown", ErrInvalidLimit, c)
	}
	return []byte(calendarNames[c]), nil
}

// UnmarshalText sets c to the calendar named by text.
func (c *Calendar) UnmarshalText(text []byte) error {
	for i, name := range calendarNames {
		if string(text) == name {
			*c = Calendar(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown calendar %q, want none, day, week or month", ErrInvalidLimit, text)
}

// start is the start of the window that holds t: the first instant of
// its label (see label), or a later window's start where the wall clock
// went back across a bound.
func (c Calendar) start(t time.Time, loc *time.Location) time.Time {
	s := first(c.label(t.In(loc)), loc)
	for n := c.next(s); !n.After(t); n = c.next(s) {
		s = n
	}
	return s
}

// next is the start of the window after the one that starts at s. That
// window is the one of s's own date, which is later than the label s was
// computed from only where a zone skipped that label's whole day.
func (c Calendar) next(s time.Time) time.Time {
	l := c.label(s)
	switch c {
	case Weekly:
		l = l.AddDate(0, 0, 7)
	case Monthly:
		l = l.AddDate(0, 1, 0)
	default:
		l = l.AddDate(0, 0, 1)
	}
	return first(l, s.Location())
}

// label is the date that names the window of t's wall-clock date, as
// midnight UTC: the date itself, the Monday of its ISO week, or the 1st
// of its month.
func (c Calendar) label(t time.Time) time.Time {
	y, m, d := t.Date()
	switch c {
	case Weekly:
		d -= (int(t.Weekday()) + 6) % 7
	case Monthly:
		d = 1
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// ordinal numbers the window that starts at s, so that a debt can count
// the windows gone by: its label's days, ISO weeks or months since 1970.
func (c Calendar) ordinal(s time.Time) int64 {
	l := c.label(s)
	switch c {
	case Weekly:
		return (l.Unix()/86400 - 4) / 7 // 1970-01-05 was a Monday
	case Monthly:
		return int64(l.Year()-1970)*12 + int64(l.Month()-1)
	}
	return l.Unix() / 86400
}

// first is the first instant in loc of date (midnight UTC): its midnight,
// or, where a clock change skips midnight, the instant the clock jumps
// past it (time.Date goes back to the previous day's 23:00 there, which
// is not that day's). It is the least instant whose wall clock reads date
// or later: within one zone period the wall clock is the instant plus the
// period's offset, so the periods are walked from a day and more before,
// earlier than midnight at any offset.
func first(date time.Time, loc *time.Location) time.Time {
	midnight := date.Unix() // the wall clock's reading
	u := midnight - 26*3600
	for {
		offset := offsetAt(u, loc)
		end, ok := zoneEnd(u, offset, loc)
		at := max(u, midnight-offset)
		if !ok || at < end {
			return time.Unix(at, 0).In(loc)
		}
		u = end
	}
}

func offsetAt(u int64, loc *time.Location) int64 {
	_, offset := time.Unix(u, 0).In(loc).Zone()
	return int64(offset)
}

// zoneEnd is when the zone period of loc that holds u (Unix seconds) and
// whose offset is offset ends; false if it never does. It may end early,
// at a time that only ends a year, as time.Time.ZoneBounds does. For the
// years past a zone's table, ZoneBounds may even end the period at u or
// before (on the last day of a leap year): the change is then looked for
// in the day after u.
func zoneEnd(u, offset int64, loc *time.Location) (int64, bool) {
	_, end := time.Unix(u, 0).In(loc).ZoneBounds()
	if end.IsZero() {
		return 0, false
	}
	if e := end.Unix(); e > u {
		return e, true
	}
	lo, hi := u, u+86400
	if offsetAt(hi, loc) == offset {
		return hi, true
	}
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; offsetAt(mid, loc) == offset {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, true
}

// calendarWindows are the starts of four consecutive windows, µs: the one
// before the window that holds now, that window, and two after, so that
// a Redis clock up to a window away from the client's still finds its
// window among them. They are valid while the client's clock is in
// [b[1], b[2]).
type calendarWindows struct {
	b    [4]int64
	args []int64 // the calendar window's Limit: rate, then b, then their ordinals
}

func newCalendarWindows(l Limit, now time.Time) *calendarWindows {
	loc := l.Location
	if loc == nil {
		loc = time.UTC
	}
	c := l.Calendar
	var s [4]time.Time
	s[1] = c.start(now, loc)
	s[0] = c.start(s[1].Add(-time.Nanosecond), loc)
	s[2] = c.next(s[1])
	s[3] = c.next(s[2])
	w := &calendarWindows{args: []int64{int64(l.Rate)}}
	for i, t := range s {
		w.b[i] = t.UnixMicro()
	}
	w.args = append(w.args, w.b[:]...)
	for _, t := range s {
		w.args = append(w.args, c.ordinal(t))
	}
	return w
}

func (w *calendarWindows) holds(now time.Time) bool {
	us := now.UnixMicro()
	return us >= w.b[1] && us < w.b[2]
}

// Window is the calendar window of l that holds t: its first instant and
// the first instant of the next window, in l's Location (UTC when nil).
// ok is false for a Limit without a Calendar. A day whose midnight a clock
// change skips starts when the clock jumps past it, so a window may be 23
// or 25 hours long, or shorter still; end is always after start.
func (l Limit) Window(t time.Time) (start, end time.Time, ok bool) {
	if l.Calendar == NoCalendar || !l.Calendar.known() {
		return time.Time{}, time.Time{}, false
	}
	loc := l.Location
	if loc == nil {
		loc = time.UTC
	}
	start = l.Calendar.start(t, loc)
	return start, l.Calendar.next(start), true
}
