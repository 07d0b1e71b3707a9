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
// WithLocalFallback) promises: across the instances, a bucket key is
// admitted at most its Capacity plus Rate per Period over any interval, a
// window key at most Rate in any interval of Period, from an outage's
// start and however the instances' requests are placed; a share below
// one unit is refused, for the fail policy; a denial's RetryAfter is the
// exact wait (Result); and the switch to the fallback and back hands out
// nothing beyond that. They drive the fallbacks of several instances at
// simulated instants, since the fallback runs on the process' clock,
// which a test cannot move.

// fleet is n instances' fallbacks, each made as WithLocalFallback(n, 16)
// makes it, deciding one key under one Limit. Instants are µs since the
// simulation began, on every instance's clock alike.
type fleet struct {
	sketches []*sketch
	pl       *plan
	limit    Limit
	// starts is when each instance's greedy client first asks (µs);
	// nil: all at 0.
	starts []int64
}

func newFleet(t *testing.T, n int, limit Limit) *fleet {
	t.Helper()
	pl, err := newPlan([]Limit{limit}, layer0, layer0, false)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{pl: pl, limit: limit}
	for range n {
		f.sketches = append(f.sketches, newSketch(n, 16))
	}
	return f
}

// ask decides one request of one unit of key on instance i at instant at
// (µs).
func (f *fleet) ask(i int, key string, at int64) (Result, error) {
	s := f.sketches[i]
	var out [1]Result
	rq := &request{key: key, pl: f.pl, n: 1, mode: modeConsume}
	if f.pl.ids {
		rq.id = permitID()
	}
	err := s.decide([]string{key}, rq, s.start.Add(time.Duration(at)*time.Microsecond), out[:])
	return out[0], err
}

// decide is ask, for a Limit the fallback serves.
func (f *fleet) decide(t *testing.T, i int, at int64) Result {
	t.Helper()
	r, err := f.ask(i, "k", at)
	if err != nil {
		t.Fatalf("instance %d at %v: %v", i, micros(at), err)
	}
	if !r.Fallback {
		t.Fatalf("instance %d at %v: %+v, want Fallback", i, micros(at), r)
	}
	return r
}

// greedy plays a client on every instance that obeys RetryAfter: it asks
// first at its start (f.starts), again at once after an admission and at
// the instant a denial names after one, until horizon (µs). Every probe
// µs on average (0: never) each instance also gets a request at a random
// instant, as other clients of the key would send. It checks what Result
// promises of each answer and returns the instants of the fleet's
// admissions, in order.
func (f *fleet) greedy(t *testing.T, rng *rand.Rand, horizon, probe int64) []int64 {
	t.Helper()
	n := len(f.sketches)
	next := make([]int64, n) // the greedy client's next request
	promised := make([]bool, n)
	q := &requests{seq: make([]int, 2*n)}
	for i := range n {
		if f.starts != nil {
			next[i] = f.starts[i]
		}
		q.ask(i, next[i], true)
		if probe > 0 {
			q.ask(i, 1+rng.Int64N(2*probe), false)
		}
	}
	var times []int64
	for {
		rq, ok := q.first(horizon)
		if !ok {
			return times
		}
		i, at := rq.instance, rq.at
		r, err := f.ask(i, "k", at) // not f.decide: t.Helper costs more than a decision
		if err != nil || !r.Fallback {
			t.Fatalf("instance %d at %v: %+v, %v; want a Fallback Result", i, micros(at), r, err)
		}
		if r.ResetAfter < 0 || r.Remaining < 0 || r.Remaining > f.limit.Capacity() {
			t.Fatalf("instance %d at %v: %+v: ResetAfter < 0 or Remaining outside [0, %d]", i, micros(at), r, f.limit.Capacity())
		}
		if !rq.greedy {
			q.ask(i, at+1+rng.Int64N(2*probe), false)
		}
		if r.Allowed {
			times = append(times, at)
			promised[i], next[i] = false, at // a client that was admitted asks again at once
			q.ask(i, at, true)
			continue
		}
		if r.RetryAfter <= 0 {
			t.Fatalf("instance %d at %v: denied with RetryAfter %v, want > 0", i, micros(at), r.RetryAfter)
		}
		if rq.greedy && promised[i] && f.limit.Algorithm != Concurrency { // its RetryAfter is at most a second
			t.Fatalf("instance %d at %v: denied (%+v), although its last denial's RetryAfter named this instant "+
				"and nothing was admitted on it since: a client that obeys RetryAfter is refused again", i, micros(at), r)
		}
		if rq.greedy || next[i] > at {
			// A denial changes nothing, so a probe's denial names the
			// instant the greedy client's last one named, or an earlier one
			// if the probe came before the greedy client's first request.
			next[i], promised[i] = at+r.RetryAfter.Microseconds(), true
			q.ask(i, next[i], true)
		}
	}
}

