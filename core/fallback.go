package core

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"time"
)

// sketch is the in-process limiter of WithLocalFallback.
//
// Each key is a token bucket holding this instance's share of its Limit,
// kept in virtual-scheduling form (GCRA): one number per key, the time at
// which its bucket will be full again (the theoretical arrival time, TAT).
// The numbers live in a count-min sketch: depth rows of cells, a key
// hashing to one cell per row. A key's TAT is the least of its cells, and
// admitting a request raises each of its cells to the key's new TAT, never
// lowering one. Every cell of a key is therefore at least the key's true
// TAT, so the estimate errs only late: a key that shares cells with busy
// keys is denied early, and no key is ever admitted beyond its share,
// however many keys there are. Memory is fixed. Unlike a table of buckets
// with a bound on its size, nothing is ever forgotten, so rotating keys
// cannot flush the state of others and start afresh.
//
// An outage starts every key at its share of the capacity, whatever it
// held before, and a share below one unit (more instances than capacity)
// is not rounded up: it accrues at the share of the rate until a whole
// unit is there. So across the instances, each key of a bucket algorithm
// is admitted at most its Capacity plus Rate per Period for the time since
// the outage began; a key of a window algorithm, whose instances' buckets
// are half their share at half its rate, at most Rate in any Period.
//
// The sketch cannot see Redis answer between outages, so it takes a quiet
// spell without fallback decisions for the end of one: for a Limit, a
// spell longer than outageGap and than the time its share takes to refill
// from empty. A shorter spell cannot tell an instance that Redis came back
// from one whose client waits out a RetryAfter (never longer than that
// refill), and restarting then would put a fraction of a unit back to the
// start of its accrual each time: such a client would be refused for ever.
//
// The seed is random per process, so a client cannot choose keys that
// collide.
type sketch struct {
	instances int
	width     uint64
	seed      maphash.Seed
	start     time.Time // cells hold TATs in µs since start (monotonic)

	mu     sync.Mutex
	cells  []int64 // sketchDepth rows of width cells
	starts []spell // the decisions that followed a quiet spell (see begin)
	last   int64   // the last fallback decision, µs since start
}

// spell is a fallback decision at (µs since start) that came after quiet
// µs without one: the start of a new outage for the Limits whose share
// refills from empty sooner than that (see since).
type spell struct{ at, quiet int64 }

const (
	sketchDepth = 4
	// outageGap is the least quiet time after which a fallback decision
	// starts a new outage: every key starts at its share again, which never
	// gives more than carrying on would. A Limit whose share takes longer
	// to refill needs a longer spell (see since).
	outageGap = time.Second
	// saturate caps the sketch's times (µs), far beyond any wait, so no
	// sum overflows.
	saturate = int64(1) << 60
)

func newSketch(instances, maxKeys int) *sketch {
	// With width 4 × maxKeys, a key shares a cell in a given row with
	// another active key with probability about 1 - e^(-1/4) = 0.22, and
	// in all four rows with probability 0.002.
	width := uint64(4 * maxKeys)
	return &sketch{instances: instances, width: width, seed: maphash.MakeSeed(),
		start: time.Now(), cells: make([]int64, sketchDepth*width), last: -saturate}
}

// share is key's bucket in this instance. Its times are exact integers
// (µs), rounded to the strict side, so that the instances together never
// admit a unit early, not even by a µs.
type share struct {
	part     float64 // the share of the capacity, in units: Capacity / instances
	most     int     // the largest cost the bucket holds: part's whole units, at least 1
	interval int64   // µs for one unit to accrue: Period × instances / Rate, rounded up
	tau      int64   // µs for the bucket to refill from empty: part × interval (one unit's if less), rounded down
	initial  int64   // µs of the bucket an outage starts with empty: (1 - part) × interval if part < 1, rounded up
}

func (s *sketch) shareOf(limit Limit) share {
	n, c := int64(s.instances), int64(limit.Capacity())
	if limit.Algorithm != TokenBucket && limit.Algorithm != LeakyBucket {
		// A bucket of capacity C refilled at R per Period admits up to C
		// + R within one Period; a window allows only its Rate: so each
		// instance's bucket is half the share, at half its rate.
		n *= 2
	}
	period := limit.Period.Microseconds()
	if limit.Period%time.Microsecond != 0 {
		period++ // as the scripts round it
	}
	if limit.Calendar != NoCalendar {
		period = (31 * 24 * time.Hour).Microseconds() // the longest calendar window
	}
	sh := share{part: float64(c) / float64(n), interval: mulDiv(period, n, int64(limit.Rate), true)}
	if c >= n {
		sh.most, sh.tau = int(c/n), mulDiv(c, sh.interval, n, false)
	} else {
		sh.most, sh.tau, sh.initial = 1, sh.interval, mulDiv(n-c, sh.interval, n, true)
	}
	if sh.tau >= saturate {
		// Beyond the sketch's clock: the bucket holds what fits in it.
		k := saturate / sh.interval
		sh.most, sh.tau = int(min(int64(sh.most), k)), k*sh.interval
	}
	return sh
}

// mulDiv is a × b / c (all > 0), rounded up or down, at most saturate.
func mulDiv(a, b, c int64, up bool) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if up {
		var carry uint64
		lo, carry = bits.Add64(lo, uint64(c-1), 0)
		hi += carry
	}
	if hi >= uint64(c) {
		return saturate // the quotient does not fit in 64 bits
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, uint64(saturate)))
}

