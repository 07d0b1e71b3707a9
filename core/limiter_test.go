package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// miniLimiter is a Limiter on a fresh miniredis whose clock stands at
// redistest.Epoch. Its client never retries (go-redis retries a command
// whose reply timed out, which would run a script twice) and its timeout is
// generous: miniredis runs Lua slowly under the race detector.
func miniLimiter(t testing.TB) (*miniredis.Miniredis, *redis.Client, *Limiter) {
	t.Helper()
	mr, _ := redistest.Mini(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := New(rdb, WithPrefix("test"), WithTimeout(time.Minute), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return mr, rdb, l
}

// with returns l enforced by a.
func with(l Limit, a Algorithm) Limit {
	l.Algorithm = a
	return l
}

// redisKey is the first Redis key of key's state under a.
func redisKey(prefix, key string, a Algorithm) string {
	return stateKeys(nil, prefix, escapeTag(key), &algorithms[a], 0)[0]
}

// allow is one step of a step table, as in x/time/rate's tests: at t after
// redistest.Epoch (steps may go back in time), AllowN(n) decides ok, with
// Remaining rem, RetryAfter retry and, for LeakyBucket, Delay delay.
type allow struct {
	t     time.Duration
	n     int
	ok    bool
	rem   int
	retry time.Duration
	delay time.Duration
}

// run plays steps on key under lim.
func runAllow(t *testing.T, mr *miniredis.Miniredis, l *Limiter, key string, lim Limit, steps []allow) {
	t.Helper()
	for i, s := range steps {
		redistest.SetTime(mr, redistest.Epoch.Add(s.t))
		r, err := l.Allow(context.Background(), s.n, lim.For(key))
		if err != nil {
			t.Fatalf("step %d (t=%v, n=%d): %v", i, s.t, s.n, err)
		}
		got := allow{s.t, s.n, r.Allowed, r.Remaining, r.RetryAfter, r.Delay}
		if got != s {
			t.Fatalf("step %d (t=%v, n=%d): got %+v, want %+v (%+v)", i, s.t, s.n, got, s, r)
		}
		if r.Allowed && r.Granted != s.n || !r.Allowed && r.Granted != 0 {
			t.Fatalf("step %d: Granted = %d (%+v)", i, r.Granted, r)
		}
	}
}

const (
	µs = time.Microsecond
	ms = time.Millisecond
)

func TestAllowSteps(t *testing.T) {
	tests := []struct {
		name  string
		lim   Limit
		steps []allow
	}{
		{"token bucket 3 per second", PerSecond(3), []allow{
			{0, 1, true, 2, 0, 0},
			{0, 2, true, 0, 0, 0},
			{0, 1, false, 0, 333334 * µs, 0}, // a token is 1/3 s, rounded up to the µs
			{333333 * µs, 1, false, 0, 1 * µs, 0},
			{333334 * µs, 1, true, 0, 0, 0},
			{1333334 * µs, 3, true, 0, 0, 0}, // full again after 1s
			{1333334 * µs, 1, false, 0, 333334 * µs, 0},
		}},
		{"token bucket 1 per hour", PerHour(1), []allow{
			{0, 1, true, 0, 0, 0},
			{time.Second, 1, false, 0, time.Hour - time.Second, 0},
			{time.Hour - µs, 1, false, 0, µs, 0},
			{time.Hour, 1, true, 0, 0, 0},
			{time.Hour, 1, false, 0, time.Hour, 0},
		}},
		{"token bucket 100000 per second", PerSecond(100000), []allow{
			{0, 100000, true, 0, 0, 0},
			{0, 1, false, 0, 10 * µs, 0},
			{9 * µs, 1, false, 0, µs, 0},
			{10 * µs, 1, true, 0, 0, 0},
			{20 * µs, 2, false, 1, 10 * µs, 0},
			{time.Second + 10*µs, 100000, true, 0, 0, 0},
		}},
		{"token bucket 10 per second burst 3", Limit{Rate: 10, Period: time.Second, Burst: 3}, []allow{
			{0, 3, true, 0, 0, 0},
			{0, 1, false, 0, 100 * time.Millisecond, 0},
			{100 * time.Millisecond, 1, true, 0, 0, 0},
			{time.Second, 3, true, 0, 0, 0}, // never more than the burst
			{time.Second, 1, false, 0, 100 * time.Millisecond, 0},
		}},
		{"token bucket 2 per second burst 5", Limit{Rate: 2, Period: time.Second, Burst: 5}, []allow{
			{0, 5, true, 0, 0, 0},
			{0, 1, false, 0, 500 * time.Millisecond, 0},
			{time.Second, 3, false, 2, 500 * time.Millisecond, 0},
			{2500 * time.Millisecond, 5, true, 0, 0, 0},
		}},
		{"leaky bucket 10 per second burst 3", Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, Burst: 3}, []allow{
			{0, 1, true, 2, 0, 0},
			{0, 1, true, 1, 0, 100 * time.Millisecond},
			{0, 1, true, 0, 0, 200 * time.Millisecond},
			{0, 1, false, 0, 100 * time.Millisecond, 0},
			{100 * time.Millisecond, 1, true, 0, 0, 200 * time.Millisecond},
			{time.Second, 3, true, 0, 0, 0}, // drained: leaves at once
		}},
		{"leaky bucket max delay", Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, MaxDelay: 250 * time.Millisecond}, []allow{
			// Remaining counts what MaxDelay still lets in, not queue room.
			{0, 1, true, 2, 0, 0},
			{0, 1, true, 1, 0, 100 * time.Millisecond},
			{0, 1, true, 0, 0, 200 * time.Millisecond},
			{0, 1, false, 0, 50 * time.Millisecond, 0}, // 300ms > 250ms
			{50 * time.Millisecond, 1, true, 0, 0, 250 * time.Millisecond},
		}},
		{"leaky bucket 1 per hour", with(PerHour(1), LeakyBucket), []allow{
			{0, 1, true, 0, 0, 0},
			{0, 1, false, 0, time.Hour, 0},
			{time.Hour - µs, 1, false, 0, µs, 0},
			{time.Hour, 1, true, 0, 0, 0},
		}},
		{"leaky bucket 100000 per second", with(PerSecond(100000), LeakyBucket), []allow{
			{0, 100000, true, 0, 0, 0},
			{0, 1, false, 0, 10 * µs, 0},
			{10 * µs, 1, true, 0, 0, time.Second - 10*µs},
		}},
		// A fixed window's waits are read from its key's expiry: whole
		// ms, 1 ms more than the window's end, as Redis keeps a key
		// through the ms its expiry names (see fixed_window.lua).
		{"fixed window 3 per second", with(PerSecond(3), FixedWindow), []allow{
			{0, 3, true, 0, 0, 0},
			{0, 1, false, 0, time.Second + ms, 0},
			{time.Second - µs, 1, false, 0, ms, 0},
			{time.Second, 1, true, 2, 0, 0},
			{1500 * time.Millisecond, 2, true, 0, 0, 0},
			{1900 * time.Millisecond, 1, false, 0, 101 * time.Millisecond, 0},
		}},
		// Epoch is 03:04:05: the hour's window ends in 55m55s.
		{"fixed window 1 per hour", with(PerHour(1), FixedWindow), []allow{
			{0, 1, true, 0, 0, 0},
			{time.Second, 1, false, 0, 55*time.Minute + 54*time.Second + ms, 0},
			{55*time.Minute + 55*time.Second - µs, 1, false, 0, ms, 0},
			{55*time.Minute + 55*time.Second, 1, true, 0, 0, 0},
		}},
		{"fixed window 100000 per second", with(PerSecond(100000), FixedWindow), []allow{
			{0, 100000, true, 0, 0, 0},
			{0, 1, false, 0, time.Second + ms, 0},
			{time.Second, 100000, true, 0, 0, 0},
		}},
		{"sliding window 3 per second", with(PerSecond(3), SlidingWindow), []allow{
			{0, 1, true, 2, 0, 0},
			{100 * time.Millisecond, 1, true, 1, 0, 0},
			{200 * time.Millisecond, 1, true, 0, 0, 0},
			{300 * time.Millisecond, 1, false, 0, 700 * time.Millisecond, 0},
			{300 * time.Millisecond, 3, false, 0, 900 * time.Millisecond, 0}, // all three must leave
			{time.Second - µs, 1, false, 0, µs, 0},
			{time.Second, 1, true, 0, 0, 0},
			{1200 * time.Millisecond, 2, true, 0, 0, 0},
		}},
		// Requests in one microsecond keep their true time: all three leave
		// the window together.
		{"sliding window same instant", with(PerSecond(3), SlidingWindow), []allow{
			{0, 1, true, 2, 0, 0},
			{0, 1, true, 1, 0, 0},
			{0, 1, true, 0, 0, 0},
			{0, 1, false, 0, time.Second, 0},
			{time.Second, 3, true, 0, 0, 0},
		}},
		{"sliding window 1 per hour", with(PerHour(1), SlidingWindow), []allow{
			{0, 1, true, 0, 0, 0},
			{time.Second, 1, false, 0, time.Hour - time.Second, 0},
			{time.Hour, 1, true, 0, 0, 0},
		}},
		{"sliding window counter 4 per second", with(PerSecond(4), SlidingWindowCounter), []allow{
			{0, 4, true, 0, 0, 0},
			// Next window: the previous 4 weigh 4*(1-e), so one more fits at e = 1/4.
			{0, 1, false, 0, 1250 * time.Millisecond, 0},
			{1250 * time.Millisecond, 1, true, 0, 0, 0},
			{1250 * time.Millisecond, 1, false, 0, 250 * time.Millisecond, 0},
			{1500 * time.Millisecond, 1, true, 0, 0, 0},
			{2 * time.Second, 2, true, 0, 0, 0}, // the previous 2 weigh 2 at e = 0
		}},
		// The counter cannot know when in the hour the request came: it
		// weighs it over the whole next window.
		{"sliding window counter 1 per hour", with(PerHour(1), SlidingWindowCounter), []allow{
			{0, 1, true, 0, 0, 0},
			{time.Second, 1, false, 0, time.Hour + 55*time.Minute + 54*time.Second, 0},
			{time.Hour + 55*time.Minute + 55*time.Second - µs, 1, false, 0, µs, 0},
			{time.Hour + 55*time.Minute + 55*time.Second, 1, true, 0, 0, 0},
		}},
		{"sliding window counter 100000 per second", with(PerSecond(100000), SlidingWindowCounter), []allow{
			{0, 100000, true, 0, 0, 0},
			{0, 1, false, 0, time.Second + 10*µs, 0},
			{time.Second + 9*µs, 1, false, 0, µs, 0},
			{time.Second + 10*µs, 1, true, 0, 0, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr, _, l := miniLimiter(t)
			runAllow(t, mr, l, "k", tt.lim, tt.steps)
		})
	}
}

// TestSlidingWindow100kPerSecond: large costs are one weighted entry each.
func TestSlidingWindow100kPerSecond(t *testing.T) {
	mr, _, l := miniLimiter(t)
	runAllow(t, mr, l, "k", with(PerSecond(100000), SlidingWindow), []allow{
		{0, 50000, true, 50000, 0, 0},
		{500 * time.Millisecond, 50000, true, 0, 0, 0},
		{500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond, 0},
		{time.Second - µs, 1, false, 0, µs, 0},
		{time.Second, 1, true, 49999, 0, 0},
	})
}

// TestResultWorkedExample is Result's documented example.
func TestResultWorkedExample(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	lim := PerSecond(10)
	var got Result
	for range 10 {
		var err error
		if got, err = l.Allow(ctx, 1, lim.For("k")); err != nil {
			t.Fatal(err)
		}
	}
	if want := (Result{Allowed: true, Granted: 1, ResetAfter: time.Second}); !opsSame(public(got), want) {
		t.Errorf("10th: got %+v, want %+v", got, want)
	}
	got, err := l.Allow(ctx, 1, lim.For("k"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Result{RetryAfter: 100 * time.Millisecond, ResetAfter: time.Second}); !opsSame(public(got), want) {
		t.Errorf("11th: got %+v, want %+v", got, want)
	}
}

// TestLimitChange: a new Limit for a key applies on the next call, with the
// state carried over: never a burst of free requests.
func TestLimitChange(t *testing.T) {
	ms := time.Millisecond
	type phase struct {
		lim   Limit
		steps []allow
	}
	tb := func(rate int, period time.Duration, burst int) Limit {
		return Limit{Rate: rate, Period: period, Burst: burst}
	}
	tests := []struct {
		name   string
		phases []phase
	}{
		{"token bucket", []phase{
			{tb(10, time.Second, 0), []allow{{0, 10, true, 0, 0, 0}}},
			{tb(10, time.Second, 5), []allow{ // lower burst: still empty
				{0, 1, false, 0, 100 * ms, 0},
				{100 * ms, 1, true, 0, 0, 0},
			}},
			{tb(10, time.Second, 20), []allow{ // raise burst: no free tokens
				{200 * ms, 1, true, 0, 0, 0},
				{200 * ms, 1, false, 0, 100 * ms, 0},
				{2200 * ms, 20, true, 0, 0, 0},
			}},
			{tb(1, time.Second, 10), []allow{ // lower rate: refills slower at once
				{2200 * ms, 1, false, 0, time.Second, 0},
				{3200 * ms, 1, true, 0, 0, 0},
			}},
			{tb(100, time.Second, 10), []allow{ // raise rate: faster at once
				{3200 * ms, 1, false, 0, 10 * ms, 0},
				{3210 * ms, 1, true, 0, 0, 0},
			}},
			{tb(100, time.Second, 10), []allow{{10 * time.Second, 10, true, 0, 0, 0}}},
			{tb(100, time.Second, 20), []allow{{20 * time.Second, 1, true, 19, 0, 0}}},
			{tb(100, time.Second, 2), []allow{ // 19 tokens shrink to the new burst
				{20 * time.Second, 2, true, 0, 0, 0},
				{20 * time.Second, 1, false, 0, 10 * ms, 0},
			}},
		}},
		{"leaky bucket", []phase{
			{with(PerSecond(10), LeakyBucket), []allow{{0, 10, true, 0, 0, 0}}},
			{Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, Burst: 5}, []allow{
				{0, 1, false, 0, 600 * ms, 0}, // 10 queued must drain to 4
			}},
			{Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, Burst: 20}, []allow{
				{0, 10, true, 0, 0, time.Second}, // behind the 10 queued
			}},
			{Limit{Algorithm: LeakyBucket, Rate: 20, Period: time.Second, Burst: 20}, []allow{
				{0, 1, false, 0, 50 * ms, 0}, // 20 queued now drain at 20/s
			}},
		}},
		// A fixed window's waits are whole ms, 1 ms long (see TestAllowSteps).
		{"fixed window", []phase{
			{with(PerSecond(3), FixedWindow), []allow{{0, 3, true, 0, 0, 0}}},
			{with(PerSecond(5), FixedWindow), []allow{{0, 2, true, 0, 0, 0}, {0, 1, false, 0, time.Second + ms, 0}}},
			{with(PerSecond(2), FixedWindow), []allow{{0, 1, false, 0, time.Second + ms, 0}}},
			{with(PerMinute(6), FixedWindow), []allow{ // a longer period starts when this window ends
				{500 * ms, 1, true, 0, 0, 0},
				{500 * ms, 1, false, 0, 501 * ms, 0},
			}},
		}},
		{"sliding window", []phase{
			{with(PerSecond(3), SlidingWindow), []allow{
				{0, 1, true, 2, 0, 0},
				{100 * ms, 1, true, 1, 0, 0},
				{200 * ms, 1, true, 0, 0, 0},
			}},
			{with(PerSecond(2), SlidingWindow), []allow{{300 * ms, 1, false, 0, 800 * ms, 0}}},
			{with(PerSecond(5), SlidingWindow), []allow{{300 * ms, 2, true, 0, 0, 0}}},
			{Limit{Algorithm: SlidingWindow, Rate: 5, Period: 2 * time.Second}, []allow{
				{time.Second, 1, false, 0, time.Second, 0}, // the longer window still holds them all
			}},
		}},
		{"sliding window counter", []phase{
			{with(PerSecond(4), SlidingWindowCounter), []allow{{0, 4, true, 0, 0, 0}}},
			{with(PerSecond(2), SlidingWindowCounter), []allow{{500 * ms, 1, false, 0, 1250 * ms, 0}}},
			{with(PerSecond(8), SlidingWindowCounter), []allow{{500 * ms, 4, true, 0, 0, 0}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr, _, l := miniLimiter(t)
			for i, p := range tt.phases {
				t.Logf("phase %d: %+v", i, p.lim)
				runAllow(t, mr, l, "k", p.lim, p.steps)
			}
		})
	}
}

// TestPeriodRoundsUpToMicroseconds: the scripts count whole µs, and a
// Period between two of them is rounded up, never down to a looser Limit.
func TestPeriodRoundsUpToMicroseconds(t *testing.T) {
	mr, _, l := miniLimiter(t)
	mr.SetTime(redistest.Epoch)
	for _, a := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		lim := Limit{Algorithm: a, Rate: 1, Period: 1999 * time.Nanosecond}
		if _, err := l.Allow(context.Background(), 1, lim.For("k")); err != nil {
			t.Fatal(err)
		}
		r, err := l.Allow(context.Background(), 1, lim.For("k"))
		if err != nil || r.Allowed || r.RetryAfter < 2*µs {
			t.Errorf("%s, 1 per 1999ns, at once: %+v, %v; want denied for at least 2µs", a, r, err)
		}
	}
}

// TestDenialUnderSameLimitWritesNothing: the TTL a denial may lengthen is
// compared in whole ms, so the rounding of PTTL alone never makes a denial
// write (a write would reach replicas and the AOF, flood after flood).
func TestDenialUnderSameLimitWritesNothing(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		mr, _, l := miniLimiter(t)
		lim := with(PerSecond(5), a)
		mr.SetTime(redistest.Epoch.Add(500 * µs))
		if r, err := l.Allow(context.Background(), 5, lim.For("k")); err != nil || !r.Allowed {
			t.Fatalf("%s: AllowN(5) = %+v, %v", a, r, err)
		}
		key := redisKey(l.prefix, "k", a)
		step := 100*time.Millisecond + 500*µs
		mr.SetTime(redistest.Epoch.Add(500*µs + step))
		mr.FastForward(step)
		before := mr.TTL(key)
		if r, err := l.Allow(context.Background(), 1, lim.For("k")); err != nil || r.Allowed {
			t.Fatalf("%s: Allow = %+v, %v; want denied", a, r, err)
		}
		if after := mr.TTL(key); after != before {
			t.Errorf("%s: a denial under the same Limit moved the TTL from %v to %v", a, before, after)
		}
	}
}

