package core

import (
	"archive/zip"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // every zone loads, whatever the machine has

	"github.com/redlimit/redlimit/internal/redistest"
)

// tzdataZones lists the zones of Go's own tzdata, read from
// $GOROOT/lib/time/zoneinfo.zip (time/tzdata embeds the same file but
// does not list it), or, where a Go installation ships without it, the
// zones of the system's /usr/share/zoneinfo.
func tzdataZones(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		redistest.Missing(t, "no go command to find GOROOT's zoneinfo.zip: %v", err)
	}
	var zones []string
	if zr, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(out)), "lib", "time", "zoneinfo.zip")); err == nil {
		defer func() { _ = zr.Close() }()
		for _, f := range zr.File {
			if !strings.HasSuffix(f.Name, "/") {
				zones = append(zones, f.Name)
			}
		}
	} else {
		zones = systemZones("/usr/share/zoneinfo")
	}
	if len(zones) < 300 {
		redistest.Missing(t, "found %d zones (no zoneinfo.zip in GOROOT, nor a tzdata in /usr/share/zoneinfo), want the whole tzdata", len(zones))
	}
	return zones
}

// systemZones lists the zone names under dir that Go loads, leaving out
// the tables and the posix/ and right/ copies.
func systemZones(dir string) []string {
	var zones []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name, _ := filepath.Rel(dir, path)
		switch {
		case d.IsDir() && (name == "posix" || name == "right"):
			return filepath.SkipDir
		case d.IsDir() || strings.ContainsAny(name, ".") || name == "posixrules" || name == "localtime":
			return nil
		}
		if _, err := time.LoadLocation(name); err == nil {
			zones = append(zones, name)
		}
		return nil
	})
	return zones
}

// checkWindow checks the window [s, next(s)) of c in s's zone: it is not
// empty, its start is a first instant (local midnight, or the instant a
// clock change jumps past it) and is its own start, and start finds it from
// its first and last instants and from every zone change inside it.
func checkWindow(t *testing.T, c Calendar, s time.Time) (time.Time, bool) {
	t.Helper()
	loc := s.Location()
	n := c.next(s)
	fail := func(format string, args ...any) (time.Time, bool) {
		t.Helper()
		t.Errorf("%s %s, window from %v to %v: "+format, append([]any{loc, c, s, n}, args...)...)
		return n, false
	}
	if !n.After(s) {
		return fail("bounds not increasing")
	}
	if h, m, sec := s.Clock(); (h != 0 || m != 0 || sec != 0) && !isZoneChange(s) {
		return fail("starts neither at midnight nor at a clock change")
	}
	if before := s.Add(-time.Second); !dateBefore(before, s) {
		return fail("the second before its start, %v, is of its date already", before)
	}
	at := []time.Time{s, n.Add(-time.Nanosecond)}
	for u := s.Unix(); ; {
		end, ok := zoneEnd(u, offsetAt(u, loc), loc)
		if !ok || end >= n.Unix() {
			break
		}
		at = append(at, time.Unix(end, 0).Add(-time.Nanosecond), time.Unix(end, 0))
		u = end
	}
	for _, u := range at {
		if got := c.start(u, loc); !got.Equal(s) {
			return fail("start(%v) = %v", u, got)
		}
	}
	return n, true
}

func isZoneChange(s time.Time) bool {
	start, _ := s.ZoneBounds()
	return start.Equal(s)
}

func dateBefore(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return time.Date(ay, am, ad, 0, 0, 0, 0, time.UTC).Before(time.Date(by, bm, bd, 0, 0, 0, 0, time.UTC))
}

// TestCalendarBoundsEveryZone backs Limit.Calendar's windows in every zone
// of the tzdata from 2000 to 2040, days, ISO weeks and months: each
// window's bounds are strictly increasing, start(t) <= t < next(start(t)),
// and a window's start is its own start. Where daylight saving skips
// midnight (America/Santiago each September, America/Havana and
// Atlantic/Azores each March) the day starts when the clock jumps past it.
// Each window and each zone change inside it is checked: the default run
// checks the windows next to a zone change, CI every window.
// Guards: "from local midnight, or, on a day whose midnight a clock change
// skips, from the instant it jumps past it" (Daily's godoc).
func TestCalendarBoundsEveryZone(t *testing.T) {
	zones := tzdataZones(t)
	from, to := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2041, 1, 1, 0, 0, 0, 0, time.UTC)
	every := redistest.Long()
	if !every {
		redistest.Reduced(t, "calendar windows next to a zone change, not every window")
	}
	begin, windows := time.Now(), 0
	for _, name := range zones {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range []Calendar{Daily, Weekly, Monthly} {
			if every {
				windows += checkWindows(t, c, from.In(loc), to)
				continue
			}
			for u := from.Unix(); ; {
				end, ok := zoneEnd(u, offsetAt(u, loc), loc)
				if !ok || end >= to.Unix() {
					break
				}
				change := time.Unix(end, 0).In(loc)
				windows += checkWindows(t, c, change.Add(-30*time.Hour), change.Add(30*time.Hour))
				u = end
			}
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d zones, %d windows, in %v", len(zones), windows, time.Since(begin))
}

// checkWindows checks c's windows from the one that holds from until one
// starts at to or later, and returns how many it checked.
func checkWindows(t *testing.T, c Calendar, from, to time.Time) int {
	t.Helper()
	n := 0
	for s, ok := c.start(from, from.Location()), true; ok && s.Before(to); n++ {
		s, ok = checkWindow(t, c, s)
	}
	return n
}
