package core

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// calendarLimiter is a Limiter on miniredis whose application clock is the
// miniredis clock the test sets, as redlimittest wires it.
func calendarLimiter(t *testing.T) (*miniredis.Miniredis, *Limiter, func(time.Time)) {
	t.Helper()
	mr, _ := redistest.Mini(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	var now time.Time
	l, err := New(rdb, WithPrefix("cal"), WithTimeout(time.Minute), WithLogger(nil), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	return mr, l, func(t time.Time) {
		now = t
		redistest.SetTime(mr, t)
	}
}

func mustLocation(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("no time zone %s on this machine: %v", name, err)
	}
	return loc
}

// TestCalendarWindows backs Limit.Calendar's "10000 per month resets on
// the 1st" at local midnight, over months of 28 to 31 days, leap days, ISO
// weeks and days of 23 and 25 hours (daylight saving): a spent quota waits
// exactly until the next local midnight of its window, and is whole then.
func TestCalendarWindows(t *testing.T) {
	ctx := context.Background()
	ny := mustLocation(t, "America/New_York")
	berlin := mustLocation(t, "Europe/Berlin")
	tests := []struct {
		name  string
		lim   Limit
		at    time.Time // the quota is spent here
		reset time.Time // the next window begins
	}{
		{"month end, New York", Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Monthly, Location: ny},
			time.Date(2026, 1, 31, 23, 59, 59, 500_000_000, ny), time.Date(2026, 2, 1, 0, 0, 0, 0, ny)},
		{"a month of 28 days", PerMonth(3, nil), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"leap day", Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Daily},
			time.Date(2028, 2, 29, 23, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"the month of a leap day", PerMonth(3, nil), time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"a day of 23 hours, Berlin", Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Daily, Location: berlin},
			time.Date(2026, 3, 29, 0, 0, 0, 0, berlin), time.Date(2026, 3, 30, 0, 0, 0, 0, berlin)},
		{"a day of 25 hours, Berlin", Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Daily, Location: berlin},
			time.Date(2026, 10, 25, 0, 30, 0, 0, berlin), time.Date(2026, 10, 26, 0, 0, 0, 0, berlin)},
		{"an ISO week, Sunday night", Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Weekly},
			time.Date(2026, 1, 4, 23, 0, 0, 0, time.UTC), time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)},
		{"an ISO week, Monday", Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Weekly},
			time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 12, 0, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, l, set := calendarLimiter(t)
			set(tt.at)
			if r, err := l.Allow(ctx, 3, tt.lim.For("k")); err != nil || !r.Allowed || r.ResetAfter != tt.reset.Sub(tt.at) {
				t.Fatalf("AllowN(3) = %+v, %v; want admitted, whole again in %v", r, err, tt.reset.Sub(tt.at))
			}
			r, err := l.Allow(ctx, 1, tt.lim.For("k"))
			if err != nil || r.Allowed || r.RetryAfter != tt.reset.Sub(tt.at) {
				t.Fatalf("Allow = %+v, %v; want denied until %v (%v)", r, err, tt.reset, tt.reset.Sub(tt.at))
			}
			set(tt.reset.Add(-time.Microsecond))
			if r, _ := l.Allow(ctx, 1, tt.lim.For("k")); r.Allowed {
				t.Errorf("admitted 1µs before the window ends: %+v", r)
			}
			set(tt.reset)
			if r, err := l.Allow(ctx, 3, tt.lim.For("k")); err != nil || !r.Allowed {
				t.Errorf("at the next window: AllowN(3) = %+v, %v; want the whole quota", r, err)
			}
		})
	}
}