// TestSubMicrosecondMaxDelayStillBounds: MaxDelay 0 means no bound, so a
// bound under a microsecond must not truncate to it.
func TestSubMicrosecondMaxDelayStillBounds(t *testing.T) {
	mr, _, l := miniLimiter(t)
	mr.SetTime(redistest.Epoch)
	lim := Limit{Algorithm: LeakyBucket, Rate: 1, Period: time.Second, Burst: 5, MaxDelay: 500 * time.Nanosecond}
	if r, err := l.Allow(context.Background(), 1, lim.For("k")); err != nil || !r.Allowed {
		t.Fatalf("first request: %+v, %v", r, err)
	}
	if r, err := l.Allow(context.Background(), 1, lim.For("k")); err != nil || r.Allowed {
		t.Errorf("second request, which would wait 1s: %+v, %v; want denied by MaxDelay 500ns", r, err)
	}
}

// TestLimitChangeToSlowerKeepsState: a denial writes no state, so a key
// whose Limit became slower kept the TTL of the faster one, and its expiry
// handed out a fresh quota long before RetryAfter. The denial now extends
// the TTL to what the new Limit needs.
func TestLimitChangeToSlowerKeepsState(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		old, new Limit
		n        int // the cost of the denied requests
	}{
		{PerSecond(5), Limit{Rate: 5, Period: 10 * time.Second}, 1},
		{PerSecond(10), Limit{Rate: 1, Period: time.Second, Burst: 10}, 2},
		{with(PerSecond(5), LeakyBucket), Limit{Algorithm: LeakyBucket, Rate: 5, Period: 10 * time.Second}, 1},
		// (Not a FixedWindow over a Period: its state is its window, whose
		// end is its key's expiry, whatever the Limit becomes.)
		{with(PerSecond(5), SlidingWindow), Limit{Algorithm: SlidingWindow, Rate: 5, Period: 10 * time.Second}, 1},
		{with(PerSecond(5), SlidingWindowCounter), Limit{Algorithm: SlidingWindowCounter, Rate: 5, Period: 10 * time.Second}, 1},
	} {
		t.Run(fmt.Sprintf("%s/%d per %v to %d per %v", tt.old.Algorithm, tt.old.Rate, tt.old.Period, tt.new.Rate, tt.new.Period), func(t *testing.T) {
			mr, rdb, l := miniLimiter(t)
			mr.SetTime(redistest.Epoch)
			if r, err := l.Allow(ctx, tt.old.Rate, tt.old.For("k")); err != nil || !r.Allowed {
				t.Fatalf("AllowN(%d) under %+v = %+v, %v", tt.old.Rate, tt.old, r, err)
			}
			oldTTL := mr.TTL(redisKey(l.prefix, "k", tt.old.Algorithm))
			r, err := l.Allow(ctx, tt.n, tt.new.For("k"))
			if err != nil || r.Allowed {
				t.Fatalf("AllowN(%d) under the new %+v = %+v, %v; want denied", tt.n, tt.new, r, err)
			}
			wait := r.RetryAfter.Truncate(time.Millisecond) - time.Millisecond
			if wait <= oldTTL {
				t.Fatalf("RetryAfter %v is within the old TTL %v: the case proves nothing", r.RetryAfter, oldTTL)
			}
			// Time passes on the clock and for the TTLs alike.
			mr.SetTime(redistest.Epoch.Add(wait))
			mr.FastForward(wait)
			if pttl, err := rdb.PTTL(ctx, redisKey(l.prefix, "k", tt.new.Algorithm)).Result(); err != nil || pttl <= 0 {
				t.Errorf("%v later, after the old TTL %v: PTTL %v, %v; want the state kept", wait, oldTTL, pttl, err)
			}
			if r, err := l.Allow(ctx, tt.n, tt.new.For("k")); err != nil || r.Allowed {
				t.Errorf("%v later, before RetryAfter: AllowN(%d) = %+v, %v; want denied, not a fresh quota", wait, tt.n, r, err)
			}
		})
	}
}

