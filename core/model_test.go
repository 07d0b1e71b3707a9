package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// This file holds a pure-Go reference model of the five algorithms and the
// property tests that hold the Lua scripts to it.
//
// The model is written from the documented semantics, not from the scripts:
// it keeps its state in its own units (capacity scaled by the unreduced
// period in µs, so every quantity is an exact int64, and the sliding window
// as a plain list of admissions), and it derives RetryAfter and ResetAfter
// by searching for the first microsecond at which the request would pass
// (the quota would be whole), instead of the closed forms the scripts use.
// Where both agree on every step of thousands of random sequences, the
// closed forms are exact.
//
// Shared rules, for every algorithm:
//   - Time is the Redis clock in µs. The state's own time never moves back:
//     a request at clock c is decided at now = max(c, the state's time).
//   - Waits (RetryAfter, ResetAfter, Delay) are measured from the clock c,
//     so after a clock step back they include the step.
//   - A denied request and a Peek take nothing.
//   - Every write sets the key's TTL to ResetAfter rounded up to whole ms
//     (at least 1 ms): the state matters exactly until the quota is whole.
//     A denial that writes nothing lengthens the TTL when it is more than
//     1 ms short of ResetAfter (the Limit changed to a slower one).
//   - Requests of one batch are decided in order at one clock, exactly as
//     separate calls at that clock.

// refAlg is one algorithm's state for one key. now is always an effective
// time (never before the state's own time).
type refAlg interface {
	// effective is the time a request at clock is decided at.
	effective(clock int64) int64
	// touch brings the state to now before any decision, and reports a
	// change that is written (the sliding window trims its log).
	touch(now int64) bool
	// fits reports whether n units fit the capacity at now.
	fits(now, n int64) bool
	// remaining is how many units fit at now, clamped to [0, capacity].
	remaining(now int64) int64
	// delay is how long, from now, the queue ahead takes to drain
	// (LeakyBucket); 0 for the others.
	delay(now int64) int64
	// commit records the admission of n units at now.
	commit(now, n int64)
	// refund gives n units back at now, and reports a change.
	refund(now, n int64) bool
	// gone reports a state that holds nothing and is deleted, not written.
	gone() bool
	clone() refAlg
}

// refModel is the reference limiter for one key.
type refModel struct {
	lim      Limit
	capacity int64
	maxDelay int64 // µs; 0 = none
	alg      refAlg
}

// refResult is a decision of the model, in µs.
type refResult struct {
	allowed                        bool
	granted                        int64
	remaining, retry, reset, delay int64
	ttl                            int64 // PX set by a write, ms; 0 = no write
	deleted                        bool  // the state was deleted
	keep                           int64 // a denial's least TTL, ms: extended if more than 1 ms short
}

func (r refResult) result(peek bool) Result {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	g := int(r.granted)
	if peek {
		g = 0
	}
	return Result{
		Allowed:    r.allowed,
		Granted:    g,
		Remaining:  int(r.remaining),
		RetryAfter: us(r.retry),
		ResetAfter: us(r.reset),
		Delay:      us(r.delay),
	}
}

func newRefModel(lim Limit) *refModel {
	m := &refModel{lim: lim, maxDelay: lim.MaxDelay.Microseconds(), capacity: int64(lim.Capacity())}
	m.forget()
	return m
}

// forget drops the key's state, as when its TTL runs out.
func (m *refModel) forget() {
	period, rate := m.lim.Period.Microseconds(), int64(m.lim.Rate)
	switch m.lim.Algorithm {
	case TokenBucket:
		m.alg = &refTokenBucket{period: period, rate: rate, full: m.capacity * period}
	case LeakyBucket:
		m.alg = &refLeakyBucket{period: period, rate: rate, full: m.capacity * period}
	case FixedWindow:
		m.alg = &refFixedWindow{period: period, rate: rate}
	case SlidingWindow:
		m.alg = &refSlidingWindow{period: period, rate: rate}
	case SlidingWindowCounter:
		m.alg = &refSlidingWindowCounter{period: period, rate: rate}
	default:
		panic("unknown algorithm")
	}
}

func (m *refModel) clone() *refModel {
	c := *m
	c.alg = m.alg.clone()
	return &c
}

// delayAt is the Delay a request at clock would be given, measured from clock.
func (m *refModel) delayAt(a refAlg, clock int64) int64 {
	now := a.effective(clock)
	d := a.delay(now)
	if d > 0 {
		d += now - clock
	}
	return d
}

// admits reports whether a request of n at clock passes, without recording it.
func (m *refModel) admits(a refAlg, clock, n int64) bool {
	if !a.fits(a.effective(clock), n) {
		return false
	}
	return m.maxDelay == 0 || m.delayAt(a, clock) <= m.maxDelay
}

