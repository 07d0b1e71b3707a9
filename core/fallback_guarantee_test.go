package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// The tests in this file back what the local fallback (fallback.go,
// WithLocalFallback) promises: across the instances, a key is admitted at
// most its Capacity plus Rate per Period for the time since the outage
// began; a denial's RetryAfter is the exact wait (Result); and the switch
// to the fallback and back hands out nothing beyond that. They drive the
// fallbacks of several instances at simulated instants, since the fallback
// runs on the process' clock, which a test cannot move.

// fleet is n instances' fallbacks, each made as WithLocalFallback(n, 16)
// makes it, deciding one key under one Limit. Instants are µs since the
// simulation began, on every instance's clock alike.
type fleet struct {
	sketches []*sketch
	pl       *plan
	limit    Limit
}

func newFleet(t *testing.T, n int, limit Limit) *fleet {
	t.Helper()
	pl, err := newPlan([]Limit{limit}, layer0)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{pl: pl, limit: limit}
	for range n {
		f.sketches = append(f.sketches, newSketch(n, 16))
	}
	return f
}

// decide decides one request of one unit on instance i at instant at (µs).
func (f *fleet) decide(t *testing.T, i int, at int64) Result {
	t.Helper()
	s := f.sketches[i]
	var out [1]Result
	rq := &request{key: "k", pl: f.pl, n: 1, mode: modeConsume}
	if err := s.decide([]string{"k"}, rq, s.start.Add(time.Duration(at)*time.Microsecond), out[:]); err != nil {
		t.Fatalf("instance %d at %v: %v", i, micros(at), err)
	}
	if !out[0].Fallback {
		t.Fatalf("instance %d at %v: %+v, want Fallback", i, micros(at), out[0])
	}
	return out[0]
}

// greedy plays a client on every instance that obeys RetryAfter: it asks
// again at once after an admission and at the instant a denial names after
// one, until horizon (µs). Every probe µs on average (0: never) each
// instance also gets a request at a random instant, as other clients of the
// key would send. It checks what Result promises of each answer and calls
// admitted with the instant and the fleet's admissions so far after each
// admission. It returns the fleet's admissions.
func (f *fleet) greedy(t *testing.T, rng *rand.Rand, horizon, probe int64, admitted func(at int64, total int)) int {
	t.Helper()
	n := len(f.sketches)
	next := make([]int64, n)   // the greedy client's next request
	probes := make([]int64, n) // the next random request, or beyond horizon
	promised := make([]bool, n)
	for i := range probes {
		probes[i] = horizon + 1
		if probe > 0 {
			probes[i] = 1 + rng.Int64N(2*probe)
		}
	}
	total := 0
	for {
		i, at, greedy := -1, horizon+1, false
		for j := range n {
			if next[j] < at {
				i, at, greedy = j, next[j], true
			}
			if probes[j] < at {
				i, at, greedy = j, probes[j], false
			}
		}
		if i < 0 {
			return total
		}
		r := f.decide(t, i, at)
		if r.ResetAfter < 0 || r.Remaining < 0 || r.Remaining > f.limit.Capacity() {
			t.Fatalf("instance %d at %v: %+v: ResetAfter < 0 or Remaining outside [0, %d]", i, micros(at), r, f.limit.Capacity())
		}
		if !greedy {
			probes[i] = at + 1 + rng.Int64N(2*probe)
		}
		if r.Allowed {
			total++
			admitted(at, total)
			promised[i], next[i] = false, at // a client that was admitted asks again at once
			continue
		}
		if r.RetryAfter <= 0 {
			t.Fatalf("instance %d at %v: denied with RetryAfter %v, want > 0", i, micros(at), r.RetryAfter)
		}
		if greedy && promised[i] {
			t.Fatalf("instance %d at %v: denied (%+v), although its last denial's RetryAfter named this instant "+
				"and nothing was admitted on it since: a client that obeys RetryAfter is refused again", i, micros(at), r)
		}
		if greedy || next[i] > at {
			// A denial changes nothing, so a probe's denial names the
			// instant the greedy client's last one named, or an earlier one
			// if the probe came before the greedy client's first request.
			next[i], promised[i] = at+r.RetryAfter.Microseconds(), true
		}
	}
}

// bucketBound is the most a bucket Limit (TokenBucket, LeakyBucket) that
// is whole at instant 0 admits by instant at (µs): Capacity plus Rate per
// Period for the time.
func bucketBound(limit Limit, at int64) int {
	p := limit.Period.Microseconds()
	return limit.Capacity() + int(at/p*int64(limit.Rate)+at%p*int64(limit.Rate)/p)
}