// TestClockStepBack: a Redis clock that steps back (a failover to a replica
// whose clock is behind) does not hand out a fresh quota, and RetryAfter
// still says how long, by the new clock, until the request passes.
func TestClockStepBack(t *testing.T) {
	ctx := context.Background()
	for _, lim := range []Limit{
		PerSecond(3),
		with(PerSecond(3), LeakyBucket),
		with(PerSecond(3), FixedWindow),
		with(PerSecond(3), SlidingWindow),
		with(PerSecond(3), SlidingWindowCounter),
	} {
		for _, back := range []time.Duration{µs, 300 * time.Millisecond, 5 * time.Second, 24 * time.Hour} {
			t.Run(fmt.Sprintf("%s/%v", lim.Algorithm, back), func(t *testing.T) {
				mr, _, l := miniLimiter(t)
				at := func(d time.Duration) { redistest.SetTime(mr, redistest.Epoch.Add(d)) }
				if lim.Algorithm == FixedWindow {
					// Its window ends at its key's expiry, an instant: on a
					// Redis whose clock steps back, every TTL grows by the
					// step, which miniredis does not do. The clock here does.
					now := time.Duration(0)
					at = func(d time.Duration) {
						mr.SetTime(redistest.Epoch.Add(d))
						for _, k := range mr.Keys() {
							if d < now {
								mr.SetTTL(k, mr.TTL(k)+now-d)
							}
						}
						if d > now {
							mr.FastForward(d - now)
						}
						now = d
					}
				}
				base := 48 * time.Hour
				at(base)
				if r, err := l.Allow(ctx, 3, lim.For("k")); err != nil || !r.Allowed {
					t.Fatalf("AllowN(3) = %+v, %v", r, err)
				}
				at(base)
				want, err := l.Allow(ctx, 1, lim.For("k"))
				if err != nil || want.Allowed {
					t.Fatalf("at the same instant: %+v, %v", want, err)
				}
				at(base - back)
				got, err := l.Allow(ctx, 1, lim.For("k"))
				if err != nil {
					t.Fatal(err)
				}
				if got.Allowed || got.Remaining != 0 {
					t.Fatalf("%v back: %+v, want denied with nothing remaining", back, got)
				}
				// (A fixed window's waits are whole ms, up to 1 ms long.)
				slack := map[bool]time.Duration{true: ms}[lim.Algorithm == FixedWindow]
				if d := got.RetryAfter - (want.RetryAfter + back); d < -slack || d > slack {
					t.Errorf("%v back: RetryAfter %v, want %v (%v + the step)", back, got.RetryAfter, want.RetryAfter+back, want.RetryAfter)
				}
				if d := got.ResetAfter - (want.ResetAfter + back); d < -slack || d > slack {
					t.Errorf("%v back: ResetAfter %v, want %v", back, got.ResetAfter, want.ResetAfter+back)
				}
				at(base - back + got.RetryAfter - slack - µs)
				if r, _ := l.Allow(ctx, 1, lim.For("k")); r.Allowed {
					t.Errorf("admitted 1µs before RetryAfter: %+v", r)
				}
				at(base - back + got.RetryAfter)
				if r, _ := l.Allow(ctx, 1, lim.For("k")); !r.Allowed {
					t.Errorf("denied after RetryAfter: %+v", r)
				}
			})
		}
	}
}