// requests is the clients' next requests, soonest first (a heap): one per
// instance from its greedy client, one from the other clients. Asking
// again replaces a client's request; the one replaced stays in the heap,
// known by its seq, until first drops it.
type requests struct {
	heap []request1
	seq  []int // per instance and client, the seq of its live request
}

type request1 struct {
	at       int64
	instance int
	greedy   bool
	seq      int
}

func (r request1) before(o request1) bool {
	if r.at != o.at {
		return r.at < o.at
	}
	if r.instance != o.instance {
		return r.instance < o.instance
	}
	return r.greedy && !o.greedy
}

func (q *requests) slot(i int, greedy bool) *int {
	if greedy {
		return &q.seq[2*i]
	}
	return &q.seq[2*i+1]
}

// ask sets client (i, greedy)'s next request at at.
func (q *requests) ask(i int, at int64, greedy bool) {
	seq := q.slot(i, greedy)
	*seq++
	q.heap = append(q.heap, request1{at: at, instance: i, greedy: greedy, seq: *seq})
	for c := len(q.heap) - 1; c > 0; {
		p := (c - 1) / 2
		if !q.heap[c].before(q.heap[p]) {
			break
		}
		q.heap[c], q.heap[p] = q.heap[p], q.heap[c]
		c = p
	}
}

// first takes the soonest live request, if it is no later than horizon.
func (q *requests) first(horizon int64) (request1, bool) {
	for len(q.heap) > 0 {
		top := q.heap[0]
		last := len(q.heap) - 1
		q.heap[0] = q.heap[last]
		q.heap = q.heap[:last]
		for p := 0; ; {
			c := 2*p + 1
			if c >= last {
				break
			}
			if c+1 < last && q.heap[c+1].before(q.heap[c]) {
				c++
			}
			if !q.heap[c].before(q.heap[p]) {
				break
			}
			q.heap[c], q.heap[p] = q.heap[p], q.heap[c]
			p = c
		}
		if top.seq != *q.slot(top.instance, top.greedy) {
			continue // replaced
		}
		return top, top.at <= horizon
	}
	return request1{}, false
}

// excess finds where the admissions at times (µs, in order) come nearest
// to the Limit's bound, or pass it: for a bucket, the interval [from, to]
// whose count (got) most exceeds Rate per Period for its length (bound is
// Capacity plus that, rounded down); for a window, the window of Period
// (31 days for a calendar) that holds the most, (to - Period, to], and
// bound is Rate. got <= bound is the promise.
func excess(limit Limit, n int, times []int64) (got, bound int, from, to int64) {
	if len(times) == 0 {
		return 0, max(limit.Capacity(), n), 0, 0
	}
	p := window(limit)
	if limit.row().local != localBucket { // a permit lasts a Period, as a window's unit
		i := 0
		for j, at := range times {
			for times[i] <= at-p {
				i++
			}
			if j-i+1 > got {
				got, from, to = j-i+1, times[i], at
			}
		}
		return got, max(limit.Rate, n), from, to
	}
	// count <= C + R·t/P over [s_i, s_j] is P·(j+1) - R·s_j - (P·i - R·s_i)
	// <= C·P: keep the least P·i - R·s_i so far.
	r := int64(limit.Rate)
	least, at, worst, wi, wj := int64(math.MaxInt64), 0, int64(math.MinInt64), 0, 0
	for j, s := range times {
		if v := p*int64(j) - r*s; v < least {
			least, at = v, j
		}
		if v := p*int64(j+1) - r*s - least; v > worst {
			worst, wi, wj = v, at, j
		}
	}
	from, to = times[wi], times[wj]
	return wj - wi + 1, max(limit.Capacity(), n) + int((to-from)*r/p), from, to
}

