package core

import (
	"context"
	"fmt"
)

// Rule is a key under a Limit: what a decision counts against. Allow,
// AllowAtMost, Peek and Wait take one or more Rules, and decide them
// together, all or nothing: a request is admitted only if every Rule
// admits it, and then counts in every one; refused, it counts in none.
// The Result carries them to Refund, Settle and Renew.
//
// Keys in different Cluster slots are decided one slot after another, in
// the order of the Rules: put the Rule that refuses most first, and a
// global key last. A decision takes at most 8 Rules, all checked before
// any Redis call. Hash tags, slot give-backs and per-Rule states are in
// docs/limits.md#rules-and-cluster-slots.
type Rule struct {
	Key   string
	Limit Limit
}

// For is the Rule of key under l: core.PerSecond(10).For("user:42").
func (l Limit) For(key string) Rule { return Rule{Key: key, Limit: l} }

// Allow decides whether a request of cost n may proceed now, under every
// Rule, and takes n from each if it may. A denial is a Result with Allowed
// false; the error is for invalid arguments and Redis failures (the
// timeout included), when the Result is zero. For Concurrency, the request
// takes one permit whatever n: alone, n must be 1; beside rate Rules, the
// permit is taken with their n units. Give the units back with Refund.
func (l *Limiter) Allow(ctx context.Context, n int, rules ...Rule) (res Result, err error) {
	defer l.observed(ctx, verbAllow, rules, l.observing(), &res, &err)
	if len(rules) == 1 { // the common call, one step shorter
		return l.one(ctx, rules[0].Key, rules[0].Limit, n, modeConsume, Result{})
	}
	return l.several(ctx, rules, nil, n, modeConsume, everyRule)
}

// decideRules makes a decision of mode that takes no receipt.
func (l *Limiter) decideRules(ctx context.Context, n, mode int, rules []Rule) (Result, error) {
	if len(rules) == 1 {
		return l.one(ctx, rules[0].Key, rules[0].Limit, n, mode, Result{})
	}
	return l.several(ctx, rules, nil, n, mode, everyRule)
}

// AllowAtMost takes as many units as fit now, up to n, and reports how
// many in Result.Granted: for batch workers that take what they may. n may
// exceed the Limit's capacity. It is denied, taking nothing, only when not
// even one unit fits; RetryAfter is then the wait for one. It takes one
// rate Rule.
func (l *Limiter) AllowAtMost(ctx context.Context, n int, rules ...Rule) (res Result, err error) {
	defer l.observed(ctx, verbAtMost, rules, l.observing(), &res, &err)
	if len(rules) != 1 || rules[0].Limit.Algorithm == Concurrency {
		return Result{}, fmt.Errorf("%w: AllowAtMost takes from one rate Limit, got %d Rules", ErrInvalidCost, len(rules))
	}
	return l.one(ctx, rules[0].Key, rules[0].Limit, n, modeAtMost, Result{})
}

// Peek reports what Allow of one unit would decide now, without taking
// anything: Remaining is what is left before the request, RetryAfter the
// wait for one unit.
func (l *Limiter) Peek(ctx context.Context, rules ...Rule) (res Result, err error) {
	defer l.observed(ctx, verbPeek, rules, l.observing(), &res, &err)
	return l.decideRules(ctx, 1, modePeek, rules)
}

// Refund gives back what taken (the Result of a call that admitted a
// request) took but did not use: the request failed, or should not count.
// A refund leaves the state the key would have had if the units had never
// been taken (TestGiveBackRestoresSweep); a bucket others took from since,
// exactly that while far enough from full, else less, never more; after a
// Limit change or a Reset, nothing (TestGiveBackModelSweep, docs/limits.md).
// For Concurrency, Refund gives the permit back. Zero a Rule's Result in
// taken.Rules to leave that Rule alone.
//
// Refund or settle a receipt once, on the Limiter that made it. A retry
// after an error gives nothing back twice for a receipt of several Rules
// (TestRetryGivesNothingTwice); for one Rule's, see docs/limits.md#receipts.
func (l *Limiter) Refund(ctx context.Context, taken Result) (err error) {
	var one [1]Rule
	rules := taken.rules(&one)
	defer l.observed(ctx, verbRefund, rules, l.observing(), &taken, &err)
	switch {
	case taken.Granted <= 0:
		return nil
	case rules == nil:
		return errNoReceipt
	case taken.several == nil:
		_, err := l.one(ctx, taken.rule.Key, taken.rule.Limit, taken.Granted, modeRefund, taken)
		return err
	}
	_, err = l.several(ctx, rules, &taken, 0, modeRefund, everyRule)
	return err
}