func TestErrors(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	lim := PerSecond(10)
	if _, err := l.Allow(ctx, 1, lim.For("")); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Allow with an empty key: %v, want ErrEmptyKey", err)
	}
	if _, err := l.Peek(ctx, lim.For("")); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Peek with an empty key: %v, want ErrEmptyKey", err)
	}
	if err := l.Reset(ctx, ""); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Reset with an empty key: %v, want ErrEmptyKey", err)
	}

	costs := []struct {
		name string
		lim  Limit
		n    int
	}{
		{"zero", lim, 0},
		{"negative", lim, -1},
		{"most negative", lim, math.MinInt},
		{"above burst", lim, 11},
		{"above explicit burst", Limit{Rate: 10, Period: time.Second, Burst: 3}, 4},
		{"above leaky burst", Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, Burst: 3}, 4},
		{"above window rate", with(PerSecond(5), FixedWindow), 6},
		{"above sliding rate", with(PerSecond(5), SlidingWindow), 6},
		{"above counter rate", with(PerSecond(5), SlidingWindowCounter), 6},
		{"burst ignored by windows", Limit{Algorithm: SlidingWindow, Rate: 5, Period: time.Second, Burst: 50}, 6},
		{"max int", lim, math.MaxInt},
	}
	for _, c := range costs {
		if r, err := l.Allow(ctx, c.n, c.lim.For("k")); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: AllowN(%d) = %+v, %v, want ErrInvalidCost", c.name, c.n, r, err)
		}
	}

	invalid := []struct {
		name  string
		lim   Limit
		field string
	}{
		{"zero limit", Limit{}, "Rate"},
		{"negative rate", Limit{Rate: -1, Period: time.Second}, "Rate"},
		{"zero period", Limit{Rate: 1}, "Period"},
		{"negative period", Limit{Rate: 1, Period: -time.Second}, "Period"},
		{"sub-µs period", Limit{Rate: 1, Period: time.Nanosecond}, "Period"},
		{"negative burst", Limit{Rate: 1, Period: time.Second, Burst: -1}, "Burst"},
		{"negative max delay", Limit{Algorithm: LeakyBucket, Rate: 1, Period: time.Second, MaxDelay: -1}, "MaxDelay"},
		{"unknown algorithm", Limit{Algorithm: Concurrency + 1, Rate: 1, Period: time.Second}, "Algorithm"},
		{"unknown algorithm 255", Limit{Algorithm: 255, Rate: 1, Period: time.Second}, "Algorithm"},
		{"1e12 per nanosecond", Limit{Rate: 1e12, Period: time.Nanosecond}, "Period"},
		{"2e12 per 999983µs", Limit{Rate: 2e12, Period: 999983 * time.Microsecond}, "Rate"},
		{"2e12 per hour, fixed window", Limit{Algorithm: FixedWindow, Rate: 2e12, Period: time.Hour}, "Rate"},
		{"period over 2^46µs", Limit{Algorithm: FixedWindow, Rate: 1, Period: 1 << 56}, "Period"},
		{"concurrency of 2^21", Limit{Algorithm: Concurrency, Rate: 1 << 21, Period: time.Second}, "Rate"},
		{"concurrency permit under 1ms", Limit{Algorithm: Concurrency, Rate: 1, Period: time.Microsecond}, "Period"},
		{"calendar of a token bucket", Limit{Rate: 1, Calendar: Monthly}, "Calendar"},
		{"calendar with a period", Limit{Algorithm: FixedWindow, Rate: 1, Period: time.Hour, Calendar: Daily}, "Period"},
		{"unknown calendar", Limit{Algorithm: FixedWindow, Rate: 1, Calendar: 9}, "Calendar"},
		{"location without a calendar", Limit{Rate: 1, Period: time.Hour, Location: time.UTC}, "Location"},
		{"max int per µs", Limit{Rate: math.MaxInt, Period: time.Microsecond}, "Rate"},
		{"huge burst", Limit{Rate: 1, Period: time.Hour, Burst: math.MaxInt}, "Burst"},
		{"longest period", Limit{Algorithm: SlidingWindowCounter, Rate: 3, Period: math.MaxInt64}, "Period"},
	}
	for _, c := range invalid {
		err := c.lim.Validate()
		if !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidLimit", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: Validate() = %q, want it to name %s", c.name, err, c.field)
		}
		if _, err := l.Allow(ctx, 1, c.lim.For("k")); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%s: Allow = %v, want ErrInvalidLimit", c.name, err)
		}
		if _, err := l.Peek(ctx, c.lim.For("k")); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%s: Peek = %v, want ErrInvalidLimit", c.name, err)
		}
	}

	valid := []Limit{
		PerSecond(1), PerHour(1), PerSecond(100000),
		{Rate: 1, Period: time.Microsecond},
		{Rate: 1, Period: 365 * 24 * time.Hour},
		{Algorithm: LeakyBucket, Rate: 1, Period: time.Second, Burst: 1000, MaxDelay: time.Hour},
		{Algorithm: FixedWindow, Rate: 1000000, Period: time.Second},
	}
	for _, v := range valid {
		if err := v.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", v, err)
		}
	}
	if _, err := l.AllowAtMost(ctx, 2, InFlight(3).For("k")); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("AllowAtMost of a Concurrency: %v, want ErrInvalidCost", err)
	}
	if _, err := l.Allow(ctx, 2, InFlight(3).For("k")); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("AllowN(2) of a Concurrency: %v, want ErrInvalidCost (one permit per request)", err)
	}
	if _, err := l.Renew(ctx, receiptFor(l, lim.For("k"), 1, 0)); err == nil {
		t.Errorf("Renew of a rate limit: nil error, want one")
	}
	if _, err := l.AllowAtMost(ctx, 0, lim.For("k")); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("AllowAtMost(0): %v, want ErrInvalidCost", err)
	}
}