// whole reports whether the quota is whole at clock.
func (m *refModel) whole(a refAlg, clock int64) bool {
	return a.remaining(a.effective(clock)) >= m.capacity
}

// decide is one call of the limiter at clock.
func (m *refModel) decide(clock, n int64, mode int) refResult {
	a := m.alg
	wrote := a.touch(a.effective(clock))
	// (A log trimmed empty has no time of its own left.)
	now := a.effective(clock)
	var r refResult
	switch mode {
	case modeRefund:
		wrote = a.refund(now, n) || wrote
	case modeConsume, modePeek, modeAtMost:
		k := n
		if mode == modeAtMost {
			k = min(n, a.remaining(now))
		}
		if k >= 1 && m.admits(a, clock, k) {
			r.allowed, r.granted, r.delay = true, k, m.delayAt(a, clock)
			if mode != modePeek {
				a.commit(now, k)
				wrote = true
			}
			break
		}
		need := n
		if mode == modeAtMost {
			need = 1
		}
		r.retry = firstTrue(clock, func(c int64) bool { return m.admits(a, c, need) })
	}
	r.remaining = a.remaining(now)
	r.reset = firstTrue(clock, func(c int64) bool { return m.whole(a, c) })
	switch {
	case a.gone():
		r.deleted = wrote
		m.forget()
	case wrote:
		r.ttl = max(1, ceilDiv(r.reset, 1000))
	case mode != modePeek && r.reset > 0:
		r.keep = ceilDiv(r.reset, 1000)
	}
	return r
}