// window is the Period of limit in µs, or for a calendar the longest
// window, which the fallback holds to its Rate.
func window(limit Limit) int64 {
	if limit.Calendar != NoCalendar {
		return longestCalendar.Microseconds()
	}
	return limit.Period.Microseconds()
}

// checkFleet runs greedy clients on the fleet until horizon and fails if
// the fleet admits beyond the Limit's bound anywhere, or starves: every
// instance's client must get at least a unit per interval of its share.
// It returns the most admitted and its bound, where they came nearest.
func (f *fleet) checkFleet(t *testing.T, rng *rand.Rand, horizon, probe int64) (got, bound int) {
	t.Helper()
	times := f.greedy(t, rng, horizon, probe)
	got, bound, from, to := excess(f.limit, len(f.sketches), times)
	if got > bound {
		t.Fatalf("%v on %d instances: the fleet admitted %d between %v and %v, above the Limit's %d",
			f.limit, len(f.sketches), got, micros(from), micros(to), bound)
	}
	sh, ok := f.sketches[0].shareOf(f.limit.row(), f.limit)
	if !ok { // Concurrency: its permits each last a Period
		sh.interval = window(f.limit) / max(1, int64(f.limit.Rate/len(f.sketches)))
	}
	if least := len(f.sketches) * int((horizon-window(f.limit))/sh.interval); len(times) < least {
		t.Fatalf("%v on %d instances: %d admitted in %v, want at least %d (a unit per %v on each)",
			f.limit, len(f.sketches), len(times), micros(horizon), least, micros(sh.interval))
	}
	return got, bound
}

// TestFallbackFleetSweep backs the sketch's bounds (fallback.go) and
// WithLocalFallback's "the instances together stay within the limit"
// on n instances, n from 1 to 64 (a sample in the default run), Rates
// around the shares of one, two and three units (every Rate's arithmetic:
// TestFallbackShareArithmetic), every Algorithm, a random Burst for the buckets
// and a calendar window for FixedWindow: greedy clients that retry at
// RetryAfter, starting together, or at random instants within a Period
// with other clients' requests between theirs (both in the default run,
// for 24 Periods; one or the other by Rate in the full one, for 6). The
// fleet never admits more than Rate in any interval of Period (the
// windows) or Capacity plus Rate per Period over any interval (the
// buckets), with max(Rate, n) and max(Capacity, n) in place of Rate and
// Capacity when a share is below one unit, and never starves: a share
// below one unit admits a unit per n·Period/Rate on each instance.
// Concurrency permits that are never given back lapse after a Period:
// at most max(Rate, n) in any Period.
//
// Before issue 34 a share below one unit was refused with Redis' error,
// which the default fail policy served with no limit.
func TestFallbackFleetSweep(t *testing.T) {
	ns := []int{1, 2, 3, 4, 5, 7, 8, 13, 20, 64}
	periods, all := 24, redistest.Long()
	if all {
		// Every n and Rate's arithmetic is TestFallbackShareArithmetic's:
		// more instances here, not every n, keep -race within budget.
		ns = append(ns, 16, 32, 48, 63)
	} else {
		redistest.Reduced(t, "the fallback fleet sweep samples instances and rates")
	}
	lengths := []time.Duration{400 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour}
	for _, n := range ns {
		t.Run(fmt.Sprintf("%d instances", n), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(n), 25))
			for _, rate := range sweepRates(n, false) { // every Rate: TestFallbackShareArithmetic
				for _, a := range Algorithms() {
					limit := Limit{Algorithm: a, Rate: rate, Period: lengths[rng.IntN(len(lengths))]}
					switch {
					case limit.row().burst && rng.IntN(2) == 0:
						limit.Burst = 1 + rng.IntN(3*rate)
					case a == FixedWindow && rng.IntN(4) == 0:
						limit.Period, limit.Calendar = 0, Daily
					case a == Concurrency:
						// A refused permit is asked again within a second
						// (RetryAfter): short Periods keep the simulation short.
						limit.Period = lengths[rng.IntN(2)]
					}
					sweepOne(t, rng, limit, n, periods, !all || rate%2 == 0, !all || rate%2 == 1)
				}
			}
		})
	}
}