// TestNew: a nil client, typed or not, and invalid options are refused at
// construction, with an error that names them.
func TestNew(t *testing.T) {
	for name, rdb := range map[string]redis.UniversalClient{
		"untyped nil":        nil,
		"nil *Client":        (*redis.Client)(nil),
		"nil *ClusterClient": (*redis.ClusterClient)(nil),
		"nil *Ring":          (*redis.Ring)(nil),
	} {
		if l, err := New(rdb); err == nil || l != nil || !strings.Contains(err.Error(), "nil redis client") {
			t.Errorf("%s: New = %v, %v; want an error naming the nil client", name, l, err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, tt := range []struct {
		opt  Option
		want string
	}{
		{WithPrefix(""), "WithPrefix"},
		{WithTimeout(-time.Second), "WithTimeout"},
		{WithBreaker(-1, time.Second), "WithBreaker"},
		{WithBreaker(3, 0), "WithBreaker"},
		{WithDenyCache(0), "WithDenyCache"},
		{WithLocalFallback(-1, 10), "WithLocalFallback"},
		{WithLocalFallback(2, 0), "WithLocalFallback"},
		{WithBatching(0), "WithBatching"},
	} {
		if l, err := New(rdb, tt.opt, WithLogger(nil)); err == nil || l != nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New with an invalid %s: %v, %v; want an error naming it", tt.want, l, err)
		}
	}
	if _, err := New(rdb, WithBreaker(0, 0), WithTimeout(0), WithBatching(1), WithLogger(nil)); err != nil {
		t.Errorf("New with the breaker, the timeout and batching off: %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(ctx, 1, PerSecond(1).For("k")); !errors.Is(err, context.Canceled) {
		t.Errorf("Allow with a canceled context: %v, want context.Canceled", err)
	}
}

func TestParseReplyNeverPanics(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"nil", nil},
		{"string", "OK"},
		{"int", int64(1)},
		{"empty", []any{}},
		{"four", []any{int64(1), int64(0), int64(0), int64(0)}},
		{"five", []any{int64(1), int64(0), int64(0), int64(0), int64(0)}},
		{"seven", []any{int64(1), int64(1), int64(0), int64(0), int64(0), int64(0), int64(0)}},
		{"negative", []any{int64(1), int64(1), int64(-1), int64(0), int64(0), int64(0)}},
		{"string clock", []any{"1", int64(1), int64(0), int64(0), int64(0), int64(0)}},
		{"string element", []any{int64(1), int64(1), "0", int64(0), int64(0), int64(0)}},
		{"nil element", []any{int64(1), int64(1), nil, int64(0), int64(0), int64(0)}},
		{"int element", []any{int64(1), 1, 0, 0, 0, 0}},
		{"nested", []any{int64(1), []any{}, int64(0), int64(0), int64(0), int64(0)}},
	}
	pl, err := newPlan([]Limit{PerSecond(1)}, []int{0}, []int{0}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		var out [1]Result
		if err := parseResults(tt.v, out[:], pl, func(int) int { return 1 }); !errors.Is(err, errBadReply) {
			t.Errorf("%s: parseResults(%#v) = %+v, %v, want errBadReply", tt.name, tt.v, out[0], err)
		}
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	ctx := context.Background()
	for _, lim := range []Limit{
		PerSecond(3), with(PerSecond(3), LeakyBucket), with(PerSecond(3), FixedWindow),
		with(PerSecond(3), SlidingWindow), with(PerSecond(3), SlidingWindowCounter),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			mr, rdb, l := miniLimiter(t)
			for range 5 {
				r, err := l.Peek(ctx, lim.For("k"))
				if err != nil {
					t.Fatal(err)
				}
				if want := (Result{Allowed: true, Remaining: 3}); !opsSame(public(r), want) {
					t.Fatalf("Peek on a fresh key: %+v, want %+v", r, want)
				}
			}
			if n := len(mr.Keys()); n != 0 {
				t.Fatalf("Peek wrote %d keys: %q", n, mr.Keys())
			}
			if r, err := l.Allow(ctx, 2, lim.For("k")); err != nil || !r.Allowed || r.Remaining != 1 {
				t.Fatalf("AllowN(2) after peeks = %+v, %v", r, err)
			}
			key := redisKey(l.prefix, "k", lim.Algorithm)
			dump := func() string { s, _ := rdb.Dump(ctx, key).Result(); return s }
			before, ttl := dump(), mr.TTL(key)
			for range 3 {
				r, err := l.Peek(ctx, lim.For("k"))
				if err != nil || !r.Allowed || r.Remaining != 1 {
					t.Fatalf("Peek after AllowN(2) = %+v, %v, want allowed with 1 remaining", r, err)
				}
			}
			if after := dump(); after != before || mr.TTL(key) != ttl {
				t.Fatalf("Peek changed the key")
			}
			if r, err := l.Allow(ctx, 1, lim.For("k")); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Fatalf("Allow = %+v, %v", r, err)
			}
			r, err := l.Peek(ctx, lim.For("k"))
			if err != nil || r.Allowed || r.RetryAfter <= 0 || r.Remaining != 0 {
				t.Fatalf("Peek when empty = %+v, %v, want denied with a RetryAfter", r, err)
			}
			// A denial writes nothing either.
			before, ttl = dump(), mr.TTL(key)
			if r, err := l.Allow(ctx, 1, lim.For("k")); err != nil || r.Allowed {
				t.Fatalf("Allow when empty = %+v, %v", r, err)
			}
			if after := dump(); after != before || mr.TTL(key) != ttl {
				t.Fatalf("a denied Allow changed the key")
			}
		})
	}
}

