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
// The seed is random per process, so a client cannot choose keys that
// collide.
type sketch struct {
	instances int
	width     uint64
	seed      maphash.Seed
	start     time.Time // cells hold TATs in ns since start (monotonic)

	mu    sync.Mutex
	cells []int64 // sketchDepth rows of width cells
}

const sketchDepth = 4

func newSketch(instances, maxKeys int) *sketch {
	// With width 4 × maxKeys, a key shares a cell in a given row with
	// another active key with probability about 1 - e^(-1/4) = 0.22, and
	// in all four rows with probability 0.002.
	width := uint64(4 * maxKeys)
	return &sketch{instances: instances, width: width, seed: maphash.MakeSeed(),
		start: time.Now(), cells: make([]int64, sketchDepth*width)}
}

// share is key's bucket in this instance: at least one unit, so that a
// Limit with fewer units than instances still admits.
type share struct {
	units    float64
	interval int64 // ns for one unit to refill, rounded up
	tau      int64 // ns for the bucket to refill from empty: units × interval
}

func (s *sketch) shareOf(limit Limit) share {
	units := max(1, float64(limit.Capacity())/float64(s.instances))
	interval := int64(math.Ceil(float64(limit.Period) * float64(s.instances) / float64(limit.Rate)))
	return share{units: units, interval: interval, tau: int64(units * float64(interval))}
}

func (s *sketch) index(key string) (idx [sketchDepth]uint64) {
	h := maphash.String(s.seed, key)
	h1, h2 := h, h>>32|1
	for i := range idx {
		idx[i] = uint64(i)*s.width + (h1+uint64(i)*h2)%s.width
	}
	return idx
}

// tat is key's estimated TAT. s.mu is held.
func (s *sketch) tat(idx [sketchDepth]uint64) int64 {
	t := int64(math.MaxInt64)
	for _, i := range idx {
		t = min(t, s.cells[i])
	}
	return t
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

// decideAt decides n units of key at now (ns), without recording, and
// returns the Result and the key's TAT if it is admitted.
func (s *sketch) decideAt(idx [sketchDepth]uint64, sh share, n int, atMost bool, now int64) (Result, int64) {
	tat := max(s.tat(idx), now)
	fits := int((now + sh.tau - tat) / sh.interval) // units that fit now
	r := Result{Fallback: true}
	k := n
	if atMost {
		k = min(n, fits)
	}
	if k >= 1 && k <= fits {
		r.Allowed, r.Granted = true, k
		tat += int64(k) * sh.interval
		fits -= k
	} else {
		need := int64(n)
		if atMost {
			need = 1
		}
		r.RetryAfter = time.Duration(tat + need*sh.interval - sh.tau - now)
	}
	r.Remaining = max(0, fits)
	r.ResetAfter = time.Duration(tat - now)
	return r, tat
}

func (s *sketch) allow(key string, limit Limit, n int, atMost bool, now time.Time) (Result, error) {
	sh := s.shareOf(limit)
	if float64(n) > sh.units && !atMost {
		return Result{}, errOverShare(n, sh)
	}
	idx := s.index(key)
	t := int64(now.Sub(s.start))
	s.mu.Lock()
	defer s.mu.Unlock()
	r, tat := s.decideAt(idx, sh, n, atMost, t)
	if r.Allowed {
		s.raise(idx, tat)
	}
	return r, nil
}

// allowLayers decides n units of every layer, and takes them from all only
// if all admit, as AllowLayers does in Redis.
func (s *sketch) allowLayers(keys []string, limits []Limit, n int, now time.Time) ([]Result, error) {
	shares := make([]share, len(limits))
	for i, l := range limits {
		shares[i] = s.shareOf(l)
		if float64(n) > shares[i].units {
			return nil, fmt.Errorf("layer %d: %w", i, errOverShare(n, shares[i]))
		}
	}
	t := int64(now.Sub(s.start))
	out := make([]Result, len(limits))
	tats := make([]int64, len(limits))
	idx := make([][sketchDepth]uint64, len(limits))
	s.mu.Lock()
	defer s.mu.Unlock()
	all := true
	for i := range limits {
		idx[i] = s.index(keys[i])
		out[i], tats[i] = s.decideAt(idx[i], shares[i], n, false, t)
		all = all && out[i].Allowed
	}
	if !all {
		for i := range out {
			if out[i].Allowed {
				// Nothing is taken: report what is left before it.
				out[i] = Result{Fallback: true, Allowed: true, Remaining: out[i].Remaining + n,
					ResetAfter: out[i].ResetAfter - time.Duration(int64(n)*shares[i].interval)}
			}
		}
		return out, nil
	}
	for i := range limits {
		s.raise(idx[i], tats[i])
	}
	return out, nil
}