// Settle corrects what taken (the Result of a call that admitted a
// request) took to what the request really used, once that is known (the
// tokens of a completion, the bytes streamed). It gives back the units not
// used, as Refund does, or takes the excess even beyond what is left, as a
// debt that later requests wait out at the Limit's rate, and returns what
// the keys have left after the correction. used may be 0 (Refund); used <
// 0 is ErrInvalidCost. A taken that took nothing (a Peek's, a denial's)
// charges all of used. Concurrency permits have no cost: Settle leaves
// them alone. Refund's receipt rules hold. Debts are in
// docs/limits.md#settle-debts.
func (l *Limiter) Settle(ctx context.Context, taken Result, used int) (res Result, err error) {
	var one [1]Rule
	rules := taken.rules(&one)
	defer l.observed(ctx, verbSettle, rules, l.observing(), &res, &err)
	switch {
	case rules == nil:
		return Result{}, errNoReceipt
	case taken.several != nil:
		return l.several(ctx, rules, &taken, used, modeCharge, rateRules)
	}
	limit := taken.rule.Limit
	n, mode, err := correction(max(taken.Granted, 0), used)
	if err != nil {
		return Result{}, err
	}
	if n == 0 || limit.Algorithm == Concurrency || taken.Granted <= 0 && mode == modeRefund {
		return Result{Allowed: true, Granted: taken.Granted, Remaining: taken.Remaining, ResetAfter: taken.ResetAfter, At: taken.At}, nil
	}
	res, err = l.one(ctx, taken.rule.Key, limit, n, mode, taken)
	if err != nil {
		return Result{}, err
	}
	res.Allowed, res.Granted, res.RetryAfter = true, used, 0
	return res, nil
}

// correction is what a settle of used units does to a receipt that took
// granted (>= 0): n units of modeRefund or modeCharge.
func correction(granted, used int) (n, mode int, err error) {
	if used < 0 {
		return 0, 0, fmt.Errorf("%w: used = %d, want >= 0", ErrInvalidCost, used)
	}
	if used > granted {
		return used - granted, modeCharge, nil
	}
	return granted - used, modeRefund, nil
}

// Renew keeps the Concurrency permits that taken holds for another
// Period; the other Rules are left alone. A request in flight for longer
// than Period renews its permit, say every half Period, or the permit
// lapses and counts no more. A permit that had lapsed (a renewal failed or
// came late) is taken again, atomically, when the key has room for it, as
// a new request would take it. Allowed reports that taken's request holds
// its permits for another Period; false means a permit had lapsed and its
// key is full: the request holds none there, so its caller should stop it
// (httplimit cancels its context). A renewal after the permit was given
// back keeps nothing (TestRenewAfterReleaseTakesNothing).
func (l *Limiter) Renew(ctx context.Context, taken Result) (res Result, err error) {
	var one [1]Rule
	rules := taken.rules(&one)
	defer l.observed(ctx, verbRenew, rules, l.observing(), &res, &err)
	switch {
	case rules == nil:
		return Result{}, errNoReceipt
	case taken.several != nil:
		return l.several(ctx, rules, &taken, 1, modeRenew, permitRules)
	case taken.rule.Limit.Algorithm != Concurrency:
		return Result{}, errNotConcurrency
	case taken.Granted <= 0:
		return Result{}, nil // a denial's or a Peek's: it holds no permit to keep
	}
	return l.one(ctx, taken.rule.Key, taken.rule.Limit, 1, modeRenew, taken)
}

var errNotConcurrency = fmt.Errorf("%w: Renew keeps Concurrency permits only", ErrInvalidLimit)

// Which Rules a verb acts on.
func everyRule(Limit) bool   { return true }
func rateRules(l Limit) bool { return l.Algorithm != Concurrency }
func permitRules(l Limit) bool {
	return l.Algorithm == Concurrency
}