// firstTrue returns the least d >= 0 such that ok(clock+d), for an ok that
// is false up to some instant and true from then on.
func firstTrue(clock int64, ok func(int64) bool) int64 {
	if ok(clock) {
		return 0
	}
	lo, hi := int64(0), int64(1) // ok(clock+lo) is false
	for !ok(clock + hi) {
		lo, hi = hi, hi*2
		if hi > 1<<55 {
			panic("firstTrue: never true")
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ok(clock + mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b } // a >= 0, b > 0

func floorDiv(a, b int64) int64 { // b > 0
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// drain is max(0, level - dt*rate), without overflow.
func drain(level, dt, rate int64) int64 {
	if level <= 0 || dt >= ceilDiv(level, rate) {
		return 0
	}
	return level - dt*rate
}

// refTokenBucket: capacity tokens, refilled continuously at rate per
// period, initially full. Tokens are counted in 1/period of a token, so the
// refill is exactly rate per µs.
type refTokenBucket struct {
	period, rate, full int64
	has                bool
	level, t           int64 // tokens at t (scaled)
}

func (b *refTokenBucket) effective(clock int64) int64 {
	if b.has && b.t > clock {
		return b.t
	}
	return clock
}

func (b *refTokenBucket) tokens(now int64) int64 {
	if !b.has {
		return b.full
	}
	return b.full - drain(b.full-b.level, now-b.t, b.rate)
}

func (b *refTokenBucket) touch(int64) bool       { return false }
func (b *refTokenBucket) fits(now, n int64) bool { return b.tokens(now) >= n*b.period }
func (b *refTokenBucket) remaining(now int64) int64 {
	return max(0, b.tokens(now)/b.period)
}
func (b *refTokenBucket) delay(int64) int64 { return 0 }
func (b *refTokenBucket) commit(now, n int64) {
	b.level, b.t, b.has = b.tokens(now)-n*b.period, now, true
}
func (b *refTokenBucket) refund(now, n int64) bool {
	tokens := b.tokens(now)
	if tokens >= b.full {
		return false
	}
	b.level, b.t, b.has = min(b.full, tokens+n*b.period), now, true
	return true
}
func (b *refTokenBucket) gone() bool    { return false }
func (b *refTokenBucket) clone() refAlg { c := *b; return &c }

// refLeakyBucket: a queue of at most capacity units that drains at rate per
// period; an admitted request waits until the queue ahead of it has drained.
type refLeakyBucket struct {
	period, rate, full int64
	has                bool
	level, t           int64 // queued at t (scaled)
}

func (b *refLeakyBucket) effective(clock int64) int64 {
	if b.has && b.t > clock {
		return b.t
	}
	return clock
}

func (b *refLeakyBucket) queued(now int64) int64 {
	if !b.has {
		return 0
	}
	return drain(b.level, now-b.t, b.rate)
}

func (b *refLeakyBucket) touch(int64) bool       { return false }
func (b *refLeakyBucket) fits(now, n int64) bool { return b.queued(now)+n*b.period <= b.full }
func (b *refLeakyBucket) remaining(now int64) int64 {
	return max(0, (b.full-b.queued(now))/b.period)
}
func (b *refLeakyBucket) delay(now int64) int64 { return ceilDiv(b.queued(now), b.rate) }
func (b *refLeakyBucket) commit(now, n int64) {
	b.level, b.t, b.has = b.queued(now)+n*b.period, now, true
}
func (b *refLeakyBucket) refund(now, n int64) bool {
	q := b.queued(now)
	if q == 0 {
		return false
	}
	b.level, b.t, b.has = max(0, q-n*b.period), now, true
	return true
}
func (b *refLeakyBucket) gone() bool    { return false }
func (b *refLeakyBucket) clone() refAlg { c := *b; return &c }

// refFixedWindow: at most rate units in each window [k*period, (k+1)*period)
// of Unix time.
type refFixedWindow struct {
	period, rate int64
	has          bool
	start, count int64
}

func (w *refFixedWindow) effective(clock int64) int64 {
	if w.has && w.start > clock {
		return w.start
	}
	return clock
}

func (w *refFixedWindow) window(now int64) (start, count int64) {
	if w.has && now < w.start+w.period {
		return w.start, w.count
	}
	if w.has {
		return max(floorDiv(now, w.period)*w.period, w.start+w.period), 0
	}
	return floorDiv(now, w.period) * w.period, 0
}

func (w *refFixedWindow) touch(int64) bool { return false }
func (w *refFixedWindow) fits(now, n int64) bool {
	_, c := w.window(now)
	return c+n <= w.rate
}
func (w *refFixedWindow) remaining(now int64) int64 {
	_, c := w.window(now)
	return max(0, w.rate-c)
}
func (w *refFixedWindow) delay(int64) int64 { return 0 }
func (w *refFixedWindow) commit(now, n int64) {
	s, c := w.window(now)
	w.start, w.count, w.has = s, c+n, true
}
func (w *refFixedWindow) refund(now, n int64) bool {
	s, c := w.window(now)
	if c == 0 {
		return false
	}
	w.start, w.count, w.has = s, max(0, c-n), true
	return true
}
func (w *refFixedWindow) gone() bool    { return false }
func (w *refFixedWindow) clone() refAlg { c := *w; return &c }

// refSlidingWindow: at most rate units admitted in any interval
// (now-period, now]; a log of every admission. Its time is the later of the
// clock and the last time the log was written (an admission or a trim), so
// admissions trimmed once never count again after a clock step back.
type refSlidingWindow struct {
	period, rate int64
	log          []refAdmission // by time, ascending
	floor        int64          // when the log was last written; 0 with an empty log
}

type refAdmission struct{ t, n int64 }

func (w *refSlidingWindow) effective(clock int64) int64 {
	if len(w.log) > 0 && w.floor > clock {
		return w.floor
	}
	return clock
}

func (w *refSlidingWindow) touch(now int64) bool {
	i := 0
	for i < len(w.log) && w.log[i].t <= now-w.period {
		i++
	}
	if i == 0 {
		return false
	}
	w.log = w.log[i:len(w.log):len(w.log)]
	w.floor = now
	return true
}

func (w *refSlidingWindow) count(now int64) int64 {
	var c int64
	for i := len(w.log) - 1; i >= 0 && w.log[i].t > now-w.period; i-- {
		c += w.log[i].n
	}
	return c
}

func (w *refSlidingWindow) fits(now, n int64) bool    { return w.count(now)+n <= w.rate }
func (w *refSlidingWindow) remaining(now int64) int64 { return max(0, w.rate-w.count(now)) }
func (w *refSlidingWindow) delay(int64) int64         { return 0 }
func (w *refSlidingWindow) commit(now, n int64) {
	w.log = append(w.log[:len(w.log):len(w.log)], refAdmission{now, n})
	w.floor = now
}
func (w *refSlidingWindow) refund(int64, int64) bool { panic("the sliding window cannot refund") }
func (w *refSlidingWindow) gone() bool               { return len(w.log) == 0 }
func (w *refSlidingWindow) clone() refAlg {
	c := *w
	c.log = append([]refAdmission(nil), w.log...)
	return &c
}

// refSlidingWindowCounter: the estimate for (now-period, now] is the count
// of the current fixed window plus the previous window's count weighted by
// the fraction of it still inside; at most rate.
type refSlidingWindowCounter struct {
	period, rate       int64
	has                bool
	start, count, prev int64
}

func (w *refSlidingWindowCounter) effective(clock int64) int64 {
	if w.has && w.start > clock {
		return w.start
	}
	return clock
}

func (w *refSlidingWindowCounter) window(now int64) (start, count, prev int64) {
	switch {
	case !w.has || now >= w.start+2*w.period:
		return floorDiv(now, w.period) * w.period, 0, 0
	case now >= w.start+w.period:
		return w.start + w.period, 0, w.count
	default:
		return w.start, w.count, w.prev
	}
}

// estimate is the sliding count at now, times period.
func (w *refSlidingWindowCounter) estimate(now int64) int64 {
	s, c, p := w.window(now)
	return p*(w.period-(now-s)) + c*w.period
}

func (w *refSlidingWindowCounter) touch(int64) bool { return false }
func (w *refSlidingWindowCounter) fits(now, n int64) bool {
	return w.estimate(now)+n*w.period <= w.rate*w.period
}
func (w *refSlidingWindowCounter) remaining(now int64) int64 {
	return max(0, floorDiv(w.rate*w.period-w.estimate(now), w.period))
}
func (w *refSlidingWindowCounter) delay(int64) int64 { return 0 }
func (w *refSlidingWindowCounter) commit(now, n int64) {
	s, c, p := w.window(now)
	w.start, w.count, w.prev, w.has = s, c+n, p, true
}
func (w *refSlidingWindowCounter) refund(now, n int64) bool {
	s, c, p := w.window(now)
	if c == 0 && p == 0 {
		return false
	}
	fromCount := min(c, n)
	w.start, w.count, w.prev, w.has = s, c-fromCount, max(0, p-(n-fromCount)), true
	return true
}
func (w *refSlidingWindowCounter) gone() bool    { return false }
func (w *refSlidingWindowCounter) clone() refAlg { c := *w; return &c }

// TestModelSelfCheck pins the model itself to hand-computed decisions, so
// that the property tests below compare the scripts with something known
// to be right.
func TestModelSelfCheck(t *testing.T) {
	const s = int64(time.Second / time.Microsecond)
	e := redistest.Epoch.UnixMicro() // a whole second
	type call struct {
		at   int64 // µs after Epoch
		n    int64
		mode int
		want refResult // ttl, deleted and keep not compared
	}
	tests := []struct {
		name  string
		lim   Limit
		calls []call
	}{
		{"token bucket 3/s", PerSecond(3), []call{
			{0, 3, modeConsume, refResult{allowed: true, granted: 3, remaining: 0, reset: s}},
			{0, 1, modeConsume, refResult{remaining: 0, retry: 333334, reset: s}},
			{333333, 1, modeConsume, refResult{remaining: 0, retry: 1, reset: s - 333333}},
			{333334, 1, modeConsume, refResult{allowed: true, granted: 1, remaining: 0, reset: s}},
			{333334, 2, modeRefund, refResult{remaining: 2, reset: 333333}},
			{333334, 5, modeAtMost, refResult{allowed: true, granted: 2, remaining: 0, reset: s}},
			{-5 * s, 1, modeConsume, refResult{remaining: 0, retry: 5*s + 666667, reset: 6*s + 333334}}, // 5.333334s behind the bucket
		}},
		{"leaky bucket 10/s burst 3", Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, Burst: 3}, []call{
			{0, 1, modeConsume, refResult{allowed: true, granted: 1, remaining: 2, reset: s / 10}},
			{0, 1, modeConsume, refResult{allowed: true, granted: 1, remaining: 1, reset: 2 * s / 10, delay: s / 10}},
			{0, 1, modeConsume, refResult{allowed: true, granted: 1, remaining: 0, reset: 3 * s / 10, delay: 2 * s / 10}},
			{0, 1, modeConsume, refResult{remaining: 0, retry: s / 10, reset: 3 * s / 10}},
			{s / 20, 1, modeConsume, refResult{remaining: 0, retry: s / 20, reset: 5 * s / 20}},
		}},
		{"fixed window 2/s", Limit{Algorithm: FixedWindow, Rate: 2, Period: time.Second}, []call{
			{s / 2, 2, modeConsume, refResult{allowed: true, granted: 2, remaining: 0, reset: s / 2}},
			{s - 1, 1, modeConsume, refResult{remaining: 0, retry: 1, reset: 1}},
			{s, 2, modeConsume, refResult{allowed: true, granted: 2, remaining: 0, reset: s}},
		}},
		{"sliding window 3/s weighted", Limit{Algorithm: SlidingWindow, Rate: 3, Period: time.Second}, []call{
			{0, 1, modeConsume, refResult{allowed: true, granted: 1, remaining: 2, reset: s}},
			{s / 2, 2, modeConsume, refResult{allowed: true, granted: 2, remaining: 0, reset: s}},
			{s / 2, 1, modeConsume, refResult{remaining: 0, retry: s / 2, reset: s}},
			// 2 of the 3 units entered at s/2, so 2 must wait for them.
			{s, 2, modeConsume, refResult{remaining: 1, retry: s / 2, reset: s / 2}},
			{s, 3, modeAtMost, refResult{allowed: true, granted: 1, remaining: 0, reset: s}},
		}},
		{"sliding window counter 4/s", Limit{Algorithm: SlidingWindowCounter, Rate: 4, Period: time.Second}, []call{
			{0, 4, modeConsume, refResult{allowed: true, granted: 4, remaining: 0, reset: 2 * s}},
			// next window: prev 4 weighs 4*(1-1/4) = 3 at 1.25s.
			{s + s/4, 1, modeConsume, refResult{allowed: true, granted: 1, remaining: 0, reset: 2*s - s/4}},
			{s + s/4, 1, modeConsume, refResult{remaining: 0, retry: s / 4, reset: 2*s - s/4}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newRefModel(tt.lim)
			for i, c := range tt.calls {
				got := m.decide(e+c.at, c.n, c.mode)
				got.ttl, got.deleted, got.keep = 0, false, 0
				if got != c.want {
					t.Fatalf("call %d (at %+dµs, n=%d, mode %d): got %+v, want %+v", i, c.at, c.n, c.mode, got, c.want)
				}
			}
		})
	}
}

// propCase is one Limit driven through random sequences.
type propCase struct {
	name  string
	lim   Limit
	maxN  int // largest n drawn (capped at the capacity)
	steps int // per seed
}

func propCases() []propCase {
	lb := func(rate int, period time.Duration, burst int, maxDelay time.Duration) Limit {
		return Limit{Algorithm: LeakyBucket, Rate: rate, Period: period, Burst: burst, MaxDelay: maxDelay}
	}
	var cases []propCase
	for _, a := range []Algorithm{TokenBucket, SlidingWindow, SlidingWindowCounter, FixedWindow, LeakyBucket} {
		add := func(name string, lim Limit, maxN, steps int) {
			lim.Algorithm = a
			cases = append(cases, propCase{a.String() + "/" + name, lim, maxN, steps})
		}
		add("1 per hour", PerHour(1), 1, 60)
		add("3 per second", PerSecond(3), 3, 120)
		add("7 per 3s n<=7", Limit{Rate: 7, Period: 3 * time.Second}, 7, 120)
		add("3 per 7µs", Limit{Rate: 3, Period: 7 * time.Microsecond}, 2, 100)
		add("1 per µs", Limit{Rate: 1, Period: time.Microsecond}, 1, 60)
		add("1000 per minute", PerMinute(1000), 1000, 80)
		add("100000 per second", PerSecond(100000), 100000, 80)
		if a == TokenBucket || a == LeakyBucket {
			add("5 per hour burst 2", Limit{Rate: 5, Period: time.Hour, Burst: 2}, 2, 80)
			add("2 per second burst 9", Limit{Rate: 2, Period: time.Second, Burst: 9}, 9, 120)
			add("10 per second burst 3", Limit{Rate: 10, Period: time.Second, Burst: 3}, 3, 120)
		}
	}
	cases = append(cases,
		propCase{"leaky_bucket/10 per second max delay 350ms", lb(10, time.Second, 0, 350*time.Millisecond), 3, 120},
		propCase{"leaky_bucket/3 per second burst 7 max delay 1s", lb(3, time.Second, 7, time.Second), 4, 120},
		propCase{"leaky_bucket/1 per hour burst 3 max delay 90m", lb(1, time.Hour, 3, 90*time.Minute), 2, 80},
	)
	return cases
}

// TestScriptsMatchModel drives each script on miniredis and the model
// through the same seeded random sequences of (time step, n, mode), with
// clock steps back and batches of requests decided at one instant, and
// demands identical Results and TTLs on every step, and the invariants of
// Result.
func TestScriptsMatchModel(t *testing.T) {
	for _, pc := range propCases() {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			for seed := uint64(1); seed <= 2; seed++ {
				runProp(t, pc, seed, true, true)
			}
		})
	}
}

// TestScriptsMatchModelWithoutExpiry runs forward-only sequences against a
// model that never forgets its state: the scripts, whose keys do expire,
// must decide the same, so no TTL is ever too short to matter.
func TestScriptsMatchModelWithoutExpiry(t *testing.T) {
	for _, pc := range propCases() {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			runProp(t, pc, 100, false, false)
		})
	}
}

