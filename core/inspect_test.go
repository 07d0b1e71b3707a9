package core

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/inspect"
	"github.com/redlimit/redlimit/internal/redistest"
)

// inspectLimits are the Limits the inspect tests take decisions under: one
// per algorithm, and a calendar window.
func inspectLimits() map[string]Limit {
	out := map[string]Limit{"calendar": PerMonth(10, nil)}
	for _, a := range Algorithms() {
		out[a.String()] = Limit{Algorithm: a, Rate: 10, Period: time.Minute}
	}
	return out
}

// used is how much of its quota a decoded state says is taken: the
// capacity less the tokens of a token bucket, else the count, queue or
// permits.
func used(t *testing.T, st inspect.State, capacity int) float64 {
	t.Helper()
	for _, f := range st.Fields {
		switch f.Name {
		case "tokens":
			return float64(capacity) - f.Value
		case "count", "queued", "in_flight":
			return f.Value
		}
	}
	t.Fatalf("%s: no count in %+v", st.Key, st.Fields)
	return 0
}

// field returns the named field of st, and whether it is there.
func field(st inspect.State, name string) (float64, bool) {
	for _, f := range st.Fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// counted returns the state of algorithm at layer that holds its count
// (the sliding window's meta, not its log), if there is one.
func counted(states []inspect.State, lim Limit, layer int) (inspect.State, bool) {
	for _, st := range states {
		_, isLog := field(st, "count")
		if st.Algorithm == lim.Algorithm.String() && st.Calendar == (lim.Calendar != NoCalendar) && st.Layer == layer &&
			(lim.Algorithm != SlidingWindow || isLog) {
			return st, true
		}
	}
	return inspect.State{}, false
}

// TestInspectMatchesDecisions walks every algorithm, the number of requests
// taken, the layer the state is in and a debt settled on top, takes the
// decisions on miniredis, and checks that what readStates decodes says what
// the Limiter says: the units taken are the capacity less Peek's Remaining
// (layer 0) or the last decision's (layer 1), a debt shows as one, and
// every state has a TTL.
func TestInspectMatchesDecisions(t *testing.T) {
	ctx := context.Background()
	for name, lim := range inspectLimits() {
		for _, taken := range []int{1, 4, 10} {
			for _, layer := range []int{0, 1} {
				for _, after := range []string{"", "refund", "debt"} {
					if after != "" && layer == 1 || after == "debt" && lim.Algorithm == Concurrency {
						continue // Settle and Refund take one Limit; permits have no cost
					}
					debt := after == "debt"
					t.Run(fmt.Sprintf("%s/taken=%d/layer=%d/%s", name, taken, layer, after), func(t *testing.T) {
						_, rdb := redistest.Mini(t)
						l := opsNew(t, rdb, WithClock(func() time.Time { return redistest.Epoch }),
							WithTimeout(5*time.Second), WithBreaker(0, 0))
						want := inspectTake(t, l, lim, taken, layer, after)
						now, states, err := readStates(ctx, rdb, "", "user:1")
						if err != nil {
							t.Fatal(err)
						}
						if !now.Equal(redistest.Epoch) {
							t.Errorf("now = %v, want Redis' clock %v", now, redistest.Epoch)
						}
						st, ok := counted(states, lim, layer)
						if !ok {
							if want.used != 0 {
								t.Fatalf("no %v state at layer %d in %+v; want %d used", lim, layer, states, want.used)
							}
							return // an empty state is deleted
						}
						if got := used(t, st, lim.Capacity()); math.Floor(got) != float64(want.used) && !debt {
							t.Errorf("%s: used %v, want %d (capacity %d - Remaining %d)", st.Key, got, want.used, lim.Capacity(), want.remaining)
						}
						checkStateDebt(t, st, lim, debt)
						for _, st := range states {
							if st.TTL <= 0 {
								t.Errorf("%s: TTL %v, want one", st.Key, st.TTL)
							}
						}
					})
				}
			}
		}
	}
}

type takenState struct{ used, remaining int }

// inspectTake takes taken requests of user:1 under lim at layer (under a
// generous first layer for layer 1), then refunds the last or settles it
// at 25 units (a debt) as after says, and returns what the Limiter says is
// left.
func inspectTake(t *testing.T, l *Limiter, lim Limit, taken, layer int, after string) takenState {
	t.Helper()
	ctx := context.Background()
	var last Result
	for range taken {
		if layer == 0 {
			r, err := l.Allow(ctx, 1, lim.For("user:1"))
			if err != nil || !r.Allowed {
				t.Fatalf("Allow: %+v, %v", r, err)
			}
			last = r
			continue
		}
		res, err := l.Allow(ctx, 1, PerHour(1000).For("user:1"), lim.For("user:1"))
		if err != nil || !opsAdmitted(res.Rules) {
			t.Fatalf("Allow under two Rules: %+v, %v", res, err)
		}
		last = res.Rules[1]
	}
	switch after {
	case "refund":
		if err := l.Refund(ctx, last); err != nil {
			t.Fatal(err)
		}
	case "debt":
		if _, err := l.Settle(ctx, last, 25); err != nil {
			t.Fatal(err)
		}
	}
	if layer == 0 {
		peek, err := l.Peek(ctx, lim.For("user:1"))
		if err != nil {
			t.Fatal(err)
		}
		return takenState{used: lim.Capacity() - peek.Remaining, remaining: peek.Remaining}
	}
	return takenState{used: lim.Capacity() - last.Remaining, remaining: last.Remaining}
}

// checkStateDebt checks that a settled debt shows in st as the script keeps it:
// negative tokens, a queue beyond capacity, or a window ahead of the clock.
func checkStateDebt(t *testing.T, st inspect.State, lim Limit, debt bool) {
	t.Helper()
	d, hasDebt := field(st, "debt")
	_, hasUntil := field(st, "debt_until")
	switch {
	case lim.Algorithm == TokenBucket:
		if hasDebt != debt || debt && d <= 0 {
			t.Errorf("%s: debt %v (%v) in %+v, want one: %v", st.Key, d, hasDebt, st.Fields, debt)
		}
	case lim.Algorithm == LeakyBucket:
		if q, _ := field(st, "queued"); debt && q <= float64(lim.Capacity()) {
			t.Errorf("%s: queued %v, want beyond the capacity %d in debt", st.Key, q, lim.Capacity())
		}
	case lim.Calendar != NoCalendar:
		// A calendar debt stays in its window, whose number marks it.
		if _, hasOrdinal := field(st, "window_ordinal"); hasOrdinal != debt {
			t.Errorf("%s: window_ordinal shown %v in %+v, want %v", st.Key, hasOrdinal, st.Fields, debt)
		}
	case lim.Algorithm != Concurrency:
		if hasUntil != debt {
			t.Errorf("%s: debt_until shown %v in %+v, want %v", st.Key, hasUntil, st.Fields, debt)
		}
	}
}

// TestInspectFaults: a key holding something redlimit never wrote, or of
// the wrong type, is an error naming the key, never a panic; an empty key
// is ErrEmptyKey; no state at all is no error.
func TestInspectFaults(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	if _, states, err := readStates(ctx, rdb, "", "nobody"); err != nil || len(states) != 0 {
		t.Errorf("no state: %v, %v; want none, nil", states, err)
	}
	if _, _, err := readStates(ctx, rdb, "", ""); err != ErrEmptyKey {
		t.Errorf("empty key: %v, want ErrEmptyKey", err)
	}
	for _, suffix := range []string{":tb4", ":sw3m", ":swc3", ":fw4", ":cw3", ":lb4"} {
		for _, bad := range []string{"", "x", "1 2 x", "1 2 0", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23", "-", "5", "68719476741"} {
			mr.FlushAll()
			key := "ratelimit:{k}" + suffix
			if err := mr.Set(key, bad); err != nil {
				t.Fatal(err)
			}
			_, _, err := readStates(ctx, rdb, "", "k")
			// (A period window's state is one integer of 2^36 or more, with
			// an expiry: none of these.)
			mustFail := bad == "" || bad == "x" || bad == "-" || strings.Contains(bad, "x") || strings.Contains(bad, "23") || suffix == ":fw4"
			if mustFail && err == nil || err != nil && !strings.Contains(err.Error(), key) {
				t.Errorf("%s = %q: error %v, want one naming the key", key, bad, err)
			}
		}
	}
	mr.FlushAll()
	if _, err := mr.Lpush("ratelimit:{k}:tb4", "x"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readStates(ctx, rdb, "", "k"); err == nil || !strings.Contains(err.Error(), "ratelimit:{k}:tb4") {
		t.Errorf("a list where a bucket should be: %v, want an error naming the key", err)
	}
}

// TestInspectReadsEveryRow: every key suffix of the algorithms table has a
// reader, so a new algorithm cannot be left out of inspect.
func TestInspectReadsEveryRow(t *testing.T) {
	for _, row := range append(algorithms[:], calendarWindow) {
		for _, s := range row.suffixes {
			if stateReaders[s] == nil {
				t.Errorf("%s: no state reader for the suffix %s", row.name, s)
			}
		}
	}
	if inspect.Read == nil || !strings.HasPrefix(inspect.Library, "redlimit_") {
		t.Errorf("core did not register with package inspect: Read %p, Library %q", inspect.Read, inspect.Library)
	}
}

// TestInspectOverrideKey: the key inspect names for an override is where
// Overrides.Set writes it, for the default prefix, a prefix with braces
// and names that need escaping.
func TestInspectOverrideKey(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	for _, prefix := range []string{"", "app{1}"} {
		for _, name := range []string{"acme", "a{b}%#", strings.Repeat("n", 200)} {
			o, err := NewOverrides(rdb, prefix, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Set(ctx, name, PerMinute(7), 0); err != nil {
				t.Fatal(err)
			}
			if got, err := mr.Get(inspect.OverrideKey(prefix, name)); err != nil || got != "7/min" {
				t.Errorf("prefix %q, name %q: GET %s = %q, %v; want 7/min", prefix, name, inspect.OverrideKey(prefix, name), got, err)
			}
		}
	}
}