// TestCalendarDebt backs Settle's calendar rule: a debt carries into the
// next calendar window, and that window's own length counts.
func TestCalendarDebt(t *testing.T) {
	ctx := context.Background()
	_, l, set := calendarLimiter(t)
	lim := PerMonth(10, nil)
	jan := time.Date(2026, 1, 20, 0, 0, 0, 0, time.UTC)
	set(jan)
	taken, err := l.Allow(ctx, 1, lim.For("k"))
	if err != nil || !taken.Allowed {
		t.Fatal(taken, err)
	}
	// 1 taken, 14 used: January is spent and February starts at 4.
	if _, err := l.Settle(ctx, taken, 14); err != nil {
		t.Fatal(err)
	}
	feb := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	if r, _ := l.Allow(ctx, 1, lim.For("k")); r.Allowed || r.RetryAfter != feb.Sub(jan) {
		t.Errorf("in January after the debt: %+v, want denied until February", r)
	}
	set(feb)
	if r, err := l.Allow(ctx, 6, lim.For("k")); err != nil || !r.Allowed {
		t.Errorf("February: AllowN(6) = %+v, %v; want admitted", r, err)
	}
	if r, _ := l.Allow(ctx, 1, lim.For("k")); r.Allowed {
		t.Errorf("February admitted an 11th unit counting the debt: %+v", r)
	}
}

// windowStarts are the starts of lim's window that holds t and of the n
// windows after it.
func windowStarts(lim Limit, t time.Time, n int) []time.Time {
	var s time.Time
	if lim.Calendar == NoCalendar {
		s = time.UnixMicro(t.UnixMicro() / lim.Period.Microseconds() * lim.Period.Microseconds())
	} else {
		loc := lim.Location
		if loc == nil {
			loc = time.UTC
		}
		s = lim.Calendar.start(t, loc)
	}
	out := []time.Time{s}
	for range n {
		if lim.Calendar == NoCalendar {
			s = s.Add(lim.Period)
		} else {
			s = lim.Calendar.next(s)
		}
		out = append(out, s)
	}
	return out
}

// checkDebt takes 1 of key at t, settles (k+1) x Rate, and checks that
// the key is refused from then through the k-th following window (at its
// start and its last µs), and whole at the start of the one after.
func checkDebt(t *testing.T, l *Limiter, mr *miniredis.Miniredis, set func(time.Time), key string, lim Limit, at time.Time, k int) {
	t.Helper()
	ctx := context.Background()
	set(at)
	taken, err := l.Allow(ctx, 1, lim.For(key))
	if err != nil || !taken.Allowed {
		t.Fatalf("%s: take = %+v, %v", key, taken, err)
	}
	if _, err := l.Settle(ctx, taken, (k+1)*lim.Rate); err != nil {
		t.Fatalf("%s: Settle: %v", key, err)
	}
	w := windowStarts(lim, at, k+1)
	state := stateKeys(nil, l.prefix, escapeTag(key), lim.row(), 0)[0]
	if ttl := mr.TTL(state); k > 0 && ttl < w[k+1].Sub(at)-time.Millisecond {
		t.Errorf("%s, debt of %d windows: the state expires in %v, before the debt is paid (%v)", key, k, ttl, w[k+1].Sub(at))
	}
	for m := 0; m <= k; m++ {
		first := w[m]
		if m == 0 {
			first = at
		}
		for _, now := range []time.Time{first, w[m+1].Add(-time.Microsecond)} {
			set(now)
			r, err := l.Allow(ctx, 1, lim.For(key))
			if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > w[k+1].Sub(now) {
				t.Fatalf("%s, debt of %d windows, at %v (window %d): %+v, %v; want refused, a wait of at most %v",
					key, k, now, m, r, err, w[k+1].Sub(now))
			}
		}
	}
	set(w[k+1])
	if r, err := l.Allow(ctx, lim.Rate, lim.For(key)); err != nil || !r.Allowed {
		t.Fatalf("%s, debt of %d windows, at %v: AllowN(Rate) = %+v, %v; want the whole quota", key, k, w[k+1], r, err)
	}
}