// TestFallbackShareArithmetic checks inequality (1) of the sketch's proof
// (fallback.go) for every n from 1 to 64, Rate from 1 to 3n and
// algorithm, a Burst of 1 to 3·Rate for the buckets: what one instance can
// admit at most, times n, is within the bound of docs/limits.md. The
// fleet simulation (TestFallbackFleetSweep) runs the decisions themselves
// on a sample of these points; this covers all of them, fast enough for
// CI under -race.
func TestFallbackShareArithmetic(t *testing.T) {
	for n := int64(1); n <= 64; n++ {
		s := newSketch(int(n), 1)
		for rate := int64(1); rate <= 3*n; rate++ {
			for _, a := range Algorithms() {
				for _, burst := range []int64{0, 1, rate + 1, 3 * rate} {
					limit := Limit{Algorithm: a, Rate: int(rate), Period: time.Minute, Burst: int(burst)}
					if burst > 0 && !limit.row().burst {
						continue
					}
					checkShare(t, s, limit, n)
				}
			}
		}
	}
}

// checkShare fails unless n instances holding limit's share stay within
// its bound: a window's most in any Period (t <= Period - 1µs in (1)), a
// bucket's burst and rate.
func checkShare(t *testing.T, s *sketch, limit Limit, n int64) {
	t.Helper()
	p := limit.Period.Microseconds()
	sh, ok := s.shareOf(limit.row(), limit)
	switch {
	case !ok: // Concurrency: max(1, floor(Rate/n)) permits each
		if got := n * max(1, int64(limit.Rate)/n); got > max(int64(limit.Rate), n) {
			t.Fatalf("%v on %d: %d permits, above max(Rate, n)", limit, n, got)
		}
	case limit.row().local == localWindow:
		most := (p - 1 + sh.tau) / sh.interval // k·interval <= t + tau
		if n*most > max(int64(limit.Rate), n) || most < 1 {
			t.Fatalf("%v on %d: %d per instance in a Period, %d in all, above max(Rate, n)", limit, n, most, n*most)
		}
	default:
		// k <= tau/interval + t/interval: the burst part, and the rate.
		c := int64(limit.Capacity())
		if burst := sh.tau / sh.interval; n*burst > max(c, n) || burst < 1 || sh.interval*int64(limit.Rate) < p*n {
			t.Fatalf("%v on %d: a burst of %d and a unit per %dµs each, above max(Capacity, n) + Rate per Period",
				limit, n, burst, sh.interval)
		}
	}
}

// sweepRates is every Rate from 1 to 3n, or a sample around the shares of
// one, two and three units.
func sweepRates(n int, all bool) []int {
	var rates []int
	for r := 1; r <= 3*n; r++ {
		if all || r == 1 || r == 3*n || (r >= n-1 && r <= n+1) || (r >= 2*n-1 && r <= 2*n+1) {
			rates = append(rates, r)
		}
	}
	return rates
}

