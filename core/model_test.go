package core

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// This file holds a pure-Go reference model of the rate algorithms and
// the property tests that hold the Lua to it.
//
// The model is written from the documented semantics, not from the
// scripts: it keeps the sliding window as a plain list of entries, and it
// derives RetryAfter and ResetAfter by searching for the first microsecond
// at which the request would pass (the quota would be whole), instead of
// the closed forms the scripts use. Where both agree on every step of
// thousands of random sequences (takes, peeks, partial takes, refunds of
// earlier takes, charges beyond what is left, changes of the Limit both
// ways, clock steps back, batches), the closed forms are exact.
//
// Shared rules, for every algorithm:
//   - Time is the Redis clock in µs. A bucket's own time never moves back:
//     a request at clock c is decided at now = max(c, the bucket's time).
//     A window state that lies ahead of the clock (a debt carried into a
//     later window, or a clock step back) refuses every request until the
//     clock reaches it.
//   - Waits (RetryAfter, ResetAfter, Delay) are measured from the clock c,
//     so after a clock step back they include the step.
//   - A denied request and a Peek take nothing.
//   - A refund leaves the state the limit would hold had the units never
//     been taken: windows count units out only of the window they were
//     taken in, the log only while the units' entry is in the window;
//     buckets hold their level plus the units, capped at capacity (the
//     queue its level minus them, floored at empty), which is exact at
//     any time after the take because refill and drain are linear and
//     capped.
//   - Every write sets the key's TTL to ResetAfter rounded up to whole ms
//     (at least 1 ms): the state matters exactly until the quota is whole.
//     A call that writes nothing lengthens the TTL when it is more than
//     1 ms short of ResetAfter (the Limit changed to a slower one, or
//     Redis' clock stepped back: the TTL counts real time).
//   - Requests of one batch are decided in order at one clock, exactly as
//     separate calls at that clock.

// refAlg is one algorithm's state for one key.
type refAlg interface {
	// effective is the time a request at clock is decided at.
	effective(clock int64) int64
	// touch brings the state to clock before any decision, and reports a
	// change that is written (the sliding window trims its log).
	touch(clock int64) bool
	// blocked reports a window state that lies ahead of now.
	blocked(now int64) bool
	// fits reports whether n units fit at now (not blocked).
	fits(now, n int64) bool
	// remaining is how many units fit at now, clamped to [0, capacity].
	remaining(now int64) int64
	// drained is the instant the queue ahead has drained (LeakyBucket),
	// 0 when empty.
	drained(now int64) int64
	// commit records the admission of n units at now.
	commit(now, n int64)
	// refund gives back n units taken at stamp, at position pos (the
	// buckets' count of units taken; 0: unknown), and reports a change.
	refund(clock, now, n, stamp, pos int64) bool
	// charge takes n units beyond what is left, and reports a change.
	charge(clock, now, n int64) bool
	// gone reports a state that holds nothing and is deleted, not written.
	gone(now int64) bool
	// setLimit carries the state over to a new Limit.
	setLimit(p params, lim Limit)
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
	pos                            int64 // a bucket's take's position
	ttl                            int64 // PX set by a write, ms; 0 = no write
	deleted                        bool  // the state was deleted
	keep                           int64 // a call's least TTL, ms: extended if more than 1 ms short
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
		pos:        r.pos,
	}
}

func mustParams(lim Limit) params {
	p, err := lim.params()
	if err != nil {
		panic(err)
	}
	return p
}

func newRefModel(lim Limit) *refModel {
	m := &refModel{}
	m.setLimit(lim)
	m.forget()
	return m
}

func (m *refModel) setLimit(lim Limit) {
	m.lim, m.capacity, m.maxDelay = lim, int64(lim.Capacity()), lim.MaxDelay.Microseconds()
	if m.maxDelay == 0 && lim.MaxDelay > 0 {
		m.maxDelay = 1
	}
	if m.alg != nil {
		m.alg.setLimit(mustParams(lim), lim)
	}
}

