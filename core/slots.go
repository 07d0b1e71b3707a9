package core

import (
	"context"
	"fmt"
	"log/slog"
)

// slots is the Rules of a decision split by the Redis node that must run
// them: groups[g] holds the indices of one slot's Rules, in order; tags
// and index are the Rules' hash tags and their number among their key's
// Rules; asked marks the Rules Redis decided.
type slots struct {
	groups [][]int
	tags   []string
	index  []int
	asked  []bool
}

func split(rules []Rule, g grouping) *slots {
	s := &slots{tags: make([]string, len(rules)), index: make([]int, len(rules)), asked: make([]bool, len(rules))}
	ids := make([]groupID, 0, len(rules))
	for i, r := range rules {
		s.tags[i] = escapeTag(r.Key)
		for j := range i {
			if rules[j].Key == r.Key {
				s.index[i]++
			}
		}
		id := g.of(s.tags[i])
		k := 0
		for k < len(ids) && ids[k] != id {
			k++
		}
		if k == len(ids) {
			ids = append(ids, id)
			s.groups = append(s.groups, nil)
		}
		s.groups[k] = append(s.groups[k], i)
	}
	return s
}

// decideSlot decides the Rules of group g that want reports true for (and
// that took units, for a receipt's verbs) in one script call.
func (l *Limiter) decideSlot(ctx context.Context, s *slots, g int, rules []Rule, parts []Result, n, mode int, want func(Limit) bool, out []Result) error {
	var limits [maxRules]Limit
	var index, pos [maxRules]int
	var tags [maxRules]string
	rq := request{n: n, mode: mode}
	k, sameKey := 0, true
	for _, i := range s.groups[g] {
		lim := rules[i].Limit
		if !want(lim) || parts != nil && parts[i].Granted <= 0 {
			continue
		}
		if parts != nil {
			if (mode == modeRefund || mode == modeCharge || mode == modeRenew) && lim.Algorithm.known() && parts[i].foreign(l, rules[i].Key, lim.row(), s.index[i]) {
				return fmt.Errorf("rule %d: %w", i, errForeignReceipt)
			}
			if lim.Algorithm == Concurrency {
				rq.id = parts[i].stamp
			} else {
				rq.taken, rq.pos[k] = parts[i].stamp, parts[i].pos
			}
		}
		if k == 0 {
			rq.key = rules[i].Key
		}
		sameKey = sameKey && rules[i].Key == rq.key
		limits[k], index[k], pos[k], tags[k] = lim, s.index[i], i, s.tags[i]
		k++
	}
	if k == 0 {
		return nil // nothing to give back, settle or keep here
	}
	rq.n = slotCost(n, mode, limits[:k], rules, parts, pos[:k])
	pl, err := l.plans.ofRules(limits[:k], index[:k], pos[:k])
	if err != nil {
		return err
	}
	rq.pl = pl
	if !sameKey {
		rq.tags = tags[:k]
	}
	var sub [maxRules]Result
	if err := l.decide(ctx, &rq, sub[:k]); err != nil {
		return err
	}
	for j, i := range pos[:k] {
		out[i], s.asked[i] = sub[j], true
		if sub[j].Granted > 0 && mode == modeConsume {
			out[i].owner = receipt(l, rules[i].Key, limits[j].row(), index[j], sub[j].Granted)
		}
	}
	return nil
}

// slotCost is the cost a slot's script call takes, of a request of cost
// n: for a Refund of n == 0, all its Rules (at pos) took.
func slotCost(n, mode int, limits []Limit, rules []Rule, parts []Result, pos []int) int {
	permits := true
	for _, lim := range limits {
		permits = permits && lim.Algorithm == Concurrency
	}
	switch {
	case mode == modeRefund && n == 0:
		return grantedOf(rules, parts, pos...)
	case permits && (mode == modeConsume || mode == modePeek):
		// A slot of permits alone: one per request, whatever the cost the
		// rate Rules of other slots take (as beside them in one slot).
		return 1
	}
	return n
}

// admitted reports whether every Rule of group g admitted its request.
func (s *slots) admitted(g int, out []Result) bool {
	for _, i := range s.groups[g] {
		if !out[i].Allowed {
			return false
		}
	}
	return true
}

// giveBack refunds what the groups before g took. It runs even when ctx
// has ended, under the Limiter's own timeout; a refund that fails leaves
// its units taken, on the strict side, until their window ends or their
// bucket refills them.
func (l *Limiter) giveBack(ctx context.Context, s *slots, g int, rules []Rule, out []Result) {
	ctx = context.WithoutCancel(ctx)
	for h := range g {
		if err := l.decideSlot(ctx, s, h, rules, out, 0, modeRefund, everyRule, make([]Result, len(out))); err != nil {
			if log := l.log(); log != nil {
				log.LogAttrs(ctx, slog.LevelWarn, "redlimit: a refused request's units in another slot were not given back", slog.Any("error", err))
			}
		}
		for _, i := range s.groups[h] {
			out[i].Granted, out[i].owner = 0, 0
		}
	}
}

// grantedOf is the n the rate Rules of parts took (a Concurrency Rule's
// Granted is its one permit, whatever the cost), or 1 for permits alone;
// of the Rules at pos, or of all.
func grantedOf(rules []Rule, parts []Result, pos ...int) int {
	if pos == nil {
		for i := range parts {
			pos = append(pos, i)
		}
	}
	n := 0
	for _, i := range pos {
		if parts[i].Granted <= 0 {
			continue
		}
		if rules[i].Limit.Algorithm == Concurrency {
			n = max(n, 1)
			continue
		}
		return parts[i].Granted
	}
	return n
}

// merge is the Result of a decision under several Rules, from theirs: the
// strictest Remaining, RetryAfter, ResetAfter and Delay of the Rules
// asked. verb is the entry point's mode (modeCharge for Settle), used the
// units Settle reports, parts the receipt.
func (s *slots) merge(out, parts []Result, n, used, verb int) Result {
	res := Result{Allowed: true, Remaining: -1, Rules: out}
	for i := range out {
		if !s.asked[i] {
			if verb == modeCharge && parts != nil {
				out[i] = parts[i] // a Rule Settle leaves alone keeps its receipt
			} else if verb == modeConsume || verb == modePeek {
				res.Allowed = false // a later slot, not asked: an earlier one refused
			}
			continue
		}
		if verb == modeCharge {
			out[i].Allowed, out[i].Granted, out[i].RetryAfter = parts == nil || parts[i].Allowed, used, 0
			if parts != nil {
				out[i].Granted = parts[i].Granted
			}
		}
		res.Allowed = res.Allowed && out[i].Allowed
		if res.Remaining < 0 || out[i].Remaining < res.Remaining {
			res.Remaining = out[i].Remaining
		}
		if !out[i].Allowed {
			res.RetryAfter = max(res.RetryAfter, out[i].RetryAfter)
		}
		res.ResetAfter = max(res.ResetAfter, out[i].ResetAfter)
		res.Delay = max(res.Delay, out[i].Delay)
		res.Cached = res.Cached || out[i].Cached
		res.Fallback = res.Fallback || out[i].Fallback
		res.Leased = res.Leased || out[i].Leased
		if out[i].At.After(res.At) {
			res.At = out[i].At // the last slot's, asked last
		}
	}
	res.Remaining = max(res.Remaining, 0)
	switch {
	case verb == modeCharge:
		res.Allowed, res.Granted, res.RetryAfter = true, used, 0
	case !res.Allowed:
		res.Granted, res.Delay = 0, 0
	case verb == modeConsume:
		res.Granted = n
	case verb == modeRenew:
		res.Granted = 1
	}
	return res
}
