package core

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// request is one decision as every entry point (Allow, AllowAtMost, Peek,
// Refund, Settle, Renew, Wait) asks for it, on the Rules of one slot.
type request struct {
	key  string
	pl   *plan
	n    int
	mode int
	// taken is the Redis TIME of the decision a REFUND gives back for;
	// id names a Concurrency permit (a fresh one is drawn for a take).
	taken, id int64
	// pos are a REFUND's take's positions, per layer (see Result.pos).
	pos [maxRules]int64
	// tags, when the layers are Rules of several keys (in one slot), are
	// their keys' escaped tags, one per layer; nil when all are key's.
	tags []string
}

// keyBufs recycles the KEYS slice of a call: go-redis copies it into the
// command, so it is free again once the call returns.
var keyBufs = sync.Pool{New: func() any { return new([2 * maxRules]string) }}

// decide is the one path every decision takes, in five stages:
//
//  1. admissible: the request can be decided at all (else ErrInvalidCost);
//  2. answerLocally: a lease or the deny cache answers without Redis;
//  3. ask: through the breaker, within the timeout, in a batch of
//     concurrent callers or alone, Redis decides;
//  4. a Redis fault goes to the local fallback, or back to the caller
//     wrapping ErrUnavailable (see redisFault);
//  5. remember: the deny cache and leases learn what Redis said.
//
// out receives one Result per layer of rq.pl.
func (l *Limiter) decide(ctx context.Context, rq *request, out []Result) error {
	if err := l.admissible(rq); err != nil {
		return err
	}
	buf := keyBufs.Get().(*[2 * maxRules]string)
	defer func() {
		*buf = [2 * maxRules]string{}
		keyBufs.Put(buf)
	}()
	tag := escapeTag(rq.key)
	keys := rq.pl.keys(buf[:0], l.prefix, tag, rq.tags)
	sent := time.Now()
	if done, err := l.answerLocally(ctx, rq, tag, keys, sent, out); done {
		return l.dated(out, classified(ctx, err))
	}
	err := l.ask(ctx, rq, tag, keys, sent, out)
	if err != nil {
		if !redisFault(ctx, err) {
			return classified(ctx, err)
		}
		if l.fallback != nil && rq.mode <= modeAtMost && rq.mode != modePeek {
			l.degraded.note(l, degradedFallback, err)
			return l.dated(out, classified(ctx, l.fallback.decide(keys, rq, time.Now(), out)))
		}
		l.degraded.note(l, degradedError, err)
		return classified(ctx, err)
	}
	l.remember(rq, keys, sent, time.Now(), out)
	return l.dated(out, nil)
}

// dated gives the Results of a decision that Redis' clock did not date
// the Limiter's clock (see Result.At), and returns err; a failure's
// Results are left alone.
func (l *Limiter) dated(out []Result, err error) error {
	if err != nil {
		return err
	}
	var now time.Time
	for i := range out {
		if out[i].At.IsZero() {
			if now.IsZero() {
				now = l.clock()
			}
			out[i].At = now
		}
	}
	return nil
}

// admissible checks what no state can change: the key, the cost against
// every layer's capacity, and what the mode asks of the algorithms.
func (l *Limiter) admissible(rq *request) error {
	if rq.key == "" {
		return ErrEmptyKey
	}
	if l.closed.Load() {
		return ErrClosed
	}
	pl := rq.pl
	switch {
	case rq.mode == modeAtMost:
		if len(pl.layers) > 1 || pl.ids {
			return fmt.Errorf("%w: AllowAtMost takes from one rate Limit", ErrInvalidCost)
		}
		if rq.n > 0 {
			rq.n = int(min(int64(rq.n), pl.capacity())) // more never fits
		}
	case rq.mode == modeCharge && rq.n > 0:
		rq.n = int(min(int64(rq.n), pl.mostCharged())) // more leaves the state as deep in debt
	}
	for _, ly := range pl.layers {
		most := ly.p.capacity
		switch {
		case ly.row.ids && len(pl.layers) > 1:
			continue // one permit per request, whatever the cost the rate layers take
		case ly.row.ids && rq.mode != modeCharge:
			most = 1 // a Concurrency Limit alone: Allow(n > 1) would read as n permits
		case rq.mode == modeCharge:
			most = maxCharge // each state caps what it takes (see mostCharged)
		case rq.mode == modeRefund:
			// Units taken under another Limit may be more than this one's
			// capacity: the state caps what it gives back.
			most = maxRate
			if ly.row.burst {
				most = min(most, maxScaled/ly.p.period)
			}
		}
		if rq.n <= 0 || int64(rq.n) > most {
			what := fmt.Sprintf("the %s capacity", ly.limit.Algorithm)
			if len(pl.layers) > 1 {
				what = fmt.Sprintf("the capacity of rule %d", ly.rule)
			}
			if rq.mode == modeCharge || rq.mode == modeRefund {
				what = "the largest charge or refund"
			}
			return fmt.Errorf("%w: n = %d, want 1 <= n <= %d (%s)", ErrInvalidCost, rq.n, most, what)
		}
	}
	if pl.ids && rq.id == 0 && (rq.mode == modeConsume || rq.mode == modePeek) {
		rq.id = permitID()
	}
	return nil
}

