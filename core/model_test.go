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
// period in µs, so every quantity is an exact int64), and it derives
// RetryAfter and ResetAfter by searching for the first microsecond at which
// the request would pass (the quota would be whole), instead of the closed
// forms the scripts use. Where both agree on every step of thousands of
// random sequences, the closed forms are exact.
//
// Shared rules, for every algorithm:
//   - Time is the Redis clock in µs. The state's own time never moves back:
//     a request at clock c is decided at now = max(c, the state's time).
//   - Waits (RetryAfter, ResetAfter, Delay) are measured from the clock c,
//     so after a clock step back they include the step.
//   - A denied request and a Peek change nothing.
//   - Every write sets the key's TTL to ResetAfter rounded up to whole ms
//     (at least 1 ms): the state matters exactly until the quota is whole.

// refAlg is one algorithm's state for one key. now is always an effective
// time (never before the state's own time).
type refAlg interface {
	// effective is the time a request at clock is decided at.
	effective(clock int64) int64
	// fits reports whether n units fit the capacity at now.
	fits(now, n int64) bool
	// remaining is how many units fit at now, clamped to [0, capacity].
	remaining(now int64) int64
	// delay is how long, from now, the queue ahead takes to drain
	// (LeakyBucket); 0 for the others.
	delay(now int64) int64
	// commit records the admission of n units at now.
	commit(now, n int64)
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
	remaining, retry, reset, delay int64
	ttl                            int64 // PEXPIRE set by the decision, ms; 0 = no write
	keep                           int64 // a denial's least TTL, ms: PEXPIRE if PTTL is less
}

func (r refResult) result(capacity int64) Result {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Result{
		Allowed:    r.allowed,
		Limit:      int(capacity),
		Remaining:  int(r.remaining),
		RetryAfter: us(r.retry),
		ResetAfter: us(r.reset),
		Delay:      us(r.delay),
	}
}