// sweepOne is one point of the sweep: the fleet starting together, and
// staggered with other clients' requests.
func sweepOne(t *testing.T, rng *rand.Rand, limit Limit, n, periods int, together, staggered bool) {
	t.Helper()
	f := newFleet(t, n, limit)
	p := window(limit)
	// A share below one unit accrues one per n·Period/Rate: a horizon of
	// four of them checks the average too.
	horizon := max(int64(periods)*p, 4*int64(n)*p/int64(limit.Rate))
	if together {
		f.checkFleet(t, rng, horizon, 0)
	}
	if staggered {
		f = newFleet(t, n, limit)
		f.starts = make([]int64, n)
		for i := range f.starts {
			f.starts[i] = rng.Int64N(p)
		}
		f.checkFleet(t, rng, horizon, 1+rng.Int64N(p))
	}
}

// TestFallbackMonthLongOutage backs, over a long outage, "a TokenBucket
// or LeakyBucket key at most its Capacity plus Rate per Period over any
// interval" (WithLocalFallback) and Result's RetryAfter, the exact wait:
// 5 per hour on 4 instances (a share of 1.25 units, one per 48 minutes)
// for 30 simulated days of greedy clients, alone and with other clients' requests
// at random instants. A client that obeys RetryAfter is admitted then
// (greedy fails otherwise), and the fleet admits a unit per 48 minutes on each
// instance (checkFleet fails otherwise). The same check on 1 per minute
// on 4 instances (a share now refused) failed while the fallback
// restarted an outage after a quiet second: a client that obeyed
// RetryAfter was refused for ever.
func TestFallbackMonthLongOutage(t *testing.T) {
	limit := PerHour(5)
	horizon := (30 * 24 * time.Hour).Microseconds()
	for _, probe := range []time.Duration{0, 10 * time.Minute, 90 * time.Minute} {
		t.Run(fmt.Sprintf("random requests every %v", probe), func(t *testing.T) {
			f := newFleet(t, 4, limit)
			got, bound := f.checkFleet(t, rand.New(rand.NewPCG(1, uint64(probe))), horizon, probe.Microseconds())
			t.Logf("30 days: at most %d where the Limit allows %d", got, bound)
		})
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
	pl, err := newPlan([]Limit{limit, PerSecond(1)}, []int{0, 1}, []int{0, 1}, false)
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
//     fallback.go), but for what this instance learned from Redis: the
//     instance that Redis refused "spent" refuses it for its Period
//     (sketch.learn). The rest is on top of what Redis admitted before the
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
			r, err := l.Allow(ctx, 1, limit.For(key))
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
	receipts := map[string][]Result{}
	for i, l := range fleet {
		for _, key := range []string{"spent", "half", "fresh"} {
			got, rs := count(l, key, 15, true)
			want := 10
			if i == 0 && key == "spent" {
				want = 0 // Redis refused it to this instance: refused here for its Period
			}
			if got != want {
				t.Errorf("instance %d's fallback admitted %d of 15 for %q, want %d", i, got, key, want)
			}
			total[key] += got
			receipts[key] = append(receipts[key], rs...)
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
	// A fallback receipt's Refund asks nobody (Redis took nothing), and
	// gives the fallback nothing back.
	if err := fleet[0].Refund(ctx, receipts["fresh"][0]); err != nil {
		t.Errorf("Refund of a fallback receipt with Redis down = %v, want nil", err)
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
	// Fallback receipts given back to Redis give it nothing (each on its
	// own key: another key refuses them).
	for i := range receipts["fresh"] {
		l := fleet[i%4]
		if err := l.Refund(ctx, receipts["fresh"][i]); err != nil {
			t.Fatalf("Refund of fallback receipt %d: %v", i, err)
		}
		if i >= len(receipts["spent"]) {
			continue // each receipt settled once
		}
		if _, err := l.Settle(ctx, receipts["spent"][i], 0); err != nil {
			t.Fatalf("Settle of fallback receipt %d: %v", i, err)
		}
	}
	if p, err := fleet[0].Peek(ctx, limit.For("spent")); err != nil || p.Remaining != 0 {
		t.Errorf("Peek of the spent key after settling %d fallback receipts: %+v, %v; want 0 remaining", len(receipts["spent"]), p, err)
	}
	if got, _ := count(fleet[1], "fresh", 45, false); got != 40 {
		t.Errorf("after refunding fallback receipts a fresh key got %d from Redis, want exactly its 40", got)
	}
}

// TestFallbackLaterOutageGivesNoMore backs "an outage starts a key with
// this instance's whole share, less what an outage shortly before took and
// has not refilled" (sketch): a key spent in one outage is not whole
// again in the next, but for what it refilled, and a long quiet spell
// leaves it whole, not more.
func TestFallbackLaterOutageGivesNoMore(t *testing.T) {
	f := newFleet(t, 4, PerHour(40)) // 10 per instance, one per 6 minutes
	hour := time.Hour.Microseconds()
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
	// Quiet for 30 minutes: 5 units refilled.
	if got := admit(hour/2, 15); got != 5 {
		t.Errorf("30 minutes later: %d admitted, want the 5 refilled", got)
	}
	// Quiet for 2 hours: the share is whole, and no more.
	if got := admit(hour/2+2*hour, 15); got != 10 {
		t.Errorf("2 hours later: %d admitted, want the share 10", got)
	}
}

// TestFallbackSmallSharesWithinLimit is issue 34's case (10 per minute
// on 20 instances, 100 requests a second on each) and its neighbours,
// greedy clients on every instance starting together for 200 Periods. A
// share below one unit was refused with Redis' error, which the default
// FailOpen served with no limit (115,972 of 115,972 in 60s); now it admits
// a unit per n·Period/Rate on each instance: at most max(Rate, n) in any
// window of Period (max(Capacity, n) plus Rate per Period for the
// buckets), and Rate per Period on average.
func TestFallbackSmallSharesWithinLimit(t *testing.T) {
	cases := []struct {
		limit     Limit
		instances int
	}{
		{Limit{Algorithm: SlidingWindow, Rate: 3, Period: time.Second}, 4},
		{Limit{Algorithm: SlidingWindow, Rate: 1, Period: 400 * time.Millisecond}, 2},
		{Limit{Algorithm: SlidingWindowCounter, Rate: 2, Period: 500 * time.Millisecond}, 3},
		{Limit{Algorithm: SlidingWindow, Rate: 10, Period: time.Minute}, 20},
		{Limit{Algorithm: FixedWindow, Rate: 10, Period: time.Minute}, 20},
		{Limit{Algorithm: TokenBucket, Rate: 10, Period: time.Minute}, 20},
		{Limit{Algorithm: TokenBucket, Rate: 3, Period: time.Minute}, 4},
		{Limit{Algorithm: LeakyBucket, Rate: 1, Period: time.Minute}, 4},
		{Limit{Algorithm: Concurrency, Rate: 3, Period: time.Second}, 4},
		{Limit{Algorithm: SlidingWindow, Rate: 5, Period: time.Second}, 4},
		{Limit{Algorithm: TokenBucket, Rate: 1, Period: time.Minute, Burst: 4}, 4},
		{Limit{Algorithm: SlidingWindowCounter, Rate: 100, Period: time.Minute}, 4},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v×%d", c.limit, c.instances), func(t *testing.T) {
			f := newFleet(t, c.instances, c.limit)
			horizon := 200 * c.limit.Period.Microseconds()
			got, bound := f.checkFleet(t, rand.New(rand.NewPCG(5, 8)), horizon, 0)
			times := newFleet(t, c.instances, c.limit).greedy(t, rand.New(rand.NewPCG(5, 8)), horizon, 0)
			// A share below one unit admits the Rate on average: within
			// one unit per instance of it.
			small := c.limit.Capacity() < c.instances && c.limit.Algorithm != Concurrency
			if want := 200 * c.limit.Rate; small && (len(times) > want+c.instances || len(times) < want-c.instances) {
				t.Errorf("%d admitted in 200 Periods, want about %d", len(times), want)
			}
			t.Logf("most %d in a Period where the bound is %d; %d in 200 Periods", got, bound, len(times))
		})
	}
}