// TestCalendarDebtOfManyWindows: 100 per day (calendar), per month, and as
// 24 h fixed windows, a request takes 10 and settles 1000: the key is
// refused at the start of each of the 9 following windows, and admitted
// in the 10th. A calendar debt once carried one window only.
// Guards: "the windows carry what exceeds Rate into the following
// windows, Rate in each" (Settle's godoc) for calendars.
func TestCalendarDebtOfManyWindows(t *testing.T) {
	ctx := context.Background()
	_, l, set := calendarLimiter(t)
	at := time.Date(2026, 1, 20, 15, 0, 0, 0, time.UTC)
	for _, lim := range []Limit{
		{Algorithm: FixedWindow, Rate: 100, Period: 24 * time.Hour},
		{Algorithm: FixedWindow, Rate: 100, Calendar: Daily},
		PerMonth(100, nil),
	} {
		key := lim.String()
		set(at)
		taken, err := l.Allow(ctx, 10, lim.For(key))
		if err != nil || !taken.Allowed {
			t.Fatal(taken, err)
		}
		if _, err := l.Settle(ctx, taken, 1000); err != nil {
			t.Fatal(err)
		}
		w := windowStarts(lim, at, 10)
		for m := 1; m <= 9; m++ {
			set(w[m])
			if r, err := l.Allow(ctx, 1, lim.For(key)); err != nil || r.Allowed {
				t.Errorf("%s: window %d after the debt of 900: %+v, %v; want refused", lim, m, r, err)
			}
		}
		set(w[10])
		if r, err := l.Allow(ctx, 100, lim.For(key)); err != nil || !r.Allowed {
			t.Errorf("%s: window 10 after the debt: AllowN(100) = %+v, %v; want admitted", lim, r, err)
		}
	}
}

// TestCalendarDebtSweep walks debts of 0 to 12 windows under days, ISO
// weeks and months in zones whose clocks change (across their changes):
// each is refused through its k-th following window, at its start and
// its last µs, with a wait no longer than the debt's, and the state
// outlives the debt.
func TestCalendarDebtSweep(t *testing.T) {
	mr, l, set := calendarLimiter(t)
	starts := map[string]time.Time{
		"America/Santiago":    time.Date(2024, 9, 3, 18, 0, 0, 0, time.UTC),
		"America/Havana":      time.Date(2026, 3, 5, 18, 0, 0, 0, time.UTC),
		"Atlantic/Azores":     time.Date(2026, 3, 25, 18, 0, 0, 0, time.UTC),
		"Europe/Berlin":       time.Date(2026, 10, 20, 18, 0, 0, 0, time.UTC),
		"Australia/Lord_Howe": time.Date(2026, 4, 1, 18, 0, 0, 0, time.UTC),
	}
	for name, at := range starts {
		loc := mustLocation(t, name)
		for _, c := range []Calendar{Daily, Weekly, Monthly} {
			for k := range 13 {
				lim := Limit{Algorithm: FixedWindow, Rate: 3, Calendar: c, Location: loc}
				checkDebt(t, l, mr, set, fmt.Sprintf("%s %s %d", name, c, k), lim, at, k)
			}
		}
	}
}

// TestCalendarClockSkew: the windows come from the application's clock,
// and Redis' clock may be up to a window away from it either way; further,
// the call fails, naming the skew, rather than count in a wrong window.
func TestCalendarClockSkew(t *testing.T) {
	ctx := context.Background()
	mr, l, set := calendarLimiter(t)
	lim := Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Daily}
	day := time.Date(2026, 5, 10, 23, 59, 0, 0, time.UTC)
	set(day)
	redistest.SetTime(mr, day.Add(2*time.Minute)) // Redis is in the next day
	if r, err := l.Allow(ctx, 3, lim.For("k")); err != nil || !r.Allowed || r.ResetAfter != 24*time.Hour-time.Minute {
		t.Errorf("Redis a day on: %+v, %v; want its own day's window", r, err)
	}
	redistest.SetTime(mr, day.Add(72*time.Hour))
	if _, err := l.Allow(ctx, 1, lim.For("k")); err == nil || !strings.Contains(err.Error(), "calendar window") {
		t.Errorf("Redis three days on: %v, want an error about the calendar windows", err)
	}
}