// harness is one key on miniredis and its model, moved through time together.
type harness struct {
	t        *testing.T
	ctx      context.Context
	mr       *miniredis.Miniredis
	rdb      *redis.Client
	l        *Limiter
	lim      Limit
	model    *refModel
	expire   bool  // the model forgets its state when the key expires
	clock    int64 // Unix µs
	ttl      int64 // µs until miniredis expires the key; 0: no key
	end      int64 // the key's end as the scripts keep it, ms
	keys     []string
	history  []string
	refunds  bool // the algorithm can refund
	capacity int64
}

func newHarness(t *testing.T, lim Limit, expire bool) *harness {
	mr, _ := redistest.Mini(t)
	// No retries: go-redis retries a command whose reply timed out, which
	// would run a script twice. The timeout is generous: miniredis under the
	// race detector runs a large AllowN in seconds.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := New(rdb, WithPrefix("model"), WithTimeout(time.Minute), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t: t, ctx: context.Background(), mr: mr, rdb: rdb, l: l,
		lim:   lim,
		model: newRefModel(lim), expire: expire,
		clock:    redistest.Epoch.UnixMicro(),
		refunds:  algorithms[lim.Algorithm].refund,
		capacity: int64(lim.Capacity()),
	}
	h.keys = stateKeys(nil, "model", "k", lim.Algorithm, 0)
	return h
}

