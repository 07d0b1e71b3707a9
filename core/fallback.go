package core

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// sketch is the in-process limiter of WithLocalFallback.
//
// Each key is a bucket holding this instance's share of its Limit, kept in
// virtual-scheduling form (GCRA): one number per key, the time at which
// its bucket will be full again (the theoretical arrival time, TAT). The
// numbers live in a count-min sketch: depth rows of cells, a key hashing
// to one cell per row. A key's TAT is the least of its cells, and
// admitting a request raises each of its cells to the key's new TAT, never
// lowering one. Every cell of a key is therefore at least the key's true
// TAT, so the estimate errs only late: a key that shares cells with busy
// keys is denied early, and no key is ever admitted beyond its share,
// however many keys there are. Memory is fixed. Unlike a table of buckets
// with a bound on its size, nothing is ever forgotten, so rotating keys
// cannot flush the state of others and start afresh.
//
// A share's bucket holds tau µs, one unit accrues every interval µs, and
// a request of k units passes when the key's TAT plus k intervals is at
// most now plus tau. So if an instance admits k units in all at instants
// from a to a + t, its TAT went from a or later to a + k·interval or
// later and ended no later than a + t + tau:
//
//	k·interval <= t + tau.                                            (1)
//
// Each instance holds (1) alone, from whatever state, so the bound holds
// for the fleet over any interval, however the instances' requests and
// clocks are placed, from an outage's start or a later instant alike:
//
//   - A bucket (TokenBucket, LeakyBucket) of Capacity C and n instances:
//     interval >= Period·n/Rate and tau <= interval·C/n, so (1) gives
//     k <= C/n + Rate·t/(Period·n), and the n instances admit at most
//     C + Rate·t/Period within any t, as the bucket itself does.
//   - A window: each instance may admit w = floor(Rate/n) in any window of
//     Period, a burst of b = floor((w+1)/2) of them at once and r = w+1-b
//     per Period: interval >= Period/r and tau = b·interval. Within a
//     window, t <= Period - 1µs <= r·interval - 1µs, so (1) gives
//     k·interval < (r+b)·interval = (w+1)·interval: k <= w, and the n
//     instances admit at most n·w <= Rate in any window of Period, aligned
//     or not. A calendar window is no longer than 31 days: the fallback
//     holds every window of 31 days to its Rate.
//
// An outage starts a key with this instance's whole share, less what an
// outage shortly before took and has not refilled: the sketch carries on
// from its cells, and never gives more than the bounds above.
//
// A share below one unit (C < n for a bucket, Rate < n for a window) is
// a bucket of one unit that accrues every interval = n·Period/Rate
// (rounded up), so tau = interval, and (1) gives k <= 1 + t/interval:
//
//   - A bucket: k <= 1 + Rate·t/(Period·n), and the n instances admit at
//     most n + Rate·t/Period = max(C, n) + Rate·t/Period within any t.
//   - A window: Rate < n makes interval > Period, so within a window
//     (t < Period) k < 2: each instance admits at most one unit in any
//     window of Period, and the n instances at most n = max(Rate, n).
//
// Instances that cannot see each other, started alike and asked alike,
// decide alike, so the n units may come at one instant: that is the
// price of a bounded rule without Redis, and the fleet still admits Rate
// per Period on average (n units per n·Period/Rate).
//
// The seed is random per process, so a client cannot choose keys that
// collide.
type sketch struct {
	// instances is n: WithLocalFallback's, or the fleet's size as Redis
	// last counted it (see fleet), or assumedFleet before it has.
	instances atomic.Int64
	width     uint64
	seed      maphash.Seed
	start     time.Time // cells hold TATs in µs since start (monotonic)

	mu      sync.Mutex
	cells   []int64 // sketchDepth rows of width cells, made at first use
	permits permits // the Concurrency keys' permits
}

// localBound is what the local fallback holds an algorithm's keys to
// across the instances (see sketch); each algorithm's row says which.
type localBound uint8

const (
	// localPermits: max(1, floor(Rate/n)) permits of this instance in
	// flight at once (see permits).
	localPermits localBound = iota
	// localBucket: Capacity plus Rate per Period over any interval.
	localBucket
	// localWindow: Rate in any interval of Period.
	localWindow
)

