package core

import (
	"fmt"
	"hash/maphash"
	"math"
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
// unit is there. So across the instances, each key is admitted at most its
// Capacity plus Rate per Period for the time since the outage began.
//
// The seed is random per process, so a client cannot choose keys that
// collide.
type sketch struct {
	instances int
	width     uint64
	seed      maphash.Seed
	start     time.Time // cells hold TATs in µs since start (monotonic)

	mu    sync.Mutex
	cells []int64 // sketchDepth rows of width cells
	since int64   // the outage began, µs since start
	last  int64   // the last fallback decision, µs since start
}

const (
	sketchDepth = 4
	// outageGap is the quiet time after which a fallback decision starts a
	// new outage: every key starts at its share again, which never gives
	// more than carrying on would.
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

// share is key's bucket in this instance.
type share struct {
	units    float64 // what the bucket holds when full: the share, or one unit if the share is less
	interval int64   // µs for one unit to accrue: Period × instances / Rate, rounded up
	tau      int64   // µs for the bucket to refill from empty: units × interval
	initial  int64   // µs of the bucket an outage starts with empty: (units - share) × interval
}

func (s *sketch) shareOf(limit Limit) share {
	part := float64(limit.Capacity()) / float64(s.instances)
	period := float64(limit.Period)
	if limit.Calendar != NoCalendar {
		period = float64(31 * 24 * time.Hour) // the longest calendar window
	}
	interval := min(math.Ceil(period/float64(time.Microsecond)*float64(s.instances)/float64(limit.Rate)), float64(saturate))
	units := max(part, 1)
	return share{units: units, interval: int64(interval), tau: int64(min(units*interval, float64(saturate))),
		initial: int64(min((units-part)*interval, float64(saturate)))}
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
	return max(t, s.since+sh.initial)
}

// raise records a new TAT for key. s.mu is held.
func (s *sketch) raise(idx [sketchDepth]uint64, tat int64) {
	for _, i := range idx {
		s.cells[i] = max(s.cells[i], tat)
	}
}

// errOverShare explains a cost that the fallback can never admit.
func errOverShare(n int, sh share) error {
	return fmt.Errorf("%w: n = %d exceeds this instance's fallback share of %.4g units while Redis is unavailable",
		ErrInvalidCost, n, sh.units)
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
	if k >= 1 && k <= fits {
		r.Allowed, r.Granted = true, k
		tat = min(tat+int64(k)*sh.interval, saturate)
		fits -= k
	} else {
		need := int64(n)
		if atMost {
			need = 1
		}
		r.RetryAfter = micros(max(1, min(tat+need*sh.interval, saturate)-sh.tau-now))
	}
	r.Remaining = max(0, fits)
	r.ResetAfter = micros(tat - now)
	return r, tat
}

// begin notes a fallback decision at now (µs), which starts an outage
// after a quiet spell. s.mu is held.
func (s *sketch) begin(now int64) {
	if now-s.last >= outageGap.Microseconds() {
		s.since = now
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
		if float64(rq.n) > shares[i].units && rq.mode != modeAtMost {
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