// advance moves the clock by dt µs (back when negative). miniredis' TTLs,
// like a replica's after a clock step, only count down going forward.
func (h *harness) advance(dt int64) {
	h.clock += dt
	h.mr.SetTime(time.UnixMicro(h.clock).UTC())
	if dt > 0 && h.ttl > 0 {
		h.mr.FastForward(time.Duration(dt) * time.Microsecond)
		h.ttl -= dt
		if h.ttl <= 0 {
			h.ttl = 0
			if h.expire {
				h.model.forget()
			}
		}
	}
}

// request is one request of a step.
type request struct {
	n    int64
	mode int
}

// call makes the requests on key, in one script call, in both the script
// and m.
func (h *harness) call(key string, m *refModel, reqs []request) (got, want []Result, ws []refResult) {
	h.t.Helper()
	pr, err := h.l.prepare(h.lim)
	if err != nil {
		h.fatalf("prepare: %v", err)
	}
	calls := make([]*pending, len(reqs))
	for i, r := range reqs {
		c := &pending{n: int(r.n), mode: r.mode}
		c.nkeys = copy(c.keys[:], stateKeys(nil, "model", key, h.lim.Algorithm, 0))
		calls[i] = c
	}
	if len(reqs) == 1 {
		// The plain path, through the Limiter's methods.
		var res Result
		switch r := reqs[0]; r.mode {
		case modeConsume:
			res, err = h.l.AllowN(h.ctx, key, h.lim, int(r.n))
		case modeAtMost:
			res, err = h.l.AllowAtMost(h.ctx, key, h.lim, int(r.n))
		case modePeek:
			res, err = h.l.Peek(h.ctx, key, h.lim)
		case modeRefund:
			err = h.l.Refund(h.ctx, key, h.lim, int(r.n))
		}
		calls[0].res, calls[0].err = res, err
	} else {
		h.l.runBatch(pr, calls)
	}
	for i, r := range reqs {
		if calls[i].err != nil {
			h.fatalf("request %d %+v: %v", i, r, calls[i].err)
		}
		w := m.decide(h.clock, r.n, r.mode)
		wr := w.result(r.mode == modePeek)
		res := calls[i].res
		if r.mode == modePeek {
			res.Granted = 0
		}
		if r.mode == modeRefund {
			res, wr = Result{}, Result{} // a refund reports nothing
		}
		got, want, ws = append(got, res), append(want, wr), append(ws, w)
	}
	return got, want, ws
}