const (
	sketchDepth = 4
	// saturate caps the sketch's times (µs, about 36,000 years), far
	// beyond any wait, so no sum overflows. An interval cut to it accrues
	// no sooner than 36,000 years from now.
	saturate = int64(1) << 60
	// longestCalendar bounds every calendar window (a month).
	longestCalendar = 31 * 24 * time.Hour
)

func newSketch(instances, maxKeys int) *sketch {
	// With width 4 × maxKeys, a key shares a cell in a given row with
	// another active key with probability about 1 - e^(-1/4) = 0.22, and
	// in all four rows with probability 0.002.
	s := &sketch{width: uint64(4 * maxKeys), seed: maphash.MakeSeed(), start: time.Now()}
	s.instances.Store(int64(instances))
	s.permits.most = maxKeys
	return s
}

// share is a key's bucket in this instance. Its times are exact integers
// (µs), rounded to the strict side, so that the instances together never
// admit a unit early, not even by a µs.
type share struct {
	most     int   // the largest cost the bucket holds, >= 1
	interval int64 // µs for one unit to accrue, rounded up
	tau      int64 // µs the bucket holds: less than most+1 intervals, rounded down
}

// shareOf is this instance's share of a rate limit, decided as row, and
// false for a Concurrency limit (see permits).
func (s *sketch) shareOf(row *algorithm, limit Limit) (share, bool) {
	n := s.instances.Load()
	period := limit.Period.Microseconds()
	if limit.Period%time.Microsecond != 0 {
		period++ // as the scripts round it
	}
	if limit.Calendar != NoCalendar {
		period = longestCalendar.Microseconds()
	}
	var sh share
	switch row.local {
	case localBucket:
		c := int64(limit.Capacity())
		sh.interval = mulDiv(period, n, int64(limit.Rate), true)
		sh.most, sh.tau = int(c/n), mulDiv(c, sh.interval, n, false)
		if c < n {
			sh.most, sh.tau = 1, sh.interval // a unit per interval
		}
	case localWindow:
		w := int64(limit.Rate) / n
		if w < 1 {
			sh.interval = mulDiv(period, n, int64(limit.Rate), true)
			sh.most, sh.tau = 1, sh.interval // a unit per interval
			break
		}
		b := (w + 1) / 2
		sh.interval = mulDiv(period, 1, w+1-b, true)
		sh.most, sh.tau = int(b), mulDiv(b, sh.interval, 1, false)
	default:
		return share{}, false
	}
	if sh.tau >= saturate {
		// Beyond the sketch's clock: the bucket holds what fits in it.
		k := saturate / sh.interval
		sh.most, sh.tau = int(min(int64(sh.most), k)), k*sh.interval
	}
	return sh, true
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
	return fmt.Errorf("%w: n = %d exceeds the %d units this instance's fallback admits at once while Redis is unavailable",
		ErrInvalidCost, n, sh.most)
}

func micros(us int64) time.Duration {
	return time.Duration(min(us, math.MaxInt64/int64(time.Microsecond))) * time.Microsecond
}

// learn holds each key to what Redis last answered for it, so that a
// decision Redis cannot make a moment later (a timeout on a busy host, a
// pause) gives no more than Redis would have: a key Redis refused is
// refused here until its RetryAfter or its Period has passed, whichever
// is later (a key refused is a key in demand), and one Redis admitted
// with R units left holds at most R here. It only ever raises a key's
// TAT, so the sketch's bounds hold as they are.
func (s *sketch) learn(keys []string, pl *plan, now time.Time, out []Result) {
	t := now.Sub(s.start).Microseconds()
	k := 0
	for i, ly := range pl.layers {
		key := keys[k]
		k += len(ly.row.suffixes)
		sh, ok := s.shareOf(ly.row, ly.limit)
		r := out[i]
		if !ok || r.Allowed && r.Remaining >= sh.most {
			continue
		}
		tat := t + sh.tau - int64(r.Remaining)*sh.interval
		if !r.Allowed {
			wait := min(max(r.RetryAfter, ly.limit.Period).Microseconds(), saturate)
			tat = t + wait + sh.tau - sh.interval
		}
		idx := s.index(key)
		s.mu.Lock()
		if s.cells == nil {
			s.cells = make([]int64, sketchDepth*s.width)
		}
		s.raise(idx, tat)
		s.mu.Unlock()
	}
}