// answerLocally answers from this instance's lease or deny cache, and
// reports whether it did. A refund or a charge makes what they remember
// stale: it is forgotten.
func (l *Limiter) answerLocally(ctx context.Context, rq *request, tag string, keys []string, sent time.Time, out []Result) (bool, error) {
	switch rq.mode {
	case modeConsume:
		if l.leases != nil && len(rq.pl.layers) == 1 && rq.tags == nil && l.leases.capFor(rq.pl) >= 2 {
			res, done, err := l.leases.decide(ctx, l, rq.pl, tag, keys, rq.n)
			if done {
				out[0] = res
				return true, err
			}
		}
	case modeRefund, modeCharge, modeRenew:
		if l.fallback != nil && l.fallback.settle(keys, rq, sent, out) {
			return true, nil // a permit the fallback handed out
		}
		if rq.mode == modeRenew {
			return false, nil
		}
		k := 0
		for _, ly := range rq.pl.layers { // each layer's first key names its state here
			if l.leases != nil {
				l.leases.refunded(keys[k])
			}
			if l.denied != nil {
				l.denied.forget(keys[k])
			}
			k += len(ly.row.suffixes)
		}
		return false, nil
	}
	// The deny cache knows a key's states under a plan: not a decision of
	// several keys, whose other keys it would not tell apart.
	if l.denied != nil && (rq.mode == modeConsume || rq.mode == modeAtMost) && !rq.pl.ids && rq.tags == nil {
		need := rq.n // the units a denial says did not fit
		if rq.mode == modeAtMost {
			need = 1
		}
		if l.denied.get(keys[0], rq.pl, need, sent, out) {
			return true, nil
		}
	}
	return false, nil
}

// remember tells the deny cache what Redis decided, and checks that a
// denial says how long to wait: a Result that did not would have its
// callers retry at once, forever.
func (l *Limiter) remember(rq *request, keys []string, sent, received time.Time, out []Result) {
	if rq.mode > modeAtMost {
		return
	}
	if l.fallback != nil && rq.mode != modePeek {
		l.fallback.learn(keys, rq.pl, received, out)
	}
	allowed := true
	for i := range out {
		if rq.mode == modePeek {
			out[i].Granted = 0
		}
		if rq.pl.layers[i].row.ids {
			out[i].stamp = rq.id
		}
		allowed = allowed && out[i].Allowed
	}
	if len(out) > 1 && !allowed {
		for i := range out {
			out[i].Granted = 0
		}
	}
	if l.denied == nil || rq.pl.ids || rq.tags != nil {
		return
	}
	need := rq.n
	if rq.mode == modeAtMost {
		need = 1
	}
	if allowed {
		// What the key holds changed: an earlier denial's wait is stale.
		if rq.mode != modePeek {
			l.denied.forget(keys[0])
		}
		return
	}
	l.denied.put(keys[0], rq.pl, need, sent, received, out)
}

// ask makes one decision in Redis, through the circuit breaker, within
// the Limiter's timeout.
func (l *Limiter) ask(ctx context.Context, rq *request, tag string, keys []string, sent time.Time, out []Result) error {
	if !l.breaker.allow(sent) {
		return ErrCircuitOpen
	}
	bctx, cancel := l.bound(ctx)
	var err error
	if l.batch != nil {
		err = l.batch.decide(bctx, l, rq, l.group.of(tag), keys, out)
	} else {
		err = l.runOne(bctx, rq, keys, out)
	}
	cancel()
	if err == nil {
		err = checkWaits(rq, out)
	}
	l.breaker.record(ctx, err, time.Now())
	l.health.tick(l, sent)
	return err
}

// checkWaits refuses a denial that does not say how long to wait.
func checkWaits(rq *request, out []Result) error {
	if rq.mode > modeAtMost {
		return nil
	}
	for i, r := range out {
		if !r.Allowed && r.RetryAfter <= 0 {
			return fmt.Errorf("%w: layer %d denied without a wait", errBadReply, i)
		}
	}
	return nil
}

// args is the ARGV of rq alone, and whether it is one's (a plan of one
// layer) rather than run's.
func (rq *request) args(now time.Time) ([]any, bool) {
	pl := rq.pl
	if rq.mode == modeConsume && rq.n == 1 && pl.one != nil {
		return pl.one, true
	}
	run, one := pl.argv(now)
	if one != nil {
		return rq.appendTail(append(append(make([]any, 0, len(one)+3), one...), rq.n*8+rq.mode)), true
	}
	args := append(append(make([]any, 0, len(run)+3), run...), rq.n*8+rq.mode)
	return rq.appendTail(args), false
}

// appendTail appends the stamp, positions and permit id rq carries, if
// any.
func (rq *request) appendTail(args []any) []any {
	if rq.mode == modeRefund || rq.mode == modeRenew {
		args = append(args, rq.taken)
	}
	if rq.mode == modeRefund {
		for j, ly := range rq.pl.layers {
			if ly.row.positions {
				args = append(args, rq.pos[j])
			}
		}
	}
	if rq.pl.ids {
		args = append(args, rq.id)
	}
	return args
}

// runOne makes one decision in a call of its own.
func (l *Limiter) runOne(ctx context.Context, rq *request, keys []string, out []Result) error {
	args, single := rq.args(l.clock())
	v, err := l.call(ctx, rq.pl, keys, args, single, rq.mode == modeRefund)
	if err != nil {
		return err
	}
	if vals, ok := v.([]any); ok && len(vals) == 2 && single {
		return parseTake(vals, out, rq)
	}
	return parseResults(v, out, rq.pl, func(int) int { return rq.takes() })
}

// takes is the units rq takes, 0 if it is no take.
func (rq *request) takes() int {
	if rq.mode != modeConsume {
		return 0
	}
	return rq.n
}