// forget drops the key's state, as when its TTL runs out.
func (m *refModel) forget() {
	p := mustParams(m.lim)
	switch m.lim.Algorithm {
	case TokenBucket:
		m.alg = &refTokenBucket{p: p}
	case LeakyBucket:
		m.alg = &refLeakyBucket{p: p}
	case FixedWindow:
		m.alg = &refFixedWindow{period: p.period, rate: p.rate}
	case SlidingWindow:
		m.alg = &refSlidingWindow{period: p.period, rate: p.rate}
	case SlidingWindowCounter:
		m.alg = &refSlidingWindowCounter{p: p}
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
	if d := a.drained(a.effective(clock)); d > 0 {
		return d - clock
	}
	return 0
}

// admits reports whether a request of n at clock passes, without recording it.
func (m *refModel) admits(a refAlg, clock, n int64) bool {
	now := a.effective(clock)
	if a.blocked(now) || !a.fits(now, n) {
		return false
	}
	return m.maxDelay == 0 || m.delayAt(a, clock) <= m.maxDelay
}

// remaining is what a Result reports: the units that still fit at clock.
// Under a MaxDelay, that is the requests of 1 that would pass one after
// another at clock, counted by making them on a copy.
func (m *refModel) remaining(a refAlg, clock int64) int64 {
	now := a.effective(clock)
	if a.blocked(now) {
		return 0
	}
	if m.maxDelay == 0 {
		return a.remaining(now)
	}
	c, k := a.clone(), int64(0)
	for k < m.capacity && m.admits(c, clock, 1) {
		c.commit(now, 1)
		k++
	}
	return k
}

// whole reports whether the quota is whole at clock.
func (m *refModel) whole(a refAlg, clock int64) bool {
	now := a.effective(clock)
	return !a.blocked(now) && a.remaining(now) >= m.capacity
}

// decide is one call of the limiter at clock; stamp and pos are a
// refund's take's.
func (m *refModel) decide(clock, n int64, mode int, stamp, pos int64) refResult {
	a := m.alg
	wrote := a.touch(clock)
	now := a.effective(clock)
	var r refResult
	switch mode {
	case modeRefund:
		wrote = a.refund(clock, now, n, stamp, pos) || wrote
	case modeCharge:
		wrote = a.charge(clock, now, n) || wrote
	case modeConsume, modePeek, modeAtMost:
		k := n
		if mode == modeAtMost {
			k = min(n, a.remaining(now))
			if a.blocked(now) {
				k = 0
			}
		}
		if k >= 1 && m.admits(a, clock, k) {
			r.allowed, r.granted, r.delay = true, k, m.delayAt(a, clock)
			if mode != modePeek {
				a.commit(now, k)
				wrote = true
				if c, ok := a.(interface{ position() int64 }); ok {
					r.pos = c.position()
				}
			}
			break
		}
		need := n
		if mode == modeAtMost {
			need = 1
		}
		r.retry = firstTrue(clock, func(c int64) bool { return m.admits(a, c, need) })
	}
	r.remaining = m.remaining(a, clock)
	r.reset = firstTrue(clock, func(c int64) bool { return m.whole(a, c) })
	switch {
	case a.gone(clock):
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

func floorDiv(a, b int64) int64 { // b > 0
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// refTokenBucket: capacity tokens, refilled by rate scaled units per tick,
// initially full; levels are kept in scaled units as the Limit's period
// counts them (the period in ticks over the gcd), and carried to another
// Limit's scale rounded down, as doubles compute it.
type refTokenBucket struct {
	p             params
	has           bool
	level, t, sc  int64 // tokens at t, in the scale sc
	scCap, scRate int64 // the capacity they were held to, the rate they refilled at
	takeCount
}

// takeCount is a bucket's count of the units taken since its epoch (see POS
// in scripts/prelude.lua), which a take's position names.
type takeCount struct{ taken, epoch int64 }

const posMod = 1 << 52

// counts are the count and epoch a write at now stores: a new state's
// epoch is now; one whose Limit changed (changed) starts just after now.
func (c takeCount) counts(has, changed bool, now int64) takeCount {
	switch {
	case !has:
		c.epoch = now
	case changed:
		c.epoch = now + 1 // (a take before the change, even at now, is of another epoch)
	}
	if !has {
		c.taken = 0
	}
	return c
}

func (c takeCount) position() int64 { return c.taken }

// add counts n more units taken.
func (c *takeCount) add(n int64) { c.taken = ((c.taken+n)%posMod + posMod) % posMod }

// giveBack is what a refund of n units taken at stamp, at pos, restores
// to a bucket room scaled units short of its end, whose last write was at
// wt (see give_back in scripts/prelude.lua); it updates the count.
func (c *takeCount) giveBack(p params, now, n, stamp, pos, wt, room int64, changed bool) int64 {
	// (A take of another epoch or Limit is owed nothing; nor one later than
	// now, of a clock that stepped back since.)
	if stamp <= 0 || room <= 0 || changed || stamp > now || c.epoch > stamp {
		return 0
	}
	cost := n * p.period
	give := cost
	if wt <= stamp-p.tick || wt > stamp { // written since the take
		refill := ceilDiv(max(0, now-stamp), p.tick) * p.rate
		give -= refill
		if pos > 0 && float64(p.capacity*p.period+refill)/float64(p.period) < posMod/2 {
			since := ((c.taken-pos)%posMod + posMod) % posMod
			give = max(give, room-since*p.period)
		}
	}
	give = max(0, min(give, cost, room))
	if pos > 0 && give == cost && pos == c.taken {
		c.add(-n)
	}
	return give
}

func (b *refTokenBucket) effective(clock int64) int64 {
	if b.has && b.t > clock {
		return b.t
	}
	return clock
}

// at is the level and its time as a call at now finds them.
func (b *refTokenBucket) at(now int64) (tokens, t int64) {
	full := b.p.capacity * b.p.period
	if !b.has {
		return full, now
	}
	level := b.level
	if b.sc != b.p.period {
		level = int64(math.Floor(float64(level) / float64(b.sc) * float64(b.p.period)))
	}
	level = min(level, full)
	ticks := floorDiv(now-b.t, b.p.tick)
	if level < full && ticks < ceilDiv(full-level, b.p.rate) {
		return level + ticks*b.p.rate, b.t + ticks*b.p.tick
	}
	return full, now
}

func (b *refTokenBucket) touch(int64) bool   { return false }
func (b *refTokenBucket) blocked(int64) bool { return false }
func (b *refTokenBucket) fits(now, n int64) bool {
	tokens, _ := b.at(now)
	return tokens >= n*b.p.period
}
func (b *refTokenBucket) remaining(now int64) int64 {
	tokens, _ := b.at(now)
	return max(0, floorDiv(tokens, b.p.period))
}
func (b *refTokenBucket) drained(int64) int64 { return 0 }

// loaded is the count as a call at now finds it: a Limit change (another
// scale, or a level above the new capacity) starts a new epoch.
func (b *refTokenBucket) loaded(now int64) takeCount {
	full := b.p.capacity * b.p.period
	if tokens, _ := b.at(now); tokens == full {
		return takeCount{epoch: now} // (a full bucket starts a new count)
	}
	changed := b.sc != b.p.period || b.scCap != b.p.capacity || b.scRate != b.p.rate
	return b.counts(b.has, changed, now)
}
func (b *refTokenBucket) set(tokens, t int64, c takeCount) {
	b.level, b.t, b.sc, b.scCap, b.scRate, b.has, b.takeCount = tokens, t, b.p.period, b.p.capacity, b.p.rate, true, c
}
func (b *refTokenBucket) commit(now, n int64) {
	tokens, t := b.at(now)
	c := b.loaded(now)
	c.add(n)
	b.set(tokens-n*b.p.period, t, c)
}
func (b *refTokenBucket) refund(_, now, n, stamp, pos int64) bool {
	wt := b.t
	if !b.has {
		wt = 0
	}
	tokens, t := b.at(now)
	c := b.loaded(now)
	changed := b.has && (b.sc != b.p.period || b.scCap != b.p.capacity || b.scRate != b.p.rate)
	give := c.giveBack(b.p, now, n, stamp, pos, wt, b.p.capacity*b.p.period-tokens, changed)
	if give <= 0 { // (stamp 0 names no decision)
		return false
	}
	b.set(tokens+give, t, c)
	return true
}
func (b *refTokenBucket) charge(_, now, n int64) bool {
	tokens, t := b.at(now)
	c := b.loaded(now)
	c.add(n)
	b.set(tokens-n*b.p.period, t, c)
	return true
}
func (b *refTokenBucket) gone(int64) bool            { return false }
func (b *refTokenBucket) setLimit(p params, _ Limit) { b.p = p }
func (b *refTokenBucket) clone() refAlg              { c := *b; return &c }

// refLeakyBucket: a queue that drains by rate scaled units per tick; an
// admitted request waits until the queue ahead of it has drained.
type refLeakyBucket struct {
	p            params
	has          bool
	level, t, sc int64 // queued at t, in the scale sc
	scRate       int64 // the rate they drained at
	takeCount
}

func (b *refLeakyBucket) effective(clock int64) int64 {
	if b.has && b.t > clock {
		return b.t
	}
	return clock
}

func (b *refLeakyBucket) at(now int64) (queued, t int64) {
	if !b.has {
		return 0, now
	}
	level := b.level
	if b.sc != b.p.period {
		level = int64(math.Ceil(float64(level) / float64(b.sc) * float64(b.p.period)))
	}
	ticks := floorDiv(now-b.t, b.p.tick)
	if level > 0 && ticks < ceilDiv(level, b.p.rate) {
		return level - ticks*b.p.rate, b.t + ticks*b.p.tick
	}
	return 0, now
}

func (b *refLeakyBucket) touch(int64) bool   { return false }
func (b *refLeakyBucket) blocked(int64) bool { return false }
func (b *refLeakyBucket) fits(now, n int64) bool {
	q, _ := b.at(now)
	return q+n*b.p.period <= b.p.capacity*b.p.period
}
func (b *refLeakyBucket) remaining(now int64) int64 {
	q, _ := b.at(now)
	return max(0, floorDiv(b.p.capacity*b.p.period-q, b.p.period))
}
func (b *refLeakyBucket) drained(now int64) int64 {
	q, t := b.at(now)
	if q == 0 {
		return 0
	}
	return t + ceilDiv(q, b.p.rate)*b.p.tick
}
func (b *refLeakyBucket) loaded(now int64) takeCount {
	if q, _ := b.at(now); q == 0 {
		return takeCount{epoch: now} // (an empty queue starts a new count)
	}
	return b.counts(b.has, b.sc != b.p.period || b.scRate != b.p.rate, now)
}
func (b *refLeakyBucket) set(q, t int64, c takeCount) {
	b.level, b.t, b.sc, b.scRate, b.has, b.takeCount = q, t, b.p.period, b.p.rate, true, c
}
func (b *refLeakyBucket) commit(now, n int64) {
	q, t := b.at(now)
	c := b.loaded(now)
	c.add(n)
	b.set(q+n*b.p.period, t, c)
}
func (b *refLeakyBucket) refund(clock, now, n, stamp, pos int64) bool {
	wt := b.t
	if !b.has {
		wt = 0
	}
	q, t := b.at(now)
	c := b.loaded(now)
	give := c.giveBack(b.p, now, n, stamp, pos, wt, q, b.has && (b.sc != b.p.period || b.scRate != b.p.rate))
	if give <= 0 { // (stamp 0 names no decision)
		return false
	}
	if q -= give; q == 0 {
		t = clock // an empty queue starts at the clock, as a new one
	}
	b.set(q, t, c)
	return true
}
func (b *refLeakyBucket) charge(_, now, n int64) bool {
	q, t := b.at(now)
	c := b.loaded(now)
	c.add(n)
	b.set(q+n*b.p.period, t, c)
	return true
}
func (b *refLeakyBucket) gone(int64) bool            { return false }
func (b *refLeakyBucket) setLimit(p params, _ Limit) { b.p = p }
func (b *refLeakyBucket) clone() refAlg              { c := *b; return &c }

// refFixedWindow: at most rate units in each window [k*period,
// (k+1)*period) of Unix time; a window that began off that grid (under
// another period) is followed, not overlapped.
type refFixedWindow struct {
	period, rate int64
	has          bool
	start, count int64
}

func (w *refFixedWindow) effective(clock int64) int64 { return clock }

func (w *refFixedWindow) window(now int64) (start, count int64, ahead bool) {
	if w.has && now < w.start+w.period {
		return w.start, w.count, w.start > now
	}
	s := floorDiv(now, w.period) * w.period
	if w.has {
		s = max(s, w.start+w.period)
	}
	return s, 0, false
}

func (w *refFixedWindow) touch(int64) bool { return false }
func (w *refFixedWindow) blocked(now int64) bool {
	_, _, ahead := w.window(now)
	return ahead
}
func (w *refFixedWindow) fits(now, n int64) bool {
	_, c, _ := w.window(now)
	return c+n <= w.rate
}
func (w *refFixedWindow) remaining(now int64) int64 {
	_, c, _ := w.window(now)
	return max(0, w.rate-c)
}
func (w *refFixedWindow) drained(int64) int64 { return 0 }
func (w *refFixedWindow) commit(now, n int64) {
	s, c, _ := w.window(now)
	w.start, w.count, w.has = s, c+n, true
}
func (w *refFixedWindow) refund(_, now, n, stamp, _ int64) bool {
	s, c, ahead := w.window(now)
	if ahead || stamp < s || stamp >= s+w.period || c == 0 {
		return false
	}
	w.start, w.count, w.has = s, max(0, c-n), true
	return true
}
func (w *refFixedWindow) charge(_, now, n int64) bool {
	s, c, _ := w.window(now)
	c += n
	if c > w.rate {
		k := ceilDiv(c, w.rate) - 1
		s, c = s+k*w.period, c-k*w.rate
	}
	w.start, w.count, w.has = s, c, true
	return true
}
func (w *refFixedWindow) gone(int64) bool { return false }
func (w *refFixedWindow) setLimit(p params, _ Limit) {
	w.period, w.rate = p.period, p.rate
}
func (w *refFixedWindow) clone() refAlg { c := *w; return &c }

// refSlidingWindow: at most rate units in any interval (now-period, now]:
// a list of entries, one per request, or, above capEntries requests per
// window, one per request or group of requests within period/capEntries
// of each other, each leaving the window with its last request.
type refSlidingWindow struct {
	period, rate int64
	entries      []refEntry // by time, ascending
	total        int64      // units ever admitted
	trimmed      int64      // total before the oldest entry
	credits      []refCredit
}

type refEntry struct{ t, w, s int64 } // time, units, total through it

type refCredit struct{ s, r int64 } // r units refunded from the entry holding unit s

const capEntries = 1024

func (w *refSlidingWindow) effective(clock int64) int64 { return clock }

// left is what has left the window ending at now: the total before the
// first entry still in it.
func (w *refSlidingWindow) left(now int64) int64 {
	out := w.trimmed
	for _, e := range w.entries {
		if e.t > now-w.period {
			break
		}
		out = e.s
	}
	return out
}

func (w *refSlidingWindow) count(now int64) int64 {
	left := w.left(now)
	c := w.total - left
	for _, cr := range w.credits {
		if cr.s > left {
			c -= cr.r
		}
	}
	return c
}

func (w *refSlidingWindow) newest() int64 {
	if len(w.entries) == 0 {
		return 0
	}
	return w.entries[len(w.entries)-1].t
}

func (w *refSlidingWindow) touch(clock int64) bool {
	i := 0
	for i < len(w.entries) && w.entries[i].t <= clock-w.period {
		w.trimmed = w.entries[i].s
		i++
	}
	if i == 0 {
		return false
	}
	w.entries = w.entries[i:len(w.entries):len(w.entries)]
	if len(w.entries) == 0 {
		w.trimmed = w.total
	}
	kept := w.credits[:0:0]
	for _, cr := range w.credits {
		if cr.s > w.trimmed {
			kept = append(kept, cr)
		}
	}
	w.credits = kept
	return true
}

func (w *refSlidingWindow) blocked(now int64) bool { return w.newest() > now }
func (w *refSlidingWindow) fits(now, n int64) bool { return w.count(now)+n <= w.rate }
func (w *refSlidingWindow) remaining(now int64) int64 {
	return min(w.rate, max(0, w.rate-w.count(now)))
}
func (w *refSlidingWindow) drained(int64) int64 { return 0 }

func (w *refSlidingWindow) add(t, units int64) {
	w.total += units
	if m := len(w.entries); m > 0 {
		last := &w.entries[m-1]
		q := ceilDiv(w.period, capEntries)
		if last.t == t || m > capEntries || w.rate > capEntries && floorDiv(last.t, q) == floorDiv(t, q) {
			w.entries = append(w.entries[:m-1:m-1], refEntry{t, last.w + units, w.total})
			return
		}
	}
	w.entries = append(w.entries[:len(w.entries):len(w.entries)], refEntry{t, units, w.total})
}

func (w *refSlidingWindow) commit(now, n int64) { w.add(now, n) }

func (w *refSlidingWindow) refund(clock, _, n, stamp, _ int64) bool {
	if len(w.entries) == 0 || stamp <= clock-w.period {
		return false
	}
	i := 0
	for i < len(w.entries) && w.entries[i].t < stamp {
		i++
	}
	if i == len(w.entries) {
		return false
	}
	e := w.entries[i]
	w.credits = append([]refCredit(nil), w.credits...)
	at, have := -1, int64(0)
	for j, cr := range w.credits {
		if cr.s == e.s {
			at, have = j, cr.r
		}
	}
	r := min(n, e.w-have)
	if r <= 0 {
		return false
	}
	if at < 0 {
		w.credits = append(w.credits, refCredit{e.s, 0})
		at = len(w.credits) - 1
	}
	w.credits[at].r += r
	if len(w.credits) > 8 {
		// Fold the credit of the oldest entry into the next.
		lo, lo2 := -1, -1
		for j, cr := range w.credits {
			if lo < 0 || cr.s < w.credits[lo].s {
				lo2, lo = lo, j
			} else if lo2 < 0 || cr.s < w.credits[lo2].s {
				lo2 = j
			}
		}
		w.credits[lo].r += w.credits[lo2].r
		w.credits = append(w.credits[:lo2:lo2], w.credits[lo2+1:]...)
	}
	return true
}

func (w *refSlidingWindow) charge(clock, _, n int64) bool {
	total := w.count(clock) + n
	t0 := max(clock, w.newest())
	if total <= w.rate {
		w.add(t0, n)
		return true
	}
	k := ceilDiv(total, w.rate) - 1
	w.add(t0+k*w.period, total-k*w.rate)
	return true
}

func (w *refSlidingWindow) gone(clock int64) bool { return w.count(clock) <= 0 }
func (w *refSlidingWindow) setLimit(p params, _ Limit) {
	w.period, w.rate = p.period, p.rate
}
func (w *refSlidingWindow) clone() refAlg {
	c := *w
	c.entries = append([]refEntry(nil), w.entries...)
	c.credits = append([]refCredit(nil), w.credits...)
	return &c
}

// refSlidingWindowCounter: the estimate for (now-period, now] is the count
// of the current fixed window plus the previous window's count weighted by
// the whole ticks of it still inside; at most rate.
type refSlidingWindowCounter struct {
	p                  params
	has                bool
	start, count, prev int64
}

func (w *refSlidingWindowCounter) effective(clock int64) int64 { return clock }

func (w *refSlidingWindowCounter) window(now int64) (start, count, prev int64, ahead bool) {
	period := w.p.period
	switch {
	case w.has && now < w.start+period:
		return w.start, w.count, w.prev, w.start > now
	case w.has && now < w.start+2*period:
		return w.start + period, 0, w.count, false
	}
	s := floorDiv(now, period) * period
	if w.has {
		s = max(s, w.start+2*period)
	}
	return s, 0, 0, false
}

func (w *refSlidingWindowCounter) ticks() int64 { return ceilDiv(w.p.period, w.p.tick) }

// estimate is the sliding count at now, times the period in ticks.
func (w *refSlidingWindowCounter) estimate(now int64) int64 {
	s, c, p, ahead := w.window(now)
	t0 := now
	if ahead {
		t0 = s
	}
	weight := w.ticks() - floorDiv(t0-s, w.p.tick)
	return p*weight + c*w.ticks()
}

func (w *refSlidingWindowCounter) touch(int64) bool { return false }
func (w *refSlidingWindowCounter) blocked(now int64) bool {
	_, _, _, ahead := w.window(now)
	return ahead
}
func (w *refSlidingWindowCounter) fits(now, n int64) bool {
	return w.estimate(now)+n*w.ticks() <= w.p.rate*w.ticks()
}
func (w *refSlidingWindowCounter) remaining(now int64) int64 {
	return max(0, floorDiv(w.p.rate*w.ticks()-w.estimate(now), w.ticks()))
}
func (w *refSlidingWindowCounter) drained(int64) int64 { return 0 }
func (w *refSlidingWindowCounter) commit(now, n int64) {
	s, c, p, _ := w.window(now)
	w.start, w.count, w.prev, w.has = s, c+n, p, true
}
func (w *refSlidingWindowCounter) refund(_, now, n, stamp, _ int64) bool {
	s, c, p, ahead := w.window(now)
	if ahead {
		return false
	}
	c2, p2 := c, p
	switch period := w.p.period; {
	case stamp >= s && stamp < s+period:
		c2 = c - min(c, n)
	case stamp >= s-period && stamp < s:
		p2 = p - min(p, n)
	}
	if c2 == c && p2 == p {
		return false
	}
	w.start, w.count, w.prev, w.has = s, c2, p2, true
	return true
}
func (w *refSlidingWindowCounter) charge(_, now, n int64) bool {
	s, c, p, _ := w.window(now)
	c += n
	if c > w.p.rate {
		k := ceilDiv(c, w.p.rate) - 1
		s, c, p = s+k*w.p.period, c-k*w.p.rate, w.p.rate
	}
	w.start, w.count, w.prev, w.has = s, c, p, true
	return true
}
func (w *refSlidingWindowCounter) gone(int64) bool            { return false }
func (w *refSlidingWindowCounter) setLimit(p params, _ Limit) { w.p = p }
func (w *refSlidingWindowCounter) clone() refAlg              { c := *w; return &c }

// TestModelSelfCheck pins the model itself to hand-computed decisions, so
// that the property tests below compare the scripts with something known
// to be right.
func TestModelSelfCheck(t *testing.T) {
	const s = int64(time.Second / time.Microsecond)
	e := redistest.Epoch.UnixMicro() // a whole second
	type call struct {
		at    int64 // µs after Epoch
		n     int64
		mode  int
		stamp int64 // µs after Epoch, for a refund
		want  refResult
	}
	tests := []struct {
		name  string
		lim   Limit
		calls []call
	}{
		{"token bucket 3/s", PerSecond(3), []call{
			{0, 3, modeConsume, 0, refResult{allowed: true, granted: 3, remaining: 0, reset: s}},
			{0, 1, modeConsume, 0, refResult{remaining: 0, retry: 333334, reset: s}},
			{333333, 1, modeConsume, 0, refResult{remaining: 0, retry: 1, reset: s - 333333}},
			{333334, 1, modeConsume, 0, refResult{allowed: true, granted: 1, remaining: 0, reset: s}},
			// Two units taken 333334µs ago, written over since: one has
			// refilled since, and counts as lost (see the refund's comment).
			{333334, 2, modeRefund, 0, refResult{remaining: 1, reset: 666667}},
			{333334, 5, modeAtMost, 0, refResult{allowed: true, granted: 1, remaining: 0, reset: s}},
			// A debt of 3: the next unit comes after 4 thirds of a second.
			{333334, 3, modeCharge, 0, refResult{remaining: 0, reset: 2 * s}},
			{333334, 1, modeConsume, 0, refResult{remaining: 0, retry: s + 333334, reset: 2 * s}},
		}},
		{"leaky bucket 10/s burst 3", Limit{Algorithm: LeakyBucket, Rate: 10, Period: time.Second, Burst: 3}, []call{
			{0, 1, modeConsume, 0, refResult{allowed: true, granted: 1, remaining: 2, reset: s / 10}},
			{0, 1, modeConsume, 0, refResult{allowed: true, granted: 1, remaining: 1, reset: 2 * s / 10, delay: s / 10}},
			{0, 1, modeConsume, 0, refResult{allowed: true, granted: 1, remaining: 0, reset: 3 * s / 10, delay: 2 * s / 10}},
			{0, 1, modeConsume, 0, refResult{remaining: 0, retry: s / 10, reset: 3 * s / 10}},
			{s / 20, 1, modeConsume, 0, refResult{remaining: 0, retry: s / 20, reset: 5 * s / 20}},
		}},
		{"fixed window 2/s", Limit{Algorithm: FixedWindow, Rate: 2, Period: time.Second}, []call{
			{s / 2, 2, modeConsume, 0, refResult{allowed: true, granted: 2, remaining: 0, reset: s / 2}},
			{s - 1, 1, modeConsume, 0, refResult{remaining: 0, retry: 1, reset: 1}},
			// A unit of the last window refunded in this one gives nothing back.
			{s, 1, modeRefund, s / 2, refResult{remaining: 2}},
			{s, 2, modeConsume, 0, refResult{allowed: true, granted: 2, remaining: 0, reset: s}},
			{s, 1, modeRefund, s, refResult{remaining: 1, reset: s}},
			// 1 + 4 charged: 2 here, 2 next window, 1 the window after.
			{s, 4, modeCharge, 0, refResult{remaining: 0, reset: 3 * s}},
			{2 * s, 1, modeConsume, 0, refResult{remaining: 0, retry: s, reset: 2 * s}},
			{3 * s, 1, modeConsume, 0, refResult{allowed: true, granted: 1, remaining: 0, reset: s}},
		}},
		{"sliding window 3/s weighted", Limit{Algorithm: SlidingWindow, Rate: 3, Period: time.Second}, []call{
			{0, 1, modeConsume, 0, refResult{allowed: true, granted: 1, remaining: 2, reset: s}},
			{s / 2, 2, modeConsume, 0, refResult{allowed: true, granted: 2, remaining: 0, reset: s}},
			{s / 2, 1, modeConsume, 0, refResult{remaining: 0, retry: s / 2, reset: s}},
			// 2 of the 3 units entered at s/2, so 2 must wait for them.
			{s, 2, modeConsume, 0, refResult{remaining: 1, retry: s / 2, reset: s / 2}},
			// One of them given back: it counts no more.
			{s, 1, modeRefund, s / 2, refResult{remaining: 2, reset: s / 2}},
			{s, 3, modeAtMost, 0, refResult{allowed: true, granted: 2, remaining: 0, reset: s}},
		}},
		{"sliding window counter 4/s", Limit{Algorithm: SlidingWindowCounter, Rate: 4, Period: time.Second}, []call{
			{0, 4, modeConsume, 0, refResult{allowed: true, granted: 4, remaining: 0, reset: 2 * s}},
			// next window: prev 4 weighs 4*(1-1/4) = 3 at 1.25s.
			{s + s/4, 1, modeConsume, 0, refResult{allowed: true, granted: 1, remaining: 0, reset: 2*s - s/4}},
			{s + s/4, 1, modeConsume, 0, refResult{remaining: 0, retry: s / 4, reset: 2*s - s/4}},
			// A unit of this window, refunded: out of count, and prev's 3
			// leave room for it again.
			{s + s/4, 1, modeRefund, s + s/4, refResult{remaining: 1, reset: 3 * s / 4}},
			{s + s/4, 1, modeConsume, 0, refResult{allowed: true, granted: 1, remaining: 0, reset: 2*s - s/4}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newRefModel(tt.lim)
			for i, c := range tt.calls {
				got := m.decide(e+c.at, c.n, c.mode, e+c.stamp, 0)
				got.ttl, got.deleted, got.keep, got.pos = 0, false, 0, 0
				if got != c.want {
					t.Fatalf("call %d (at %+dµs, n=%d, mode %d): got %+v, want %+v", i, c.at, c.n, c.mode, got, c.want)
				}
			}
		})
	}
}

// propCase is one Limit driven through random sequences, with others of
// its algorithm that it changes to and back (higher and lower).
type propCase struct {
	name  string
	lim   Limit
	alts  []Limit
	maxN  int // largest n drawn (capped at the capacity)
	steps int // per seed
}

func propCases() []propCase {
	lb := func(rate int, period time.Duration, burst int, maxDelay time.Duration) Limit {
		return Limit{Algorithm: LeakyBucket, Rate: rate, Period: period, Burst: burst, MaxDelay: maxDelay}
	}
	var cases []propCase
	// (Not FixedWindow: its window ends with its key's expiry, in whole ms,
	// which this model's µs clock that steps back does not follow.
	// TestFixedWindowSweep models it.)
	for _, a := range []Algorithm{TokenBucket, SlidingWindow, SlidingWindowCounter, LeakyBucket} {
		add := func(name string, lim Limit, maxN, steps int, alts ...Limit) {
			lim.Algorithm = a
			for i := range alts {
				alts[i].Algorithm = a
			}
			cases = append(cases, propCase{a.String() + "/" + name, lim, alts, maxN, steps})
		}
		add("1 per hour", PerHour(1), 1, 60)
		add("3 per second", PerSecond(3), 3, 120, PerSecond(1), PerSecond(7), Limit{Rate: 3, Period: 2 * time.Second})
		add("7 per 3s n<=7", Limit{Rate: 7, Period: 3 * time.Second}, 7, 120, Limit{Rate: 2, Period: 3 * time.Second})
		add("3 per 7µs", Limit{Rate: 3, Period: 7 * time.Microsecond}, 2, 100)
		add("1 per µs", Limit{Rate: 1, Period: time.Microsecond}, 1, 60)
		add("1000 per minute", PerMinute(1000), 1000, 80, PerMinute(100), PerMinute(5000))
		add("100000 per second", PerSecond(100000), 100000, 80, PerSecond(10), PerSecond(300000))
		// Beyond the sliding window's exact log: entries group by 1/1024th.
		add("5000 per 10ms", Limit{Rate: 5000, Period: 10 * time.Millisecond}, 3, 200)
		// Too large for exact µs: buckets and counters count in ticks.
		add("1e9 per year", Limit{Rate: 999_999_937, Period: 365 * 24 * time.Hour}, 1_000_000, 60)
		if a == TokenBucket || a == LeakyBucket {
			add("5 per hour burst 2", Limit{Rate: 5, Period: time.Hour, Burst: 2}, 2, 80)
			add("2 per second burst 9", Limit{Rate: 2, Period: time.Second, Burst: 9}, 9, 120, Limit{Rate: 2, Period: time.Second, Burst: 3})
			add("10 per second burst 3", Limit{Rate: 10, Period: time.Second, Burst: 3}, 3, 120, Limit{Rate: 10, Period: time.Second, Burst: 30})
		}
	}
	cases = append(cases,
		propCase{"leaky_bucket/10 per second max delay 350ms", lb(10, time.Second, 0, 350*time.Millisecond), nil, 3, 120},
		propCase{"leaky_bucket/3 per second burst 7 max delay 1s", lb(3, time.Second, 7, time.Second), []Limit{lb(3, time.Second, 2, 0)}, 4, 120},
		propCase{"leaky_bucket/1 per hour burst 3 max delay 90m", lb(1, time.Hour, 3, 90*time.Minute), nil, 2, 80},
	)
	return cases
}

// TestScriptsMatchModel drives each script on miniredis and the model
// through the same seeded random sequences of (time step, n, mode), with
// clock steps back, Limit changes, refunds of earlier takes, charges, and
// batches of requests decided at one instant, and demands identical
// Results and TTLs on every step, and the invariants of Result.
func TestScriptsMatchModel(t *testing.T) {
	for _, pc := range propCases() {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			for seed := uint64(1); seed <= propSeeds(); seed++ {
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
	keys    []string
	history []string
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
	t.Cleanup(func() { _ = l.Close() })
	h := &harness{
		t: t, ctx: context.Background(), mr: mr, rdb: rdb, l: l,
		lim:   lim,
		model: newRefModel(lim), expire: expire,
		clock: redistest.Epoch.UnixMicro(),
	}
	h.keys = stateKeys(nil, "model", "k", lim.row(), 0)
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

// modelRequest is one request of a step; stamp is a refund's take.
type modelRequest struct {
	n          int64
	mode       int
	stamp, pos int64
}

// call makes the requests on key, in one script call, in both the script
// and m.
func (h *harness) call(key string, m *refModel, reqs []modelRequest) (got, want []Result, ws []refResult) {
	h.t.Helper()
	pl, err := h.l.plans.of(h.lim)
	if err != nil {
		h.fatalf("plan: %v", err)
	}
	calls := make([]*pending, len(reqs))
	for i, r := range reqs {
		c := &pending{rq: request{key: key, pl: pl, n: int(r.n), mode: r.mode, taken: r.stamp, pos: [maxRules]int64{r.pos}}}
		c.nkeys = copy(c.keys[:], stateKeys(nil, "model", key, h.lim.row(), 0))
		calls[i] = c
	}
	if len(reqs) == 1 {
		// The plain path, through the Limiter's methods.
		var res Result
		switch r := reqs[0]; r.mode {
		case modeConsume:
			res, err = h.l.Allow(h.ctx, int(r.n), h.lim.For(key))
		case modeAtMost:
			res, err = h.l.AllowAtMost(h.ctx, int(r.n), h.lim.For(key))
		case modePeek:
			res, err = h.l.Peek(h.ctx, h.lim.For(key))
		case modeRefund:
			rc := handReceipt(h.l, key, h.lim, int(r.n), r.stamp)
			rc.pos = r.pos
			err = h.l.Refund(h.ctx, rc)
		case modeCharge:
			_, err = h.l.Settle(h.ctx, receiptFor(h.l, h.lim.For(key), 0, 0), int(r.n))
		}
		calls[0].res[0], calls[0].err = res, err
	} else {
		h.l.runBatch(pl, calls)
	}
	for i, r := range reqs {
		if calls[i].err != nil {
			h.fatalf("request %d %+v: %v", i, r, calls[i].err)
		}
		w := m.decide(h.clock, r.n, r.mode, r.stamp, r.pos)
		wr := w.result(r.mode == modePeek)
		res := calls[i].res[0]
		res.stamp, res.owner, res.rule, res.several = 0, 0, Rule{}, nil
		if r.mode == modePeek {
			res.Granted = 0
		}
		if r.mode == modeRefund || r.mode == modeCharge {
			res, wr = Result{}, Result{} // they report nothing checked here
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
	h.t.Fatalf("%s: %s\nlast steps:\n  %s", h.lim, fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

// step is one step of the main sequence: compare, check invariants and TTL,
// then probe the boundaries of what the Result claims.
func (h *harness) step(dt int64, reqs []modelRequest) []refResult {
	h.t.Helper()
	h.advance(dt)
	got, want, ws := h.call("k", h.model, reqs)
	h.history = append(h.history, fmt.Sprintf("t=%+dµs dt=%+d %s reqs=%v -> %+v", h.clock-redistest.Epoch.UnixMicro(), dt, h.lim, reqs, got))
	for i := range reqs {
		if !opsSame(got[i], want[i]) {
			h.fatalf("request %d of %d %v:\ngot  %+v\nwant %+v", i, len(reqs), reqs[i], got[i], want[i])
		}
		if reqs[i].mode <= modeAtMost {
			checkInvariants(h.t, h.lim, got[i], reqs[i], func(format string, args ...any) { h.fatalf(format, args...) })
		}
	}
	// The TTL follows the last write or extension of the step.
	for _, w := range ws {
		h.apply(w)
	}
	h.checkTTL()
	if r := reqs[len(reqs)-1]; r.mode <= modeAtMost {
		h.probe(got[len(got)-1], r)
	}
	return ws
}

// apply follows the key's TTL through one decision, as the scripts set it.
func (h *harness) apply(w refResult) {
	switch {
	case w.deleted:
		h.ttl = 0
	case w.ttl > 0:
		h.ttl = w.ttl * 1000
	case w.keep > 0 && h.ttl > 0 && h.ttl/1000 < w.keep-1:
		// (The scripts read the key's PTTL: real time, whatever the clock did.)
		h.ttl = w.keep * 1000
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
func (h *harness) probeAt(d int64, r modelRequest) Result {
	h.t.Helper()
	const key = "probe"
	probeKeys := stateKeys(nil, "model", key, h.lim.row(), 0)
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
	got, want, _ := h.call(key, h.model.clone(), []modelRequest{r})
	if !opsSame(got[0], want[0]) {
		h.fatalf("probe at +%dµs, %+v: got %+v, want %+v", d, r, got[0], want[0])
	}
	return got[0]
}

// probe checks that RetryAfter, ResetAfter and Remaining are exact: the same
// request passes after exactly RetryAfter and not a microsecond earlier;
// the quota is whole after exactly ResetAfter and not a microsecond
// earlier; Remaining more units pass now, and one more would not.
func (h *harness) probe(res Result, r modelRequest) {
	h.t.Helper()
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	capacity := int64(h.lim.Capacity())
	// Under a MaxDelay, Remaining counts the requests of 1 that still pass
	// one after another (each waits longer), while one request of n waits
	// only for the queue ahead: whole is the most that can be Remaining,
	// and it may be reached before the queue is empty.
	capped := h.lim.Algorithm == LeakyBucket && h.lim.MaxDelay > 0
	whole := int64(wholeRemaining(h.lim))
	peek := modelRequest{n: 1, mode: modePeek}
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
		if got := h.probeAt(reset, peek); got.Remaining != int(whole) {
			h.fatalf("ResetAfter %v, yet after it Remaining is %d, want %d", res.ResetAfter, got.Remaining, whole)
		}
		if got := h.probeAt(reset-1, peek); got.Remaining == int(capacity) && !capped {
			h.fatalf("ResetAfter %v, yet 1µs before it the quota is already whole", res.ResetAfter)
		}
	}
	if res.Allowed && r.mode != modePeek {
		rem := int64(res.Remaining)
		if rem > 0 {
			if got := h.probeAt(0, modelRequest{n: rem, mode: modeConsume}); !got.Allowed {
				h.fatalf("Remaining %d, yet AllowN(%d) right after is denied", rem, rem)
			}
		}
		if rem < capacity && !capped {
			if got := h.probeAt(0, modelRequest{n: rem + 1, mode: modeConsume}); got.Allowed {
				h.fatalf("Remaining %d, yet AllowN(%d) right after passes", rem, rem+1)
			}
		}
	}
}

// checkInvariants checks what every Result promises, whatever the algorithm.
// wholeRemaining is the Remaining of a key at rest: its capacity, or,
// under a LeakyBucket's MaxDelay, the requests of 1 whose waits fit it.
func wholeRemaining(lim Limit) int {
	if lim.Algorithm != LeakyBucket || lim.MaxDelay == 0 {
		return lim.Capacity()
	}
	p, _ := lim.params()
	return int(min(p.capacity, int64(lim.MaxDelay/time.Microsecond)/p.tick*p.rate/p.period+1))
}

func checkInvariants(t testing.TB, lim Limit, res Result, r modelRequest, fatalf func(string, ...any)) {
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
	if whole := wholeRemaining(lim); res.Remaining < whole && res.ResetAfter == 0 {
		fatalf("Remaining %d < %d at rest, yet ResetAfter is 0", res.Remaining, whole)
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
	limits := []Limit{pc.lim}
	if expire {
		// (A state that expired once it was whole under one Limit starts
		// whole under the next: without expiry, a raised capacity would
		// fill up only as it refills. The model that never forgets keeps
		// one Limit.)
		limits = append(limits, pc.alts...)
	}
	var last []refResult
	var denied, admitted, refunds, changes int
	var takes []modelRequest // admitted takes, as refunds name them
	defer func() {
		t.Logf("%s seed %d: %d admitted, %d denied, %d refunds, %d limit changes of %d steps",
			pc.name, seed, admitted, denied, refunds, changes, steps)
		// A sequence that never reaches the limit proves little.
		if !t.Failed() && !reduced && denied == 0 && int64(pc.lim.Capacity()) <= int64(pc.maxN)*int64(steps)/10 {
			t.Errorf("seed %d: no step was denied", seed)
		}
	}()
	for range steps {
		if len(limits) > 1 && rng.IntN(12) == 0 {
			h.lim = limits[rng.IntN(len(limits))]
			h.model.setLimit(h.lim)
			changes++
		}
		period := h.lim.Period.Microseconds()
		capacity := h.lim.Capacity()
		maxN := min(pc.maxN, capacity)
		tick := max(1, period/int64(h.lim.Rate)) // time for one unit to refill or leave
		drawN := func() int64 {
			switch r := rng.IntN(10); {
			case r < 2:
				return 1 + rng.Int64N(int64(maxN))
			case r < 3:
				return int64(maxN)
			}
			return 1
		}
		draw := func() modelRequest {
			switch r := rng.IntN(24); {
			case r < 2:
				return modelRequest{n: 1, mode: modePeek}
			case r < 4:
				return modelRequest{n: drawN(), mode: modeAtMost}
			case r < 6 && len(takes) > 0:
				i := len(takes) - 1 - rng.IntN(min(len(takes), 4))
				tk := takes[i]
				takes = append(takes[:i:i], takes[i+1:]...)
				return modelRequest{n: 1 + rng.Int64N(tk.n), mode: modeRefund, stamp: tk.stamp, pos: tk.pos}
			case r < 7:
				return modelRequest{n: drawN(), mode: modeCharge}
			}
			return modelRequest{n: drawN(), mode: modeConsume}
		}
		var dt int64
		var lastRetry, lastReset int64
		if len(last) > 0 {
			lastRetry, lastReset = last[len(last)-1].retry, last[len(last)-1].reset
		}
		switch r := rng.IntN(100); {
		case r < 15:
			dt = 0
		case r < 25:
			dt = 1 + rng.Int64N(3)
		case r < 50:
			dt = 1 + rng.Int64N(2*tick)
		case r < 58:
			dt = lastRetry // exactly the wait we were told
		case r < 62:
			dt = max(0, lastRetry-1)
		case r < 66:
			dt = lastReset
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
		reqs := []modelRequest{draw()}
		if rng.IntN(6) == 0 {
			for range 1 + rng.IntN(5) {
				reqs = append(reqs, draw())
			}
		}
		last = h.step(dt, reqs)
		for i, r := range reqs {
			switch {
			case r.mode == modeRefund:
				refunds++
			case r.mode == modeCharge || r.mode == modePeek:
			case last[i].allowed:
				admitted++
				takes = append(takes, modelRequest{n: last[i].granted, stamp: h.clock, pos: last[i].pos})
			default:
				denied++
			}
		}
		if t.Failed() {
			return
		}
	}
}

// propSeeds is how many seeded sequences TestScriptsMatchModel runs per
// case: 2, or REDLIMIT_SEEDS for a longer hunt.
func propSeeds() uint64 {
	if n, err := strconv.ParseUint(os.Getenv("REDLIMIT_SEEDS"), 10, 64); err == nil && n > 0 {
		return n
	}
	return 2
}

// handReceipt is the receipt of n units of key under lim, taken at stamp,
// as l's Allow would have made it.
func handReceipt(l *Limiter, key string, lim Limit, n int, stamp int64) Result {
	return receiptFor(l, lim.For(key), n, stamp)
}