// several decides a request under more than one Rule (or a receipt of
// several), slot by slot (see Rule). For Settle (modeCharge), n is the
// units used; taken is the receipt of Refund, Settle and Renew.
func (l *Limiter) several(ctx context.Context, rules []Rule, taken *Result, n, mode int, want func(Limit) bool) (Result, error) {
	if len(rules) == 0 || len(rules) > maxRules {
		return Result{}, fmt.Errorf("%w: a decision takes 1 to %d Rules, got %d", ErrInvalidLimit, maxRules, len(rules))
	}
	if err := validRules(rules, n, mode); err != nil {
		return Result{}, err
	}
	parts, none, err := receiptParts(taken, len(rules), mode)
	if none || err != nil {
		return Result{}, err
	}
	used, verb := n, mode
	if mode == modeCharge {
		if n, mode, err = correction(max(grantedOf(rules, parts), 0), used); err != nil {
			return Result{}, err
		}
	}
	s := split(rules, l.group)
	out := make([]Result, len(rules))
	ask, given := parts, (*receiptRules)(nil)
	if parts != nil && (mode == modeRefund || mode == modeCharge) && taken.several != nil {
		given = taken.several
		given.mu.Lock()
		defer given.mu.Unlock()
		ask = given.pending(parts)
	}
	if verb != modeCharge || n > 0 {
		for g := range s.groups {
			err := l.decideSlot(ctx, s, g, rules, ask, n, mode, want, out)
			if given != nil && (err == nil || mayHaveRun(err)) {
				given.mark(s.groups[g], rules, ask, want)
			}
			if err == nil && (mode != modeConsume || s.admitted(g, out)) {
				continue
			}
			if mode == modeConsume {
				// This slot refused or failed: the earlier ones give back
				// what they took, so that the request counts nowhere.
				l.giveBack(ctx, s, g, rules, out)
			}
			if err != nil {
				return Result{}, err
			}
			break
		}
	}
	res := s.merge(out, parts, n, used, verb)
	if verb == modeConsume || verb == modePeek {
		res.several = &receiptRules{rules: append([]Rule(nil), rules...), done: make([]bool, len(rules))}
		for i := range out {
			out[i].rule, out[i].of = rules[i], res.several
		}
	}
	return res, nil
}

// receiptParts is what taken (nil for a decision) took under each of its
// nrules Rules; none reports a receipt that leaves nothing to do.
func receiptParts(taken *Result, nrules, mode int) (parts []Result, none bool, err error) {
	switch {
	case taken == nil:
		return nil, false, nil
	case taken.Granted <= 0 && mode == modeCharge:
		return nil, false, nil // took nothing: Settle charges all of used to every Rule
	case taken.Granted <= 0:
		return nil, true, nil // nothing to give back or keep
	case len(taken.Rules) != nrules:
		return nil, false, fmt.Errorf("%w: a receipt of %d Rules for %d Rules", ErrInvalidCost, len(taken.Rules), nrules)
	}
	for i, p := range taken.Rules {
		// Each part checks its own state; this, that it is this decision's
		// (TestForgedRulePartOverGives: another decision's part, of a
		// larger Granted, gave back 4 units never taken).
		if p.Granted > 0 && p.of != taken.several {
			return nil, false, fmt.Errorf("rule %d: %w", i, errForeignReceipt)
		}
	}
	return taken.Rules, false, nil
}

// pending is parts without the Rules given back already, which a retry
// leaves alone (zero Results, as a caller's zeroed Rule).
func (g *receiptRules) pending(parts []Result) []Result {
	ask := parts
	for i, done := range g.done {
		if done {
			if &ask[0] == &parts[0] {
				ask = append([]Result(nil), parts...)
			}
			ask[i] = Result{}
		}
	}
	return ask
}

// mark records that the Rules at pos that a call asked of (want, and that
// took units) were given back or settled.
func (g *receiptRules) mark(pos []int, rules []Rule, ask []Result, want func(Limit) bool) {
	for _, i := range pos {
		g.done[i] = g.done[i] || want(rules[i].Limit) && ask[i].Granted > 0
	}
}

// validRules refuses, before any Redis call, Rules that one slot's call
// would refuse after another slot's took (TestRulesValidatedBeforeAnyCall):
// an empty key, an invalid Limit, a cost above a rate Rule's capacity.
func validRules(rules []Rule, n, mode int) error {
	for i, r := range rules {
		if r.Key == "" {
			return fmt.Errorf("rule %d: %w", i, ErrEmptyKey)
		}
		p, err := r.Limit.params()
		if err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
		if (mode == modeConsume || mode == modePeek) && r.Limit.Algorithm != Concurrency && (n <= 0 || int64(n) > p.capacity) {
			return fmt.Errorf("%w: n = %d, want 1 <= n <= %d (the capacity of rule %d)", ErrInvalidCost, n, p.capacity, i)
		}
	}
	return nil
}