func TestReset(t *testing.T) {
	ctx := context.Background()
	for _, lim := range []Limit{
		PerHour(3), with(PerHour(3), LeakyBucket), with(PerHour(3), FixedWindow),
		with(PerHour(3), SlidingWindow), with(PerHour(3), SlidingWindowCounter),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			mr, _, l := miniLimiter(t)
			if err := l.Reset(ctx, "k"); err != nil {
				t.Fatalf("Reset of a key never used: %v", err)
			}
			other := with(PerHour(3), (lim.Algorithm+1)%5)
			for _, li := range []Limit{lim, other} {
				if r, err := l.Allow(ctx, 3, li.For("k")); err != nil || !r.Allowed {
					t.Fatalf("AllowN(3) = %+v, %v", r, err)
				}
			}
			if res, err := l.Allow(ctx, 2, lim.For("k"), PerHour(5).For("k")); err != nil || !res.Rules[1].Allowed {
				t.Fatalf("Allow under two Rules = %+v, %v", res, err)
			}
			if r, _ := l.Allow(ctx, 1, lim.For("k")); r.Allowed {
				t.Fatalf("Allow after the quota is used = %+v", r)
			}
			if err := l.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			// Every algorithm's and every layer's state is gone.
			if keys := mr.Keys(); len(keys) != 0 {
				t.Fatalf("keys left after Reset: %q", keys)
			}
			for _, li := range []Limit{lim, other} {
				if r, err := l.Peek(ctx, li.For("k")); err != nil || r.Remaining != 3 || r.ResetAfter != 0 {
					t.Fatalf("Peek after Reset = %+v, %v, want the whole quota", r, err)
				}
			}
		})
	}
}