// TestFallbackFourInstancesPerMinuteNeverExceedLimit backs "across the
// instances, each key is admitted at most its Capacity plus Rate per Period
// for the time since the outage began" (fallback.go) and "errors ... (the
// local fallback) are on the strict side only" (README) for 1 per minute
// shared by 4 instances, whose share (a quarter of a unit) accrues before
// an instance admits anything. Over 30 simulated days of greedy clients on
// all 4 instances, the fleet never admits more than the Limit would have
// since the outage began, and a client that waits the RetryAfter of a
// denial is admitted then. It failed before the fallback told outages
// apart per Limit: an instance quiet for a second restarted the outage, put
// the quarter unit back to the start of its accrual, and so refused a
// client that obeyed RetryAfter for ever (3 minutes, then 3 more...).
func TestFallbackFourInstancesPerMinuteNeverExceedLimit(t *testing.T) {
	limit := PerMinute(1)
	horizon := (30 * 24 * time.Hour).Microseconds()
	for _, probe := range []time.Duration{0, 10 * time.Second, 90 * time.Second} {
		t.Run(fmt.Sprintf("random requests every %v", probe), func(t *testing.T) {
			f := newFleet(t, 4, limit)
			rng := rand.New(rand.NewPCG(1, uint64(probe)))
			total := f.greedy(t, rng, horizon, probe.Microseconds(), func(at int64, total int) {
				if bound := bucketBound(limit, at); total > bound {
					t.Fatalf("at %v the 4 fallbacks together admitted %d, above the %d the Limit admits since the outage began",
						micros(at), total, bound)
				}
			})
			// Strict, but not starving: the fleet admits its Rate.
			if bound := bucketBound(limit, horizon); total < bound-4 {
				t.Errorf("%d admitted in 30 days by 4 greedy clients, want nearly the Limit's %d", total, bound)
			}
			t.Logf("30 days: %d admitted by the fleet, the Limit's bound %d", total, bucketBound(limit, horizon))
		})
	}
}

// TestFallbackBucketsNeverExceedLimit is the same property over random
// bucket Limits (Burst above and below Rate, shares above and below one
// unit) and instance counts: the fleet stays within Capacity plus Rate per
// Period since the outage began, and RetryAfter is exact.
func TestFallbackBucketsNeverExceedLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	periods := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
	cases := 40
	if !redistest.Long() {
		cases = 12
		redistest.Reduced(t, "the fallback bucket property checks 12 Limits")
	}
	for c := range cases {
		limit := Limit{Algorithm: TokenBucket, Rate: 1 + rng.IntN(20), Period: periods[rng.IntN(len(periods))]}
		if rng.IntN(2) == 0 {
			limit.Burst = 1 + rng.IntN(3*limit.Rate)
		}
		if rng.IntN(3) == 0 {
			limit.Algorithm = LeakyBucket
		}
		instances := 1 + rng.IntN(12)
		t.Run(fmt.Sprintf("%d/%v/%v×%d", c, limit, limit.Algorithm, instances), func(t *testing.T) {
			f := newFleet(t, instances, limit)
			// Long enough for 200 units across the fleet.
			horizon := 200 * limit.Period.Microseconds() / int64(limit.Rate)
			probe := rng.Int64N(limit.Period.Microseconds()) + 1
			total := f.greedy(t, rng, horizon, probe, func(at int64, total int) {
				if bound := bucketBound(limit, at); total > bound {
					t.Fatalf("at %v the fleet admitted %d, above the Limit's %d since the outage began", micros(at), total, bound)
				}
			})
			if total == 0 {
				t.Errorf("nothing admitted over %v", micros(horizon))
			}
		})
	}
}