func (s *sketch) index(key string) (idx [sketchDepth]uint64) {
	h := maphash.String(s.seed, key)
	h1, h2 := h, h>>32|1
	for i := range idx {
		idx[i] = uint64(i)*s.width + (h1+uint64(i)*h2)%s.width
	}
	return idx
}

// tat is key's estimated TAT, no earlier than the outage lets it be. s.mu
// is held.
func (s *sketch) tat(idx [sketchDepth]uint64, sh share) int64 {
	t := int64(math.MaxInt64)
	for _, i := range idx {
		t = min(t, s.cells[i])
	}
	return max(t, s.since(sh.tau)+sh.initial)
}

// since is when the outage began (µs since start) for a share that
// refills from empty in tau µs: at the latest decision that followed a
// quiet spell longer than outageGap and than tau. A denial never asks for
// a longer wait than tau (for a key that shares no cell with a slower
// one), so a client that waits it out, and comes back to a quiet
// instance, is still in the outage that told it to wait. s.mu is held.
func (s *sketch) since(tau int64) int64 {
	least := max(outageGap.Microseconds(), tau)
	for i := len(s.starts) - 1; i > 0; i-- {
		if s.starts[i].quiet > least {
			return s.starts[i].at
		}
	}
	return s.starts[0].at // the first decision, after no other
}

// raise records a new TAT for key. s.mu is held.
func (s *sketch) raise(idx [sketchDepth]uint64, tat int64) {
	for _, i := range idx {
		s.cells[i] = max(s.cells[i], tat)
	}
}

// errOverShare explains a cost that the fallback can never admit.
func errOverShare(n int, sh share) error {
	return fmt.Errorf("%w: n = %d exceeds this instance's fallback share of %.4g units (at most %d at once) while Redis is unavailable",
		ErrInvalidCost, n, sh.part, sh.most)
}

func micros(us int64) time.Duration {
	return time.Duration(min(us, math.MaxInt64/int64(time.Microsecond))) * time.Microsecond
}

// decideAt decides n units of key at now (µs), without recording, and
// returns the Result and the key's TAT if it is admitted.
func (s *sketch) decideAt(idx [sketchDepth]uint64, sh share, n int, atMost bool, now int64) (Result, int64) {
	tat := max(s.tat(idx, sh), now)
	fits := int((now + sh.tau - tat) / sh.interval) // units that fit now
	r := Result{Fallback: true}
	k := n
	if atMost {
		k = min(n, fits)
	}
	// No sum overflows: now < 2^53, tat <= now + tau and n × interval
	// <= tau <= saturate = 2^60 (n <= most).
	if k >= 1 && k <= fits {
		r.Allowed, r.Granted = true, k
		tat += int64(k) * sh.interval
		fits -= k
	} else {
		need := int64(n)
		if atMost {
			need = 1
		}
		r.RetryAfter = micros(max(1, tat+need*sh.interval-sh.tau-now))
	}
	r.Remaining = max(0, fits)
	r.ResetAfter = micros(tat - now)
	return r, tat
}

// begin notes a fallback decision at now (µs): after a quiet spell of at
// least outageGap, it may start a new outage (see since). Of the spells,
// it keeps, newest last, each that was longer than every later one, one
// per power of two of µs: at most 64. Dropping an older spell of the same
// power of two as a shorter, newer one only ever lets a Limit carry on
// from an earlier start, never restart it sooner. s.mu is held.
func (s *sketch) begin(now int64) {
	if quiet := now - s.last; quiet >= outageGap.Microseconds() {
		n := len(s.starts)
		for n > 0 && bits.Len64(uint64(s.starts[n-1].quiet)) <= bits.Len64(uint64(quiet)) {
			n--
		}
		s.starts = append(s.starts[:n], spell{now, quiet})
	}
	s.last = now
}

// decide answers rq while Redis cannot, from this instance's shares;
// keys are the state keys of rq's layers.
func (s *sketch) decide(keys []string, rq *request, now time.Time, out []Result) error {
	pl := rq.pl
	shares := make([]share, len(pl.layers))
	idx := make([][sketchDepth]uint64, len(pl.layers))
	for i, ly := range pl.layers {
		shares[i] = s.shareOf(ly.limit)
		if rq.n > shares[i].most && rq.mode != modeAtMost {
			if len(pl.layers) > 1 {
				return fmt.Errorf("layer %d: %w", i, errOverShare(rq.n, shares[i]))
			}
			return errOverShare(rq.n, shares[i])
		}
	}
	k := 0
	for i, ly := range pl.layers {
		idx[i] = s.index(keys[k])
		k += len(ly.row.suffixes)
	}
	t := now.Sub(s.start).Microseconds()
	tats := make([]int64, len(pl.layers))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begin(t)
	all := true
	for i := range pl.layers {
		out[i], tats[i] = s.decideAt(idx[i], shares[i], rq.n, rq.mode == modeAtMost, t)
		all = all && out[i].Allowed
	}
	if !all {
		for i := range out {
			if out[i].Allowed {
				// Nothing is taken: report what is left before it.
				out[i] = Result{Fallback: true, Allowed: true, Remaining: out[i].Remaining + rq.n,
					ResetAfter: max(0, out[i].ResetAfter-micros(int64(rq.n)*shares[i].interval))}
			}
			out[i].Granted = 0
		}
		return nil
	}
	for i := range pl.layers {
		s.raise(idx[i], tats[i])
	}
	return nil
}
