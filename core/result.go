package core

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// Result is the outcome of one decision. A denial is a Result with Allowed
// false, never an error: errors are for invalid arguments and failures. A
// worked example is in docs/limits.md#reading-a-result.
//
// A Result is also the receipt Refund, Settle and Renew take: it carries
// its Rules and the Redis instant its units were taken at, as
// x/time/rate's Reservation does. See docs/limits.md#receipts.
type Result struct {
	// Allowed reports whether the request may proceed (after Delay). For
	// Peek, whether it would.
	Allowed bool
	// Granted is how many units were taken: n when Allow admits, between 1
	// and n when AllowAtMost does, 0 on a denial and for Peek.
	Granted int
	// Remaining is how many units could still be taken right now, after
	// this request. 0 <= Remaining <= the Limit's Capacity.
	Remaining int
	// RetryAfter is 0 when Allowed, else the exact wait until the same
	// request could be admitted (for AllowAtMost, one unit), assuming no
	// other traffic; always > 0 on a denial. A FixedWindow over a Period
	// reads it from its key's expiry: whole ms, up to 2 ms longer. For Concurrency, which cannot
	// know when a request in flight ends, the time until the oldest permit
	// lapses, at most a second.
	RetryAfter time.Duration
	// ResetAfter is how long until the quota is whole again (Remaining ==
	// Capacity), assuming no other traffic.
	ResetAfter time.Duration
	// Delay is how long an admitted LeakyBucket request must wait before it
	// proceeds, so that requests leave at an even pace. 0 otherwise.
	Delay time.Duration
	// Cached reports a denial answered by this instance's deny cache
	// (WithDenyCache) without asking Redis.
	Cached bool
	// Fallback reports a decision made in process (WithLocalFallback)
	// because Redis could not answer.
	Fallback bool
	// Leased reports a decision made through this instance's lease of the
	// key's quota (WithLeases): Redis was asked only if the lease had run
	// out. Remaining is then what Redis had left when the lease was taken,
	// plus the lease's own units.
	Leased bool
	// At is the instant of the decision, from which RetryAfter, ResetAfter
	// and Delay count: Redis' clock (its TIME), or the Limiter's own (the
	// process', or redlimittest's) for decisions made here (Cached,
	// Fallback, Leased) and for a FixedWindow over a Period alone, which
	// reads its key's expiry instead. Response headers take their time
	// from it.
	At time.Time
	// Rules holds, for a decision under several Rules, one Result per
	// Rule, in their order, each saying what its Rule alone decided (and,
	// for a receipt, what it took); nil for one Rule. The fields above are
	// then the strictest of them: the least Remaining, the longest waits.
	// A Rule that refused has Allowed false and RetryAfter > 0; one in a
	// later Cluster slot, not asked because an earlier slot refused, has a
	// zero Result.
	Rules []Result

	// stamp is the Redis TIME (µs) of the decision, which a refund names;
	// for Concurrency, the permit's id; for a period FixedWindow, the tag
	// of the window the units were taken in.
	stamp int64
	// pos is a bucket's take's position in its state's count of units
	// taken, which a give-back names (0: unknown; see POS in
	// scripts/prelude.lua).
	pos int64
	// owner names the state the units were taken from (see receipt), so
	// that a receipt whose Granted was changed is refused.
	owner uint64
	// rule is the Rule the Result decided, for a decision of one Rule (and
	// in each of Rules, that Rule's): what Refund, Settle and Renew act on.
	rule Rule
	// several is a decision of several Rules: their list, and which of
	// them a Refund or Settle has given back, shared by the Result's copies.
	several *receiptRules
	// of is, in each of Rules, the decision it is a part of (its several),
	// so that a receipt given another decision's part is refused.
	of *receiptRules
}

// receiptRules is a decision of several Rules as its receipt holds it.
type receiptRules struct {
	rules []Rule
	mu    sync.Mutex
	// done marks the Rules a Refund or Settle gave back or settled (or may
	// have: its call's fate is unknown), which a retry leaves alone.
	done []bool
}