// TestFallbackYearlyLimitAcross300Instances: 1 per 365 days shared by 300
// instances is a share of 1/300 of a unit, which accrues for 299 years
// before an instance may admit. Nothing overflows: no instance admits,
// ResetAfter is never negative, every denial says to wait (RetryAfter >
// 0, at most the share's refill time, which saturates at the largest
// time.Duration), and the instant a denial names stays put as the years go
// by, instead of moving later with every request (a client that obeys it
// would never be admitted).
func TestFallbackYearlyLimitAcross300Instances(t *testing.T) {
	year := 365 * 24 * time.Hour
	limit := Limit{Rate: 1, Period: year}
	f := newFleet(t, 300, limit)
	// 300 years do not fit in a time.Duration: the waits saturate.
	most := micros(math.MaxInt64)
	named := make([]int64, 300) // the instant each instance's last denial named
	rng := rand.New(rand.NewPCG(3, 65))
	for at := int64(0); at < (20 * year).Microseconds(); at += rng.Int64N((30 * 24 * time.Hour).Microseconds()) {
		for i := range f.sketches {
			r := f.decide(t, i, at)
			switch {
			case r.Allowed:
				t.Fatalf("instance %d admitted at %v: its share is 1/300 of a unit per year", i, micros(at))
			case r.RetryAfter <= 0 || r.RetryAfter > most:
				t.Fatalf("instance %d at %v: RetryAfter %v, want in (0, %v]", i, micros(at), r.RetryAfter, most)
			case r.ResetAfter < 0 || r.ResetAfter > most:
				t.Fatalf("instance %d at %v: ResetAfter %v, want in [0, %v]", i, micros(at), r.ResetAfter, most)
			}
			when := at + r.RetryAfter.Microseconds()
			if r.RetryAfter == most {
				when = 0 // saturated: the instant is later than it says
			}
			if named[i] != 0 && when > named[i] {
				t.Fatalf("instance %d at %v: the denial names %v, later than the %v its last one named, with nothing admitted since",
					i, micros(at), micros(when), micros(named[i]))
			}
			named[i] = when
			if at > (10*year).Microseconds() && r.RetryAfter > most-year {
				t.Fatalf("instance %d at %v: RetryAfter %v: 10 years into the outage the wait has not shrunk from 299 years", i, micros(at), r.RetryAfter)
			}
		}
	}
	// AllowAtMost is refused alike, and says so.
	s := f.sketches[0]
	r, err := s.allowOne("k", limit, 1, true, s.start.Add(21*year))
	if err != nil || r.Allowed || r.RetryAfter <= 0 || r.ResetAfter < 0 {
		t.Errorf("AllowAtMost(1) after 21 years: %+v, %v; want a denial with RetryAfter > 0", r, err)
	}
}

// TestFallbackHugeBurstRetryAfterDoesNotWrap: a bucket whose share takes
// longer to refill than the fallback's clock holds (Burst 2^40 at 1 per
// 2^46µs: 2^86µs) holds what fits in that clock (2^60µs, 2^14 units), and
// a denied request tells the truth about it: after one unit, the request
// of the whole 2^14 waits for that unit, 2^46µs. It was told 1µs, since
// the wait was clipped to the clock's end before the refill time was taken
// off, so Wait would have spun on it; and a cost beyond what the clock
// holds passed the share check and then was denied for ever.
func TestFallbackHugeBurstRetryAfterDoesNotWrap(t *testing.T) {
	limit := Limit{Rate: 1, Period: maxPeriod * time.Microsecond, Burst: maxRate}
	if err := limit.Validate(); err != nil {
		t.Fatal(err)
	}
	s := newSketch(1, 16)
	now := s.start.Add(time.Second)
	if r, err := s.allowOne("k", limit, 1, false, now); err != nil || !r.Allowed {
		t.Fatalf("AllowN(1) = %+v, %v; want admitted", r, err)
	}
	const held = 1 << 14 // 2^60µs / 2^46µs
	r, err := s.allowOne("k", limit, held, false, now)
	if err != nil || r.Allowed || r.RetryAfter != maxPeriod*time.Microsecond {
		t.Errorf("AllowN(2^14) after one unit = %+v, %v; want denied until that unit is back, %v", r, err, maxPeriod*time.Microsecond)
	}
	if _, err := s.allowOne("k", limit, held+1, false, now); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("AllowN(2^14 + 1), more than the fallback's bucket holds: %v, want ErrInvalidCost", err)
	}
	// A layer that admits beside one that denies reports what it had
	// before: ResetAfter never below 0.
	pl, err := newPlan([]Limit{limit, PerSecond(1)}, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]Result, 2)
	for range 2 {
		if err := s.decide([]string{"a", "b"}, &request{key: "a", pl: pl, n: 1, mode: modeConsume}, now, rs); err != nil {
			t.Fatal(err)
		}
	}
	if rs[1].Allowed || !rs[0].Allowed || rs[0].ResetAfter < 0 || rs[0].Granted != 0 {
		t.Errorf("layers after the per-second layer is spent: %+v; want layer 0 reported admitted with nothing taken, ResetAfter >= 0", rs)
	}
}