// TestTTL: every key a decision writes has a TTL, exactly the time until
// its quota is whole (rounded up to the ms), and is gone once it runs out.
func TestTTL(t *testing.T) {
	ctx := context.Background()
	for _, lim := range []Limit{
		PerSecond(10), PerHour(2), {Rate: 10, Period: time.Microsecond}, {Rate: 1, Period: 10 * time.Microsecond, Burst: 1},
		with(PerSecond(10), LeakyBucket), with(PerHour(2), LeakyBucket),
		with(PerSecond(10), FixedWindow), with(PerHour(2), FixedWindow), Limit{Algorithm: FixedWindow, Rate: 1, Period: 3 * time.Microsecond},
		with(PerSecond(10), SlidingWindow), with(PerHour(2), SlidingWindow),
		with(PerSecond(10), SlidingWindowCounter), with(PerHour(2), SlidingWindowCounter),
	} {
		t.Run(fmt.Sprintf("%s/%d per %v", lim.Algorithm, lim.Rate, lim.Period), func(t *testing.T) {
			mr, rdb, l := miniLimiter(t)
			mr.SetTime(redistest.Epoch.Add(1234567 * µs))
			r, err := l.Allow(ctx, 1, lim.For("k"))
			if err != nil || !r.Allowed {
				t.Fatalf("Allow = %+v, %v", r, err)
			}
			keys := mr.Keys()
			want := stateKeys(nil, l.prefix, "k", &algorithms[lim.Algorithm], 0)
			slices.Sort(want)
			if !slices.Equal(keys, want) {
				t.Fatalf("keys written: %q, want just the key's own %q", keys, want)
			}
			if lim.Algorithm == FixedWindow {
				// Its key expires at the window's end (PXAT): ResetAfter
				// less the ms a Redis keeps a key through its expiry's.
				end := r.ResetAfter - ms
				for _, k := range keys {
					if ttl := mr.TTL(k); ttl != end {
						t.Fatalf("TTL %s = %v, want ResetAfter %v less 1ms", k, ttl, r.ResetAfter)
					}
				}
				mr.FastForward(end - time.Microsecond)
				if !mr.Exists(keys[0]) {
					t.Fatalf("key %s gone 1µs before its window ends", keys[0])
				}
				mr.FastForward(time.Microsecond)
				if keys := mr.Keys(); len(keys) != 0 {
					t.Fatalf("keys still there after their window: %q", keys)
				}
				return
			}
			ttl := max(time.Millisecond, (r.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond))
			for _, k := range keys {
				if pttl, err := rdb.PTTL(ctx, k).Result(); err != nil || pttl != ttl {
					t.Fatalf("PTTL %s = %v, %v; want %v (ResetAfter %v rounded up to the ms)", k, pttl, err, ttl, r.ResetAfter)
				}
			}
			mr.FastForward(ttl - time.Millisecond)
			for _, k := range keys {
				if !mr.Exists(k) {
					t.Fatalf("key %s gone 1ms before its TTL", k)
				}
			}
			mr.FastForward(time.Millisecond)
			if keys := mr.Keys(); len(keys) != 0 {
				t.Fatalf("keys still there after their TTL: %q", keys)
			}
		})
	}
}

// TestHostileKeys: keys with braces, escapes, NUL, invalid UTF-8 and any
// length all work, and keys that differ in any byte never share state.
func TestHostileKeys(t *testing.T) {
	long := strings.Repeat("k", 64<<10)
	keys := []string{
		"a", "{a}", "a{", "}a", "{}", "}{", "{a}b", "x{a}", "%7Ba%7D", "%", "%25", "#", "%23",
		"a\x00", "\x00a", "\x00", "\x00\x00", "\xff", "\xfe", "\xc3\x28", "é", "e\u0301",
		"user:42", "user:{42}", "user:%7B42%7D",
		strings.Repeat("x", maxTagLen), strings.Repeat("x", maxTagLen+1), strings.Repeat("{", maxTagLen),
		long, long[:len(long)-1] + "j", long + "\x00",
		hashedTag(long), // what the long key is stored as
	}
	ctx := context.Background()
	for _, a := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			mr, _, l := miniLimiter(t)
			lim := with(PerHour(1), a)
			for _, k := range keys {
				if r, err := l.Allow(ctx, 1, lim.For(k)); err != nil || !r.Allowed {
					t.Fatalf("first Allow of key %q: %+v, %v: it shares state with an earlier key", trunc(k), r, err)
				}
			}
			for _, k := range keys {
				if r, err := l.Allow(ctx, 1, lim.For(k)); err != nil || r.Allowed {
					t.Fatalf("second Allow of key %q: %+v, %v, want denied", trunc(k), r, err)
				}
			}
			stored := mr.Keys()
			if per := len(algorithms[a].suffixes); len(stored) != per*len(keys) {
				t.Fatalf("%d keys in Redis for %d caller keys", len(stored), len(keys))
			}
			for _, k := range stored {
				if len(k) > len(l.prefix)+3+maxTagLen+len(":sw2m") {
					t.Errorf("Redis key of %d bytes: caller keys are not bounded", len(k))
				}
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%.40s...(%d bytes)", s, len(s))
	}
	return s
}

// crc16 is CRC16/XMODEM, the checksum Redis Cluster takes mod 16384 to
// pick a key's slot.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is Redis Cluster's HASH_SLOT(key): the CRC16 of the part between
// the first '{' and the next '}' if that is not empty, else of the whole key.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

