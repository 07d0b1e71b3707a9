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
	// Daily: each day from local midnight.
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

// start is the start of the window that holds t. Local midnight is what
// time.Date makes of it on a day whose midnight a daylight-saving change
// skips.
func (c Calendar) start(t time.Time, loc *time.Location) time.Time {
	t = t.In(loc)
	y, m, d := t.Date()
	switch c {
	case Weekly:
		return time.Date(y, m, d-(int(t.Weekday())+6)%7, 0, 0, 0, 0, loc)
	case Monthly:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc)
	}
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}

// next is the start of the window after the one that starts at s.
func (c Calendar) next(s time.Time) time.Time {
	y, m, d := s.Date()
	switch c {
	case Weekly:
		return time.Date(y, m, d+7, 0, 0, 0, 0, s.Location())
	case Monthly:
		return time.Date(y, m+1, 1, 0, 0, 0, 0, s.Location())
	}
	return time.Date(y, m, d+1, 0, 0, 0, 0, s.Location())
}

// calendarWindows are the starts of four consecutive windows, µs: the one
// before the window that holds now, that window, and two after, so that
// a Redis clock up to a window away from the client's still finds its
// window among them. They are valid while the client's clock is in
// [b[1], b[2]).
type calendarWindows struct {
	b    [4]int64
	args []int64 // the calendar window's Limit: rate, then b
}

func newCalendarWindows(l Limit, now time.Time) *calendarWindows {
	loc := l.Location
	if loc == nil {
		loc = time.UTC
	}
	cur := l.Calendar.start(now, loc)
	prev := l.Calendar.start(cur.Add(-time.Nanosecond), loc)
	next := l.Calendar.next(cur)
	w := &calendarWindows{b: [4]int64{prev.UnixMicro(), cur.UnixMicro(), next.UnixMicro(), l.Calendar.next(next).UnixMicro()}}
	w.args = []int64{int64(l.Rate), w.b[0], w.b[1], w.b[2], w.b[3]}
	return w
}

func (w *calendarWindows) holds(now time.Time) bool {
	us := now.UnixMicro()
	return us >= w.b[1] && us < w.b[2]
}