// TestFallbackOutageSwitch backs what the switch to the fallback and back
// promises, on 4 Limiters that share a Redis (miniredis) and each fall back
// with a quarter of 40 per hour:
//
//   - Redis down: each instance admits its share, 10, so the 4 admit at most
//     Capacity + Rate per Period since the outage began ("An outage starts
//     every key at its share of the capacity, whatever it held before",
//     fallback.go). That is on top of what Redis admitted before the
//     outage: the README's "errors ... (the local fallback) are on the
//     strict side only" holds within an outage, not across its start (see
//     the log line).
//   - Redis back: Redis decides again from the state it kept, which the
//     fallback never touched: a key Redis had spent stays spent.
//   - A fallback Result given back (Refund, Settle) once Redis is back
//     gives Redis nothing: it took nothing there.
func TestFallbackOutageSwitch(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	limit := PerHour(40)
	var fleet []*Limiter
	for range 4 {
		fleet = append(fleet, opsNew(t, rdb, WithLocalFallback(4, 100), WithBreaker(0, 0), WithTimeout(time.Minute)))
	}
	count := func(l *Limiter, key string, calls int, wantFallback bool) (admitted int, receipts []Result) {
		t.Helper()
		for i := range calls {
			r, err := l.Allow(ctx, key, limit)
			if err != nil {
				t.Fatalf("%s call %d: %v", key, i, err)
			}
			if r.Fallback != wantFallback {
				t.Fatalf("%s call %d: %+v, want Fallback %v", key, i, r, wantFallback)
			}
			if r.Allowed {
				admitted++
				receipts = append(receipts, r)
			}
		}
		return admitted, receipts
	}

	// Before the outage, Redis spends "spent" entirely, and "half" by half.
	if got, _ := count(fleet[0], "spent", 45, false); got != 40 {
		t.Fatalf("Redis admitted %d of 45, want 40", got)
	}
	if got, _ := count(fleet[1], "half", 20, false); got != 20 {
		t.Fatalf("Redis admitted %d of 20, want 20", got)
	}

	mr.SetError("MASTERDOWN Link with MASTER is down") // what a replica answers
	began := time.Now()
	total := map[string]int{}
	var receipts []Result
	for _, l := range fleet {
		for _, key := range []string{"spent", "half", "fresh"} {
			got, rs := count(l, key, 15, true)
			if got != 10 {
				t.Errorf("instance's fallback admitted %d of 15 for %q, want its share 10", got, key)
			}
			total[key] += got
			receipts = append(receipts, rs...)
		}
	}
	elapsed := time.Since(began)
	bound := limit.Capacity() + int(float64(limit.Rate)*elapsed.Seconds()/limit.Period.Seconds())
	for key, n := range total {
		if n > bound {
			t.Errorf("%q: the 4 fallbacks admitted %d in %v, above Capacity + Rate per Period since the outage began (%d)",
				key, n, elapsed, bound)
		}
	}
	t.Logf("%q: Redis admitted 40 before the outage, the fallbacks %d in the %v after it began: %d in all, where the Limit admits %d; "+
		"the fallback starts every key at its share whatever Redis held", "spent", total["spent"], elapsed.Round(time.Millisecond),
		40+total["spent"], bound)
	// Refunds while Redis is down reach nobody, and give the fallback
	// nothing back.
	if err := fleet[0].Refund(ctx, "fresh", limit, receipts[len(receipts)-1]); err == nil {
		t.Errorf("Refund with Redis down = nil, want the Redis error")
	}
	if got, _ := count(fleet[3], "fresh", 1, true); got != 0 {
		t.Errorf("after a refund in the outage, the fallback admitted again: want its share spent")
	}

	mr.SetError("")
	// Redis decides again, from what it kept.
	if got, _ := count(fleet[2], "spent", 5, false); got != 0 {
		t.Errorf("after the outage Redis admitted %d for the key it had spent, want 0: the fallback must not reset it", got)
	}
	if got, _ := count(fleet[2], "half", 30, false); got != 20 {
		t.Errorf("after the outage Redis admitted %d for the half-spent key, want the 20 it had left", got)
	}
	// Fallback receipts given back to Redis give it nothing.
	for i, r := range receipts {
		l := fleet[i%4]
		if err := l.Refund(ctx, "fresh", limit, r); err != nil {
			t.Fatalf("Refund of fallback receipt %d: %v", i, err)
		}
		if _, err := l.Settle(ctx, "spent", limit, r, 0); err != nil {
			t.Fatalf("Settle of fallback receipt %d: %v", i, err)
		}
	}
	if p, err := fleet[0].Peek(ctx, "spent", limit); err != nil || p.Remaining != 0 {
		t.Errorf("Peek of the spent key after refunding %d fallback receipts: %+v, %v; want 0 remaining", len(receipts), p, err)
	}
	if got, _ := count(fleet[1], "fresh", 45, false); got != 40 {
		t.Errorf("after refunding fallback receipts a fresh key got %d from Redis, want exactly its 40", got)
	}
}