func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	tail := h.history
	if len(tail) > 12 {
		tail = tail[len(tail)-12:]
	}
	h.t.Fatalf("%s: %s\nlast steps:\n  %s", h.lim.Algorithm, fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

// step is one step of the main sequence: compare, check invariants and TTL,
// then probe the boundaries of what the Result claims.
func (h *harness) step(dt int64, reqs []request) refResult {
	h.t.Helper()
	h.advance(dt)
	got, want, ws := h.call("k", h.model, reqs)
	h.history = append(h.history, fmt.Sprintf("t=%+dµs dt=%+d reqs=%v -> %+v", h.clock-redistest.Epoch.UnixMicro(), dt, reqs, got))
	for i := range reqs {
		if got[i] != want[i] {
			h.fatalf("request %d of %d %v:\ngot  %+v\nwant %+v", i, len(reqs), reqs[i], got[i], want[i])
		}
		if reqs[i].mode != modeRefund {
			checkInvariants(h.t, h.lim, got[i], reqs[i], func(format string, args ...any) { h.fatalf(format, args...) })
		}
	}
	// The TTL follows the last write or extension of the step.
	for _, w := range ws {
		h.apply(w)
	}
	h.checkTTL()
	last := ws[len(ws)-1]
	if r := reqs[len(reqs)-1]; r.mode != modeRefund {
		h.probe(got[len(got)-1], r)
	}
	return last
}

// apply follows the key's TTL through one decision, as the scripts set it.
func (h *harness) apply(w refResult) {
	nowMs := floorDiv(h.clock, 1000)
	switch {
	case w.deleted:
		h.ttl, h.end = 0, 0
	case w.ttl > 0:
		h.ttl, h.end = w.ttl*1000, nowMs+w.ttl
	case w.keep > 0 && h.ttl > 0 && h.end-nowMs < w.keep-1:
		h.ttl, h.end = w.keep*1000, nowMs+w.keep
	}
}

// checkTTL compares the state's keys' PTTL with what the model expects.
func (h *harness) checkTTL() {
	h.t.Helper()
	for _, key := range h.keys {
		got, err := h.rdb.Do(h.ctx, "PTTL", key).Int64()
		if err != nil {
			h.fatalf("PTTL: %v", err)
		}
		want := int64(-2)
		if h.ttl > 0 {
			want = h.ttl / 1000
		}
		if got != want {
			h.fatalf("PTTL %s = %d, want %d", key, got, want)
		}
	}
}

// probeAt runs a request on a copy of the key d µs from now, and checks the
// copy's decision against a copy of the model.
func (h *harness) probeAt(d int64, r request) Result {
	h.t.Helper()
	const key = "probe"
	probeKeys := stateKeys(nil, "model", key, h.lim.Algorithm, 0)
	if err := h.rdb.Del(h.ctx, probeKeys...).Err(); err != nil {
		h.fatalf("DEL: %v", err)
	}
	for i, k := range h.keys {
		if err := h.rdb.Copy(h.ctx, k, probeKeys[i], 0, true).Err(); err != nil {
			h.fatalf("COPY: %v", err)
		}
	}
	saved := h.clock
	h.clock += d
	h.mr.SetTime(time.UnixMicro(h.clock).UTC())
	defer func() {
		h.clock = saved
		h.mr.SetTime(time.UnixMicro(h.clock).UTC())
	}()
	got, want, _ := h.call(key, h.model.clone(), []request{r})
	if got[0] != want[0] {
		h.fatalf("probe at +%dµs, %+v: got %+v, want %+v", d, r, got[0], want[0])
	}
	return got[0]
}

// probe checks that RetryAfter, ResetAfter and Remaining are exact: the same
// request passes after exactly RetryAfter and not a microsecond earlier;
// the quota is whole after exactly ResetAfter and not a microsecond
// earlier; Remaining more units pass now, and one more would not.
func (h *harness) probe(res Result, r request) {
	h.t.Helper()
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	peek := request{1, modePeek}
	if !res.Allowed {
		again := r
		if again.mode == modePeek {
			again.mode = modeConsume
		}
		retry := us(res.RetryAfter)
		if got := h.probeAt(retry, again); !got.Allowed {
			h.fatalf("denied with RetryAfter %v, yet %+v is denied again after it: %+v", res.RetryAfter, again, got)
		}
		if got := h.probeAt(retry-1, again); got.Allowed {
			h.fatalf("denied with RetryAfter %v, yet %+v passes 1µs before it: %+v", res.RetryAfter, again, got)
		}
	}
	if reset := us(res.ResetAfter); reset > 0 {
		if got := h.probeAt(reset, peek); got.Remaining != int(h.capacity) {
			h.fatalf("ResetAfter %v, yet after it Remaining is %d, want %d", res.ResetAfter, got.Remaining, h.capacity)
		}
		if got := h.probeAt(reset-1, peek); got.Remaining == int(h.capacity) {
			h.fatalf("ResetAfter %v, yet 1µs before it the quota is already whole", res.ResetAfter)
		}
	}
	if res.Allowed && r.mode != modePeek && !(h.lim.Algorithm == LeakyBucket && h.lim.MaxDelay > 0) {
		rem := int64(res.Remaining)
		if rem > 0 {
			if got := h.probeAt(0, request{rem, modeConsume}); !got.Allowed {
				h.fatalf("Remaining %d, yet AllowN(%d) right after is denied", rem, rem)
			}
		}
		if rem < h.capacity {
			if got := h.probeAt(0, request{rem + 1, modeConsume}); got.Allowed {
				h.fatalf("Remaining %d, yet AllowN(%d) right after passes", rem, rem+1)
			}
		}
	}
}

// checkInvariants checks what every Result promises, whatever the algorithm.
func checkInvariants(t testing.TB, lim Limit, res Result, r request, fatalf func(string, ...any)) {
	t.Helper()
	capacity := lim.Capacity()
	if res.Remaining < 0 || res.Remaining > capacity {
		fatalf("Remaining = %d, want 0 <= Remaining <= %d", res.Remaining, capacity)
	}
	if res.Allowed != (res.RetryAfter == 0) {
		fatalf("Allowed %v with RetryAfter %v: want RetryAfter == 0 iff allowed", res.Allowed, res.RetryAfter)
	}
	switch {
	case r.mode == modePeek && res.Granted != 0:
		fatalf("Peek granted %d", res.Granted)
	case r.mode == modeConsume && res.Allowed && res.Granted != int(r.n):
		fatalf("AllowN(%d) admitted with Granted %d", r.n, res.Granted)
	case r.mode == modeAtMost && res.Allowed && (res.Granted < 1 || res.Granted > int(r.n)):
		fatalf("AllowAtMost(%d) admitted with Granted %d", r.n, res.Granted)
	case !res.Allowed && res.Granted != 0:
		fatalf("denied with Granted %d", res.Granted)
	}
	if res.RetryAfter < 0 || res.ResetAfter < 0 || res.Delay < 0 {
		fatalf("negative duration in %+v", res)
	}
	if !res.Allowed && res.Delay != 0 {
		fatalf("denied with Delay %v", res.Delay)
	}
	if lim.Algorithm != LeakyBucket && res.Delay != 0 {
		fatalf("%s gave Delay %v", lim.Algorithm, res.Delay)
	}
	if lim.Algorithm == LeakyBucket && lim.MaxDelay > 0 && res.Delay > lim.MaxDelay {
		fatalf("Delay %v > MaxDelay %v", res.Delay, lim.MaxDelay)
	}
	if res.Remaining < capacity && res.ResetAfter == 0 {
		fatalf("Remaining %d < capacity %d, yet ResetAfter is 0", res.Remaining, capacity)
	}
	if res.Remaining == capacity && res.ResetAfter != 0 {
		fatalf("quota whole, yet ResetAfter is %v", res.ResetAfter)
	}
}

// runProp drives one seeded sequence.
func runProp(t *testing.T, pc propCase, seed uint64, back, expire bool) {
	t.Helper()
	steps := pc.steps
	reduced := testing.Short() || !redistest.Long()
	if reduced {
		steps = steps/5 + 1
		redistest.Reduced(t, "model sequences cut to 1/5 of their steps")
	}
	h := newHarness(t, pc.lim, expire)
	rng := rand.New(rand.NewPCG(seed, uint64(len(pc.name))))
	period := pc.lim.Period.Microseconds()
	capacity := pc.lim.Capacity()
	maxN := min(pc.maxN, capacity)
	tick := max(1, period/int64(pc.lim.Rate)) // time for one unit to refill or leave
	var last refResult
	var denied, admitted int
	defer func() {
		t.Logf("%s seed %d: %d admitted, %d denied of %d steps", pc.name, seed, admitted, denied, steps)
		// A sequence that never reaches the limit proves little.
		if !t.Failed() && !reduced && denied == 0 && int64(capacity) <= int64(maxN)*int64(steps)/10 {
			t.Errorf("seed %d: no step was denied", seed)
		}
	}()
	drawN := func() int64 {
		switch r := rng.IntN(10); {
		case r < 2:
			return 1 + rng.Int64N(int64(maxN))
		case r < 3:
			return int64(maxN)
		}
		return 1
	}
	drawMode := func() int {
		switch r := rng.IntN(20); {
		case r < 2:
			return modePeek
		case r < 4:
			return modeAtMost
		case r < 5 && h.refunds:
			return modeRefund
		}
		return modeConsume
	}
	for range steps {
		var dt int64
		switch r := rng.IntN(100); {
		case r < 15:
			dt = 0
		case r < 25:
			dt = 1 + rng.Int64N(3)
		case r < 50:
			dt = 1 + rng.Int64N(2*tick)
		case r < 58:
			dt = last.retry // exactly the wait we were told
		case r < 62:
			dt = max(0, last.retry-1)
		case r < 66:
			dt = last.reset
		case r < 78:
			dt = 1 + rng.Int64N(period)
		case r < 84:
			dt = period + rng.Int64N(2*period)
		case r < 90 && back:
			dt = -(1 + rng.Int64N(period+tick)) // a failover to a replica whose clock is behind
		default:
			dt = tick
		}
		// Most steps are one request; some are a batch of concurrent
		// callers' requests decided at one instant.
		reqs := []request{{drawN(), drawMode()}}
		if rng.IntN(6) == 0 {
			for range 1 + rng.IntN(5) {
				reqs = append(reqs, request{drawN(), drawMode()})
			}
		}
		for i := range reqs {
			if reqs[i].mode == modePeek {
				reqs[i].n = 1
			}
		}
		last = h.step(dt, reqs)
		for _, r := range reqs {
			if r.mode == modeRefund {
				continue
			}
			if last.allowed {
				admitted++
			} else {
				denied++
			}
		}
		if t.Failed() {
			return
		}
	}
}