func newRefModel(lim Limit) *refModel {
	m := &refModel{lim: lim, maxDelay: lim.MaxDelay.Microseconds()}
	m.capacity = int64(lim.Rate)
	if (lim.Algorithm == TokenBucket || lim.Algorithm == LeakyBucket) && lim.Burst > 0 {
		m.capacity = int64(lim.Burst)
	}
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
func (m *refModel) decide(clock, n int64, peek bool) refResult {
	a := m.alg
	now := a.effective(clock)
	if !m.admits(a, clock, n) {
		r := refResult{
			remaining: a.remaining(now),
			retry:     firstTrue(clock, func(c int64) bool { return m.admits(a, c, n) }),
			reset:     firstTrue(clock, func(c int64) bool { return m.whole(a, c) }),
		}
		if !peek && r.reset > 0 {
			r.keep = ceilDiv(r.reset, 1000)
		}
		return r
	}
	r := refResult{allowed: true, delay: m.delayAt(a, clock)}
	if !peek {
		a.commit(now, n)
	}
	r.remaining = a.remaining(now)
	r.reset = firstTrue(clock, func(c int64) bool { return m.whole(a, c) })
	if !peek {
		r.ttl = max(1, ceilDiv(r.reset, 1000))
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

func (b *refTokenBucket) fits(now, n int64) bool { return b.tokens(now) >= n*b.period }
func (b *refTokenBucket) remaining(now int64) int64 {
	return max(0, b.tokens(now)/b.period)
}
func (b *refTokenBucket) delay(int64) int64 { return 0 }
func (b *refTokenBucket) commit(now, n int64) {
	b.level, b.t, b.has = b.tokens(now)-n*b.period, now, true
}
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

func (b *refLeakyBucket) fits(now, n int64) bool { return b.queued(now)+n*b.period <= b.full }
func (b *refLeakyBucket) remaining(now int64) int64 {
	return max(0, (b.full-b.queued(now))/b.period)
}
func (b *refLeakyBucket) delay(now int64) int64 { return ceilDiv(b.queued(now), b.rate) }
func (b *refLeakyBucket) commit(now, n int64) {
	b.level, b.t, b.has = b.queued(now)+n*b.period, now, true
}
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
	return floorDiv(now, w.period) * w.period, 0
}

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
func (w *refFixedWindow) clone() refAlg { c := *w; return &c }

// refSlidingWindow: at most rate units admitted in any interval
// (now-period, now]; a log of every admission.
type refSlidingWindow struct {
	period, rate int64
	log          []refAdmission // by time, ascending
}

type refAdmission struct{ t, n int64 }

func (w *refSlidingWindow) effective(clock int64) int64 {
	if len(w.log) > 0 && w.log[len(w.log)-1].t > clock {
		return w.log[len(w.log)-1].t
	}
	return clock
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
	i := 0
	for i < len(w.log) && w.log[i].t <= now-w.period {
		i++
	}
	w.log = append(w.log[i:len(w.log):len(w.log)], refAdmission{now, n})
}
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
		want refResult // ttl and keep not compared
	}
	tests := []struct {
		name  string
		lim   Limit
		calls []call
	}{
		{"token bucket 3/s", PerSecond(3), []call{
			{0, 3, refResult{allowed: true, remaining: 0, reset: s}},
			{0, 1, refResult{remaining: 0, retry: 333334, reset: s}},
			{333333, 1, refResult{remaining: 0, retry: 1, reset: s - 333333}},
			{333334, 1, refResult{allowed: true, remaining: 0, reset: s}},
			{-5 * s, 1, refResult{remaining: 0, retry: 5*s + 666667, reset: 6*s + 333334}}, // 5.333334s behind the bucket
		}},
		{"leaky bucket 10/s burst 3", Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, Burst: 3}, []call{
			{0, 1, refResult{allowed: true, remaining: 2, reset: s / 10}},
			{0, 1, refResult{allowed: true, remaining: 1, reset: 2 * s / 10, delay: s / 10}},
			{0, 1, refResult{allowed: true, remaining: 0, reset: 3 * s / 10, delay: 2 * s / 10}},
			{0, 1, refResult{remaining: 0, retry: s / 10, reset: 3 * s / 10}},
			{s / 20, 1, refResult{remaining: 0, retry: s / 20, reset: 5 * s / 20}},
		}},
		{"fixed window 2/s", PerSecond(2).With(FixedWindow), []call{
			{s / 2, 2, refResult{allowed: true, remaining: 0, reset: s / 2}},
			{s - 1, 1, refResult{remaining: 0, retry: 1, reset: 1}},
			{s, 2, refResult{allowed: true, remaining: 0, reset: s}},
		}},
		{"sliding window 2/s", PerSecond(2).With(SlidingWindow), []call{
			{0, 1, refResult{allowed: true, remaining: 1, reset: s}},
			{s / 2, 1, refResult{allowed: true, remaining: 0, reset: s}},
			{s / 2, 1, refResult{remaining: 0, retry: s / 2, reset: s}},
			{s, 1, refResult{allowed: true, remaining: 0, reset: s}},
		}},
		{"sliding window counter 4/s", PerSecond(4).With(SlidingWindowCounter), []call{
			{0, 4, refResult{allowed: true, remaining: 0, reset: 2 * s}},
			// next window: prev 4 weighs 4*(1-1/4) = 3 at 1.25s.
			{s + s/4, 1, refResult{allowed: true, remaining: 0, reset: 2*s - s/4}},
			{s + s/4, 1, refResult{remaining: 0, retry: s / 4, reset: 2*s - s/4}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newRefModel(tt.lim)
			for i, c := range tt.calls {
				got := m.decide(e+c.at, c.n, false)
				got.ttl, got.keep = 0, 0
				if got != c.want {
					t.Fatalf("call %d (at %+dµs, n=%d): got %+v, want %+v", i, c.at, c.n, got, c.want)
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
			cases = append(cases, propCase{a.String() + "/" + name, lim.With(a), maxN, steps})
		}
		add("1 per hour", PerHour(1), 1, 60)
		add("3 per second", PerSecond(3), 3, 120)
		add("7 per 3s n<=7", Limit{Rate: 7, Period: 3 * time.Second}, 7, 120)
		add("3 per 7µs", Limit{Rate: 3, Period: 7 * time.Microsecond}, 2, 100)
		add("1 per µs", Limit{Rate: 1, Period: time.Microsecond}, 1, 60)
		add("1000 per minute", PerMinute(1000), 1000, 80)
		if a == SlidingWindow {
			// One sorted-set member per unit, and miniredis' Lua is slow:
			// keep the log small (Test*Window100kPerSecond fills one).
			add("100000 per second", PerSecond(100000), 500, 40)
		} else {
			add("100000 per second", PerSecond(100000), 100000, 80)
		}
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
// through the same seeded random sequences of (time step, n, peek), with
// clock steps back, and demands identical Results and TTLs on every step,
// and the invariants of Result.
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
	t       *testing.T
	ctx     context.Context
	mr      *miniredis.Miniredis
	rdb     *redis.Client
	l       *Limiter
	lim     Limit
	model   *refModel
	expire  bool  // the model forgets its state when the key expires
	clock   int64 // Unix µs
	ttl     int64 // µs until miniredis expires the key; 0: no key
	mainKey string
	history []string
}

func newHarness(t *testing.T, lim Limit, expire bool) *harness {
	mr, _ := redistest.Mini(t)
	// No retries: go-redis retries a command whose reply timed out, which
	// would run a script twice. The timeout is generous: miniredis under the
	// race detector runs a large AllowN in seconds.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &harness{
		t: t, ctx: context.Background(), mr: mr, rdb: rdb,
		l:     New(rdb, WithPrefix("model"), WithTimeout(time.Minute)),
		lim:   lim,
		model: newRefModel(lim), expire: expire,
		clock: redistest.Epoch.UnixMicro(),
	}
	h.mainKey = redisKey(h.l.prefix, "k", lim.Algorithm)
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

// call makes one decision on key in both the script and m.
func (h *harness) call(key string, m *refModel, n int64, peek bool) (got, want Result, w refResult) {
	h.t.Helper()
	var err error
	if peek {
		got, err = h.l.Peek(h.ctx, key, h.lim)
	} else {
		got, err = h.l.AllowN(h.ctx, key, h.lim, int(n))
	}
	if err != nil {
		h.fatalf("AllowN(%d, peek %v): %v", n, peek, err)
	}
	w = m.decide(h.clock, n, peek)
	return got, w.result(m.capacity), w
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
func (h *harness) step(dt, n int64, peek bool) refResult {
	h.t.Helper()
	h.advance(dt)
	got, want, w := h.call("k", h.model, n, peek)
	h.history = append(h.history, fmt.Sprintf("t=%+dµs dt=%+d n=%d peek=%v -> %+v", h.clock-redistest.Epoch.UnixMicro(), dt, n, peek, got))
	if got != want {
		h.fatalf("got  %+v\nwant %+v", got, want)
	}
	if w.ttl > 0 {
		h.ttl = w.ttl * 1000
	}
	if h.ttl > 0 && h.ttl/1000 < w.keep-1 { // PTTL < keep - 1: PEXPIRE keep
		h.ttl = w.keep * 1000
	}
	checkInvariants(h.t, h.lim, got, n, func(format string, args ...any) { h.fatalf(format, args...) })
	h.checkTTL()
	h.probe(got, n, peek)
	return w
}

// checkTTL compares the key's PTTL with what the model expects.
func (h *harness) checkTTL() {
	h.t.Helper()
	got, err := h.rdb.Do(h.ctx, "PTTL", h.mainKey).Int64()
	if err != nil {
		h.fatalf("PTTL: %v", err)
	}
	want := int64(-2)
	if h.ttl > 0 {
		want = h.ttl / 1000
	}
	if got != want {
		h.fatalf("PTTL %s = %d, want %d", h.mainKey, got, want)
	}
	if got == -1 {
		h.fatalf("key %s has no TTL", h.mainKey)
	}
}

// probeAt runs a decision on a copy of the key d µs from now, and checks the
// copy's decision against a copy of the model.
func (h *harness) probeAt(d, n int64, peek bool) Result {
	h.t.Helper()
	const key = "probe"
	probeKey := redisKey(h.l.prefix, key, h.lim.Algorithm)
	if err := h.rdb.Del(h.ctx, probeKey).Err(); err != nil {
		h.fatalf("DEL: %v", err)
	}
	if err := h.rdb.Copy(h.ctx, h.mainKey, probeKey, 0, true).Err(); err != nil {
		h.fatalf("COPY: %v", err)
	}
	saved := h.clock
	h.clock += d
	h.mr.SetTime(time.UnixMicro(h.clock).UTC())
	defer func() {
		h.clock = saved
		h.mr.SetTime(time.UnixMicro(h.clock).UTC())
	}()
	got, want, _ := h.call(key, h.model.clone(), n, peek)
	if got != want {
		h.fatalf("probe at +%dµs, n=%d, peek=%v: got %+v, want %+v", d, n, peek, got, want)
	}
	return got
}

// probe checks that RetryAfter, ResetAfter and Remaining are exact: the same
// n passes after exactly RetryAfter and not a microsecond earlier; the quota
// is whole after exactly ResetAfter and not a microsecond earlier; Remaining
// more units pass now, and one more would not.
func (h *harness) probe(r Result, n int64, peek bool) {
	h.t.Helper()
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	capacity := int64(r.Limit)
	if !r.Allowed {
		retry := us(r.RetryAfter)
		if got := h.probeAt(retry, n, false); !got.Allowed {
			h.fatalf("denied with RetryAfter %v, yet n=%d is denied again after it: %+v", r.RetryAfter, n, got)
		}
		if got := h.probeAt(retry-1, n, false); got.Allowed {
			h.fatalf("denied with RetryAfter %v, yet n=%d passes 1µs before it: %+v", r.RetryAfter, n, got)
		}
	}
	if reset := us(r.ResetAfter); reset > 0 {
		if got := h.probeAt(reset, 1, true); got.Remaining != int(capacity) {
			h.fatalf("ResetAfter %v, yet after it Remaining is %d, want %d", r.ResetAfter, got.Remaining, capacity)
		}
		if got := h.probeAt(reset-1, 1, true); got.Remaining == int(capacity) {
			h.fatalf("ResetAfter %v, yet 1µs before it the quota is already whole", r.ResetAfter)
		}
	}
	if r.Allowed && !peek && !(h.lim.Algorithm == LeakyBucket && h.lim.MaxDelay > 0) {
		rem := int64(r.Remaining)
		// (A sliding window log adds one member per unit: skip the costly
		// probes that would add many thousands.)
		if rem > 0 && (h.lim.Algorithm != SlidingWindow || rem <= 2000) {
			if got := h.probeAt(0, rem, false); !got.Allowed {
				h.fatalf("Remaining %d, yet AllowN(%d) right after is denied", rem, rem)
			}
		}
		if rem < capacity {
			if got := h.probeAt(0, rem+1, false); got.Allowed {
				h.fatalf("Remaining %d, yet AllowN(%d) right after passes", rem, rem+1)
			}
		}
	}
}

// checkInvariants checks what every Result promises, whatever the algorithm.
func checkInvariants(t testing.TB, lim Limit, r Result, n int64, fatalf func(string, ...any)) {
	t.Helper()
	if r.Limit != lim.Capacity() {
		fatalf("Limit = %d, want %d", r.Limit, lim.Capacity())
	}
	if r.Remaining < 0 || r.Remaining > r.Limit {
		fatalf("Remaining = %d, want 0 <= Remaining <= %d", r.Remaining, r.Limit)
	}
	if r.Allowed != (r.RetryAfter == 0) {
		fatalf("Allowed %v with RetryAfter %v: want RetryAfter == 0 iff allowed", r.Allowed, r.RetryAfter)
	}
	if r.RetryAfter < 0 || r.ResetAfter < 0 || r.Delay < 0 {
		fatalf("negative duration in %+v", r)
	}
	if !r.Allowed && r.Delay != 0 {
		fatalf("denied with Delay %v", r.Delay)
	}
	if lim.Algorithm != LeakyBucket && r.Delay != 0 {
		fatalf("%s gave Delay %v", lim.Algorithm, r.Delay)
	}
	if lim.Algorithm == LeakyBucket && lim.MaxDelay > 0 && r.Delay > lim.MaxDelay {
		fatalf("Delay %v > MaxDelay %v", r.Delay, lim.MaxDelay)
	}
	if r.Remaining < r.Limit && r.ResetAfter == 0 {
		fatalf("Remaining %d < Limit %d, yet ResetAfter is 0", r.Remaining, r.Limit)
	}
	if r.Remaining == r.Limit && r.ResetAfter != 0 {
		fatalf("quota whole, yet ResetAfter is %v", r.ResetAfter)
	}
}

// runProp drives one seeded sequence.
func runProp(t *testing.T, pc propCase, seed uint64, back, expire bool) {
	t.Helper()
	steps := pc.steps
	if testing.Short() {
		steps = steps/5 + 1
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
		if !t.Failed() && !testing.Short() && denied == 0 && int64(capacity) <= int64(maxN)*int64(steps)/10 {
			t.Errorf("seed %d: no step was denied", seed)
		}
	}()
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
		n := int64(1)
		switch r := rng.IntN(10); {
		case r < 2:
			n = 1 + rng.Int64N(int64(maxN))
		case r < 3:
			n = int64(maxN)
		}
		peek := rng.IntN(10) == 0
		if peek {
			n = 1
		}
		last = h.step(dt, n, peek)
		if last.allowed {
			admitted++
		} else {
			denied++
		}
		if t.Failed() {
			return
		}
	}
}