// TestCalendarText: the text form of calendar Limits, and what it refuses.
func TestCalendarText(t *testing.T) {
	for _, tt := range []struct {
		text string
		want Limit
	}{
		{"10000/month", PerMonth(10000, nil)},
		{"100/day calendar", Limit{Algorithm: FixedWindow, Rate: 100, Calendar: Daily}},
		{"5/week calendar tz=Europe/Berlin", Limit{Algorithm: FixedWindow, Rate: 5, Calendar: Weekly, Location: mustLocation(t, "Europe/Berlin")}},
	} {
		var l Limit
		if err := l.UnmarshalText([]byte(tt.text)); err != nil {
			t.Errorf("%q: %v", tt.text, err)
			continue
		}
		if l.Algorithm != tt.want.Algorithm || l.Rate != tt.want.Rate || l.Calendar != tt.want.Calendar ||
			l.Location.String() != tt.want.Location.String() || l.Period != 0 {
			t.Errorf("%q = %+v, want %+v", tt.text, l, tt.want)
		}
		var back Limit
		if err := back.UnmarshalText([]byte(l.String())); err != nil || back.String() != l.String() {
			t.Errorf("%q: String %q does not parse back the same: %v", tt.text, l, err)
		}
	}
	for _, bad := range []string{"10/month token_bucket", "10/2d calendar", "10/h calendar", "10/day tz=Nowhere/City", "10/s tz=UTC"} {
		var l Limit
		if err := l.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("%q parsed as %+v, want an error", bad, l)
		}
	}
}

// TestCalendarSkippedMidnight: America/Santiago skipped 2024-09-08's
// midnight (00:00 became 01:00). 10 per day, a decision every half hour
// from the 7th at noon to the 9th at noon: none fails, and each calendar
// day admits 10, the 8th from 01:00.
// Guards: Daily's "from the instant it jumps past it".
func TestCalendarSkippedMidnight(t *testing.T) {
	ctx := context.Background()
	santiago := mustLocation(t, "America/Santiago")
	_, l, set := calendarLimiter(t)
	lim := Limit{Algorithm: FixedWindow, Rate: 10, Calendar: Daily, Location: santiago}
	admitted := map[int]int{}
	for at := time.Date(2024, 9, 7, 12, 0, 0, 0, santiago); !at.After(time.Date(2024, 9, 9, 12, 0, 0, 0, santiago)); at = at.Add(30 * time.Minute) {
		set(at)
		r, err := l.Allow(ctx, 1, lim.For("k"))
		if err != nil {
			t.Fatalf("at %v: %v", at, err)
		}
		if r.Allowed {
			admitted[at.Day()]++
		}
	}
	if want := map[int]int{7: 10, 8: 10, 9: 10}; !maps.Equal(admitted, want) {
		t.Errorf("admitted per day %v, want %v", admitted, want)
	}
}

// TestLimitWindow: Window is the window the scripts count in, on a day
// whose midnight is skipped too (Santiago's 2024-09-08 starts at 01:00 and
// lasts 23 hours), and nothing for a Limit without a Calendar.
func TestLimitWindow(t *testing.T) {
	santiago, err := time.LoadLocation("America/Santiago")
	if err != nil {
		t.Skipf("no tzdata: %v", err)
	}
	daily := Limit{Algorithm: FixedWindow, Rate: 10, Calendar: Daily, Location: santiago}
	start, end, ok := daily.Window(time.Date(2024, 9, 8, 12, 0, 0, 0, santiago))
	if wantStart := time.Date(2024, 9, 8, 4, 0, 0, 0, time.UTC); !ok || !start.Equal(wantStart) || end.Sub(start) != 23*time.Hour {
		t.Errorf("Santiago 2024-09-08: %v to %v (%t), want %v for 23h", start, end, ok, wantStart)
	}
	monthly := PerMonth(100, nil)
	start, end, ok = monthly.Window(time.Date(2024, 2, 10, 0, 0, 0, 0, time.UTC))
	if !ok || !start.Equal(time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)) || !end.Equal(time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("February 2024 in UTC: %v to %v (%t)", start, end, ok)
	}
	if _, _, ok := PerMinute(10).Window(time.Now()); ok {
		t.Error("PerMinute(10).Window: ok, want none: it has no calendar")
	}
}