// TestFallbackNewOutageNeverGivesMore backs "a fallback decision [after a
// quiet spell] starts a new outage: every key starts at its share again,
// which never gives more than carrying on would" (fallback.go): a key spent
// in one outage is not whole again in the next, but for what it refilled,
// and a key whose share is a fraction of a unit gets that fraction back,
// not a whole unit, once the spell was long enough for its bucket to fill.
func TestFallbackNewOutageNeverGivesMore(t *testing.T) {
	const instances = 4
	hour := time.Hour.Microseconds()
	t.Run("share of 10", func(t *testing.T) {
		f := newFleet(t, instances, PerHour(40)) // 10 per instance, one per 6 minutes
		admit := func(at int64, calls int) int {
			n := 0
			for range calls {
				if f.decide(t, 0, at).Allowed {
					n++
				}
			}
			return n
		}
		if got := admit(0, 15); got != 10 {
			t.Fatalf("outage 1: %d admitted, want the share 10", got)
		}
		// Quiet for 30 minutes: carrying on, 5 units refilled.
		if got := admit(hour/2, 15); got != 5 {
			t.Errorf("30 minutes later: %d admitted, want the 5 refilled", got)
		}
		// Quiet for 2 hours: a new outage; the share is whole either way.
		if got := admit(hour/2+2*hour, 15); got != 10 {
			t.Errorf("2 hours later: %d admitted, want the share 10", got)
		}
	})
	t.Run("share of a quarter", func(t *testing.T) {
		f := newFleet(t, instances, PerMinute(1)) // a quarter unit per instance: one unit per 4 minutes
		minute := time.Minute.Microseconds()
		first := f.decide(t, 0, 0)
		if first.Allowed || first.RetryAfter != 3*time.Minute {
			t.Fatalf("at the outage's start: %+v, want denied for 3 minutes (the quarter unit accrues to one)", first)
		}
		if r := f.decide(t, 0, 3*minute); !r.Allowed {
			t.Fatalf("3 minutes later: %+v, want admitted", r)
		}
		// 10 minutes of quiet: carrying on, the bucket would be full (one
		// unit); a new outage starts it at its quarter again.
		if r := f.decide(t, 0, 13*minute); r.Allowed || r.RetryAfter != 3*time.Minute {
			t.Errorf("after 10 quiet minutes: %+v, want a new outage: denied for 3 minutes", r)
		}
	})
}

// TestFallbackWindowLimitsWithinRatePerWindow backs, for the window
// algorithms, the README's "errors, where there are any (a lease, the
// local fallback), are on the strict side only" and WithLocalFallback's
// "so that the instances together stay within the limit": a SlidingWindow
// admits "at most Rate in any window of length Period, exactly", a
// FixedWindow at most Rate per window (here the window that begins with
// the outage, the worst alignment), and a SlidingWindowCounter, which
// approximates the sliding window, the same. Greedy clients on 4 instances
// with 100 per minute: the fleet must not admit more than 100 in such a
// minute.
//
// A bucket of a quarter of the capacity and of the rate, as the buckets
// fall back, starts whole and refills within the period: the fleet would
// admit 100 at once and 96 more before the minute is out (the test fails
// so without shareOf's halving). The window algorithms fall back to a
// bucket of half the share refilled at half the rate: any window of Period
// sees at most the share, at the cost of half their rate while Redis is
// down.
func TestFallbackWindowLimitsWithinRatePerWindow(t *testing.T) {
	for _, a := range []Algorithm{SlidingWindow, FixedWindow, SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			limit := Limit{Algorithm: a, Rate: 100, Period: time.Minute}
			period := limit.Period.Microseconds()
			f := newFleet(t, 4, limit)
			var times []int64
			f.greedy(t, rand.New(rand.NewPCG(5, 8)), 10*period, 0, func(at int64, _ int) {
				times = append(times, at)
			})
			most, from := 0, 0
			for i, at := range times {
				if a == SlidingWindow {
					for times[from] <= at-period { // the window (at - Period, at]
						from++
					}
				} else {
					for times[from]/period < at/period { // the window [k Period, (k+1) Period)
						from++
					}
				}
				most = max(most, i-from+1)
			}
			if most > limit.Rate {
				t.Errorf("the 4 fallbacks admitted %d within one window of %v, want at most the Limit's Rate %d", most, limit.Period, limit.Rate)
			}
		})
	}
}