// rules is the Rules r decided (nil for a Result made by hand); one is the
// caller's array, which holds a Rule alone without an allocation.
func (r *Result) rules(one *[1]Rule) []Rule {
	switch {
	case r.several != nil:
		return r.several.rules
	case r.rule.Key != "":
		one[0] = r.rule
		return one[:]
	}
	return nil
}

// errNoReceipt refuses a give-back of a Result that names no decision.
var errNoReceipt = fmt.Errorf("%w: the Result is no decision's (Allow, AllowAtMost, Wait or Peek returns one)", ErrInvalidCost)

// receiptSeed keys the receipts' hashes: a receipt is checked only by the
// process that made it.
var receiptSeed = maphash.MakeSeed()

// receipt is the check a Result that took granted units from the state of
// key under row, as layer (0: Allow's), of Limiter l, carries: a
// checksum, not a secret. Never 0, which is a Result that names no state:
// one made by hand (its stamp 0 names no decision, and gives nothing
// back), or a Peek's or a denial's, which is no receipt. It names l's
// prefix, not its Redis: Limiters of one prefix share receipts (one
// batching, one not), also one on another Redis or database, which the
// caller keeps apart (TestReceiptOfAnotherStoreSamePrefix).
func receipt(l *Limiter, key string, row *algorithm, layer, granted int) uint64 {
	var h maphash.Hash
	h.SetSeed(receiptSeed)
	h.WriteString(l.prefix)
	h.WriteByte(0)
	h.WriteString(key)
	return max(h.Sum64()^uint64(row.script)<<8^uint64(layer)^uint64(granted)<<16, 1)
}

// errForeignReceipt refuses a refund or a settle of units taken from
// another state: it would give back units never taken.
var errForeignReceipt = fmt.Errorf("%w: the Result is no receipt of this Limiter's key, algorithm and layer, its Granted was changed, or its Rules hold another decision's part", ErrInvalidCost)

// foreign reports whether r is no receipt of units taken from key's state
// under row, as layer, by Limiter l: another state's, one
// whose Granted changed, or a Peek's or denial's given a Granted. (A
// Result with neither check nor stamp is one made by hand: it names no
// decision and gives nothing back.)
func (r Result) foreign(l *Limiter, key string, row *algorithm, layer int) bool {
	if r.owner == 0 {
		return r.stamp != 0 && r.Granted > 0
	}
	return r.owner != receipt(l, key, row, layer, r.Granted)
}

// errBadReply is returned when Redis answers with something the scripts
// never send (a proxy in the way, or a script of another version).
var errBadReply = errors.New("core: unexpected reply from redis")

// packedMin is the least magnitude of a packed take (see unpack).
const packedMin = 1 << 36

// unpack turns a period FixedWindow's take of n units under one layer,
// packed in two integers (see packed in scripts/driver.lua), into its
// Result: the window's tag times 2^36 plus the units remaining, negative
// when refused, and the wait in µs (until the window ends: ResetAfter, and
// RetryAfter when refused).
func unpack(x int64, w any, n int, pl *plan) (Result, error) {
	wait, ok := w.(int64)
	if !ok || wait <= 0 || n <= 0 || len(pl.layers) != 1 || !pl.layers[0].row.tagged {
		return Result{}, fmt.Errorf("%w: a take's reply %v %v", errBadReply, x, w)
	}
	const tags = 131071
	r := Result{Allowed: x > 0, Granted: n, ResetAfter: time.Duration(wait) * time.Microsecond}
	v := max(x, -x)
	if x < 0 {
		r.Granted, r.RetryAfter = 0, r.ResetAfter
	}
	r.Remaining, r.stamp = int(v%packedMin), v/packedMin
	if r.stamp < 1 || r.stamp > tags || int64(r.Remaining) > pl.capacity() {
		return Result{}, fmt.Errorf("%w: a take's reply %v %v", errBadReply, x, w)
	}
	return r, nil
}