func TestKeySlot(t *testing.T) {
	// Vectors from the Redis Cluster specification and CLUSTER KEYSLOT.
	tests := []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3},
		{"somekey", 11058},
		{"foo{hash_tag}", 2515},
		{"{hash_tag}bar", 2515},
		{"foo{}{bar}", keySlotWhole("foo{}{bar}")},
		{"foo{{bar}}zap", int(crc16("{bar") % 16384)},
		{"foo{bar}{zap}", int(crc16("bar") % 16384)},
	}
	for _, tt := range tests {
		if got := keySlot(tt.key); got != tt.want {
			t.Errorf("keySlot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

func keySlotWhole(k string) int { return int(crc16(k) % 16384) }

// TestHashSlot: a decision's keys land in one slot, whatever the prefix
// and algorithm: the slot of the caller's escaped key or, for a key that
// holds a hash tag of its own ("user:{42}"), of that tag, escaped, which
// is the slot Redis gives the caller's key itself when the tag needs no
// escaping. A prefix with braces never moves it, the escaped parts hold no
// brace that could end them early, and slot of slotTag, which groups a
// Cluster's batches, computes that slot.
func TestHashSlot(t *testing.T) {
	keys := []string{"user:42", "{42}", "user:{42}", "a}b{c", "{", "}", "{}", "%7B42%7D", "\x00{x}", strings.Repeat("{", 200), "a{%}b"}
	for _, p := range []string{"ratelimit", "{app}", "a}b{", "{42}"} {
		prefix := escapeBraces.Replace(p)
		if strings.ContainsAny(prefix, "{}") {
			t.Errorf("the prefix %q escapes to %q, which holds a brace", p, prefix)
		}
		for _, k := range keys {
			tag := escapeTag(k)
			hashed, rest, tagged := strings.Cut(tag, "}{")
			own, hasOwn := hashTag(k)
			if tagged != hasOwn || strings.ContainsAny(hashed, "{}") || strings.ContainsAny(rest, "{}") {
				t.Fatalf("escapeTag(%q) = %q: want the escaped key with no brace, after its own hash tag %q (found %v) and \"}{\"", k, tag, own, hasOwn)
			}
			if slotTag(tag) != hashed {
				t.Fatalf("slotTag(%q) = %q, want %q", tag, slotTag(tag), hashed)
			}
			want := keySlotWhole(hashed)
			if got := slot(slotTag(tag)); got != want {
				t.Errorf("slot(%q) = %d, want %d", slotTag(tag), got, want)
			}
			if hasOwn && !strings.ContainsAny(own, "%{}#") && want != keySlot(k) {
				t.Errorf("key %q: slot %d, want Redis' slot of the key itself, %d", k, want, keySlot(k))
			}
			for a := TokenBucket; a <= LeakyBucket; a++ {
				for layer := range 3 {
					for _, rk := range stateKeys(nil, prefix, tag, &algorithms[a], layer) {
						if got, ok := hashTag(rk); !ok || got != hashed {
							t.Fatalf("state key %q: the hash tag is %q (found %v), not %q", rk, got, ok, hashed)
						}
						if got := keySlot(rk); got != want {
							t.Errorf("state key %q is in slot %d, want %d", rk, got, want)
						}
					}
				}
			}
		}
	}
}

// FuzzDecide: whatever the key, Limit, cost and mode, a decision returns a
// Result that keeps its invariants or a sentinel error, and never panics.
func FuzzDecide(f *testing.F) {
	f.Add("k", uint8(0), 10, int64(time.Second), 0, 1, int64(0), uint8(0))
	f.Add("{x}", uint8(4), 1, int64(time.Hour), 3, 2, int64(time.Minute), uint8(0))
	f.Add("\xff\x00", uint8(1), 100000, int64(time.Second), 0, 100000, int64(0), uint8(1))
	f.Add("", uint8(2), 1, int64(1), 0, 1, int64(0), uint8(0))
	f.Add("k", uint8(3), math.MaxInt, int64(math.MaxInt64), math.MaxInt, math.MaxInt, int64(math.MaxInt64), uint8(2))
	f.Add("k", uint8(9), -1, int64(-1), -1, -1, int64(-1), uint8(1))
	f.Add("k", uint8(2), 7, int64(7*time.Microsecond), 0, 7, int64(0), uint8(3))
	f.Add("k", uint8(4), 1, int64(time.Microsecond), 1, 1, int64(time.Microsecond), uint8(2))
	mr, _, l := miniLimiter(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, key string, alg uint8, rate int, period int64, burst, n int, maxDelay int64, mode uint8) {
		lim := Limit{Algorithm: Algorithm(alg), Rate: rate, Period: time.Duration(period), Burst: burst, MaxDelay: time.Duration(maxDelay)}
		mr.SetTime(redistest.Epoch.Add(time.Duration(len(key)) * time.Millisecond))
		var r Result
		var err error
		req := modelRequest{n: int64(n), mode: int(mode % 5)}
		switch req.mode {
		case modeConsume:
			r, err = l.Allow(ctx, n, lim.For(key))
		case modePeek:
			req.n = 1
			r, err = l.Peek(ctx, lim.For(key))
		case modeAtMost:
			r, err = l.AllowAtMost(ctx, n, lim.For(key))
		case modeRefund:
			err = l.Refund(ctx, handReceipt(l, key, lim, n, redistest.Epoch.UnixMicro()))
		case modeCharge:
			r, err = l.Settle(ctx, receiptFor(l, lim.For(key), 0, 0), n)
		}
		if err != nil {
			if !errors.Is(err, ErrEmptyKey) && !errors.Is(err, ErrInvalidLimit) && !errors.Is(err, ErrInvalidCost) {
				t.Fatalf("%+v (%q, %+v): unexpected error %v", req, key, lim, err)
			}
			return
		}
		if req.mode <= modeAtMost {
			checkInvariants(t, lim, r, req, t.Fatalf)
		}
		if rerr := l.Reset(ctx, key); rerr != nil {
			t.Fatalf("Reset: %v", rerr)
		}
	})
}

// public is r without what only the Limiter reads (the stamp a refund
// names), for comparisons with a Result literal.
func public(r Result) Result {
	r.stamp, r.pos, r.owner, r.rule, r.several = 0, 0, 0, Rule{}, nil
	return r
}

// TestParseResultsPacked: a batch's reply mixes packed takes (two
// integers, a fixed window's, see packed in scripts/driver.lua) with the
// five-integer form, and each is read at its own offset; a packed reply
// where no take was sent, a tag out of range or integers left over are
// errBadReply, not a Result.
func TestParseResultsPacked(t *testing.T) {
	pl, err := newPlan([]Limit{{Algorithm: FixedWindow, Rate: 10, Period: time.Second}}, []int{0}, []int{0}, false)
	if err != nil {
		t.Fatal(err)
	}
	const m = int64(packedMin)
	takes := func(n ...int) func(int) int { return func(i int) int { return n[i] } }
	ok := []any{int64(99), 3*m + 7, int64(5000), int64(0), int64(0), int64(2000), int64(2000), int64(3), -(4*m + 0), int64(9000)}
	var out [3]Result
	if err := parseResults(ok, out[:], pl, takes(2, 0, 1)); err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{Allowed: true, Granted: 2, Remaining: 7, ResetAfter: 5 * time.Millisecond, stamp: 3},
		{Remaining: 0, RetryAfter: 2 * time.Millisecond, ResetAfter: 2 * time.Millisecond, stamp: 3},
		{Remaining: 0, RetryAfter: 9 * time.Millisecond, ResetAfter: 9 * time.Millisecond, stamp: 4},
	}
	for i := range want {
		if !opsSame(out[i], want[i]) {
			t.Errorf("result %d: %+v, want %+v", i, out[i], want[i])
		}
	}
	for _, tt := range []struct {
		name  string
		v     []any
		takes func(int) int
	}{
		{"packed for a peek", ok, takes(2, 0, 0)},
		{"one integer left over", append(append([]any(nil), ok...), int64(1)), takes(2, 0, 1)},
		{"cut short", ok[:len(ok)-1], takes(2, 0, 1)},
		{"tag 0", []any{int64(1), m - 1 + m, int64(5)}, takes(1)},
		{"tag past the wrap", []any{int64(1), 131072 * m, int64(5)}, takes(1)},
		{"no wait", []any{int64(1), 3 * m, int64(0)}, takes(1)},
	} {
		n := 3
		if len(tt.v) <= 3 {
			n = 1
		}
		if err := parseResults(tt.v, out[:n], pl, tt.takes); !errors.Is(err, errBadReply) {
			t.Errorf("%s: %v, want errBadReply", tt.name, err)
		}
	}
}

// receiptFor is a receipt of granted units of rule taken at stamp (a
// permit's id for Concurrency), as l's Allow would return it: for tests
// that give back or renew without a take. With granted 0 it is a Result
// that took nothing, which Settle charges all of used.
func receiptFor(l *Limiter, rule Rule, granted int, stamp int64) Result {
	r := Result{Allowed: granted > 0, Granted: granted, stamp: stamp, rule: rule}
	if granted > 0 {
		r.owner = receipt(l, rule.Key, rule.Limit.row(), 0, granted)
	}
	return r
}