// parseTake turns the reply of one's packed take, rq's, into its Result.
func parseTake(vals []any, out []Result, rq *request) error {
	x, ok := vals[0].(int64)
	if !ok || len(out) != 1 || rq.mode != modeConsume {
		return fmt.Errorf("%w: a take's reply %v", errBadReply, vals)
	}
	r, err := unpack(x, vals[1], rq.n, rq.pl)
	out[0] = r
	return err
}

// parseResults turns a script's reply into Results: the clock, then for
// each request each layer of pl five integers, or, for a period
// FixedWindow's take under one layer, two where they suffice (see packed
// in scripts/driver.lua; taken(i) is the units the i-th request takes, 0
// for one that is not a take). It checks every type and what a Result
// promises (a denial says how long to wait), so a changed script or a
// proxy yields an error, never a panic nor a caller that retries at once
// forever.
func parseResults(v any, out []Result, pl *plan, taken func(i int) int) error {
	vals, ok := v.([]any)
	if !ok || len(vals) < 1+2*len(out) {
		return fmt.Errorf("%w: want %d integers or more, got %T of %d", errBadReply, 1+2*len(out), v, len(vals))
	}
	clock, ok := vals[0].(int64)
	if !ok {
		return fmt.Errorf("%w: element 0 is %T, want int64", errBadReply, vals[0])
	}
	packable := len(pl.layers) == 1 && pl.layers[0].row.tagged
	at := 1
	for i := range out {
		if len(vals) < at+2 {
			return fmt.Errorf("%w: %d integers end within result %d", errBadReply, len(vals), i)
		}
		if x, ok := vals[at].(int64); ok && packable && (x >= packedMin || x <= -packedMin) {
			r, err := unpack(x, vals[at+1], taken(i), pl)
			if err != nil {
				return err
			}
			out[i] = r
			at += 2
			continue
		}
		r, err := readResult(vals, at, i, clock, pl)
		if err != nil {
			return err
		}
		out[i] = r
		at += 5
	}
	if at != len(vals) {
		return fmt.Errorf("%w: %d integers for %d results", errBadReply, len(vals), len(out))
	}
	return nil
}

// readResult reads result i, the five integers at vals[at:], of a reply
// whose clock is clock.
func readResult(vals []any, at, i int, clock int64, pl *plan) (Result, error) {
	if len(vals) < at+5 {
		return Result{}, fmt.Errorf("%w: %d integers end within result %d", errBadReply, len(vals), i)
	}
	var ints [5]int64
	for j := range ints {
		v, ok := vals[at+j].(int64)
		if !ok {
			return Result{}, fmt.Errorf("%w: element %d is %T, want int64", errBadReply, at+j, vals[at+j])
		}
		if v < 0 {
			return Result{}, fmt.Errorf("%w: negative integer in %v", errBadReply, vals[at:at+5])
		}
		ints[j] = v
	}
	r := Result{
		Allowed:    ints[0] > 0,
		Granted:    int(ints[0]),
		Remaining:  int(ints[1]),
		RetryAfter: time.Duration(ints[2]) * time.Microsecond,
		ResetAfter: time.Duration(ints[3]) * time.Microsecond,
		Delay:      time.Duration(ints[4]) * time.Microsecond,
		stamp:      clock,
	}
	if clock > 0 && (len(pl.layers) != 1 || !pl.layers[0].row.tagged) {
		// (A FixedWindow over a Period alone reads the clock only when a
		// window opens: its Results take the Limiter's, all alike.)
		r.At = time.UnixMicro(clock)
	}
	if row := pl.layers[i%len(pl.layers)].row; row.positions && r.Granted > 0 {
		r.pos, r.RetryAfter = ints[2], 0
	} else if row.tagged {
		r.Delay = 0
		// (A plan of several layers reads the clock, which names every
		// layer's window.)
		if len(pl.layers) == 1 {
			r.stamp = ints[4]
		}
	}
	return r, nil
}
