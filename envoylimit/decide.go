package envoylimit

import (
	"context"
	"errors"
	"fmt"
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/core"
)

// Bounds on what one request may ask, so that a hostile client costs a
// bounded amount of work and Redis.
const (
	maxDescriptors = 64 // per request
	maxEntries     = 32 // per descriptor
	maxRules       = 8  // per call of the Limiter (core's bound)
)

// item is a descriptor of a request that matched a rate_limit.
type item struct {
	desc   int // its index among the request's descriptors
	lim    *limit
	rule   core.Rule
	hits   uint64 // its hits_addend, for the metrics
	cost   uint64 // what it is decided at: its hits, and those of the items counted with it
	series *counters
	how    outcome
	res    core.Result // when how is decided
	same   int         // the item it is counted with (the same Rule), or -1
}

type outcome uint8

const (
	unasked outcome = iota // another descriptor refused the request before it was asked
	decided                // res is what the Limiter said
	refused                // refused without asking: requests_per_unit 0, or hits above the limit
	failed                 // Redis failed, and the request is refused
)

// ShouldRateLimit decides every descriptor of the request together, all or
// nothing. The request is admitted only if each descriptor's limit admits
// it, and then counts in every one; refused, it counts in none, except for
// an overdraft descriptor that refused it, which is charged its hits
// (docs/envoy.md).
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, items, err := s.plan(req)
	if err != nil {
		s.metrics.failed("service_error")
		return nil, err
	}
	admitted := true
	if len(items) > 0 {
		if admitted, err = s.decide(ctx, items); err != nil {
			if admitted, err = s.fault(ctx, items, err); err != nil {
				return nil, err
			}
		}
	}
	s.answer(resp, items, admitted)
	return resp, nil
}

// decide asks the Limiter: the descriptors refused without asking, then
// those of hits_addend 0 (a look, which takes nothing), then the others, in
// one call per hits_addend (at most maxRules Rules each), giving back what
// earlier calls took when a later one refuses. Overdraft descriptors are
// asked next, each alone, and shadow-mode ones last, for an admitted
// request only.
func (s *Server) decide(ctx context.Context, items []item) (bool, error) {
	merge(items)
	c, ok := group(items)
	if !ok {
		return false, nil
	}
	var tx txn
	if ok, err := tx.run(ctx, s.limiter, items, c.peek); !ok || err != nil {
		return ok, err
	}
	for _, g := range c.take {
		if ok, err := tx.run(ctx, s.limiter, items, g); !ok || err != nil {
			tx.undo(ctx, s.limiter, items)
			return ok, err
		}
	}
	admitted := true
	for _, i := range c.owe {
		fitted, err := s.owe(ctx, &items[i])
		if err != nil {
			tx.undo(ctx, s.limiter, items)
			return false, err
		}
		admitted = admitted && (fitted || items[i].lim.shadow)
	}
	if !admitted {
		tx.undo(ctx, s.limiter, items)
		return false, nil
	}
	for i := range items {
		if it := &items[i]; it.lim.shadow && it.same < 0 && it.how == unasked {
			var shadow txn
			_, _ = shadow.run(ctx, s.limiter, items, []int{i}) // a fault leaves it unasked
		}
	}
	return true, nil
}

// calls are the Limiter calls of a request's items, by index.
type calls struct {
	peek []int   // hits_addend 0
	take [][]int // by hits_addend
	owe  []int   // overdraft, each alone
}

// group sorts the items into calls; false when one of them refuses the
// request without asking.
func group(items []item) (calls, bool) {
	var c calls
	for i := range items {
		it := &items[i]
		switch {
		case it.same >= 0:
		case it.lim.overdraft && it.cost > 0 && it.lim.rule.Rate > 0:
			c.owe = append(c.owe, i)
		case it.lim.rule.Rate == 0 || it.cost > uint64(it.lim.rule.Capacity()):
			it.how = refused
			if !it.lim.shadow {
				return c, false
			}
		case it.lim.shadow:
		case it.cost == 0:
			c.peek = append(c.peek, i)
		default:
			g := slices.IndexFunc(c.take, func(g []int) bool { return items[g[0]].cost == it.cost })
			if g < 0 {
				c.take = append(c.take, nil)
				g = len(c.take) - 1
			}
			c.take[g] = append(c.take[g], i)
		}
	}
	return c, true
}

// maxOwed bounds what one request charges a key: core charges up to 2^49
// units at once, and a debt deeper than a window's largest Rate (2^40)
// refuses no longer.
const maxOwed = 1 << 40

// owe takes an overdraft descriptor's hits when they fit, and charges them
// anyway when they do not (core's Settle of nothing taken): the key owes
// them, and refuses until its rate has paid them back. The charge is made
// even if the caller has gone: the cost was incurred. It reports whether
// they fitted.
func (s *Server) owe(ctx context.Context, it *item) (bool, error) {
	n := int(min(it.cost, maxOwed))
	var res core.Result // a denial's or a Peek's: Settle charges all of n
	var err error
	if it.cost <= uint64(it.lim.rule.Capacity()) {
		res, err = s.limiter.Allow(ctx, n, it.rule)
	} else {
		res, err = s.limiter.Peek(ctx, it.rule)
	}
	if err != nil {
		return false, err
	}
	if res.Allowed && res.Granted > 0 {
		it.how, it.res = decided, res
		return true, nil
	}
	owed, err := s.limiter.Settle(context.WithoutCancel(ctx), res, n)
	if err != nil {
		return false, err
	}
	it.how = decided
	// A refusal, with the wait until the key is whole again (never none:
	// answer reads a refusal without a wait as a call not made).
	it.res = core.Result{RetryAfter: owed.ResetAfter}
	if it.res.RetryAfter <= 0 {
		it.res.RetryAfter = it.lim.window
	}
	return false, nil
}

// merge counts descriptors that name the same Rule as one, with their
// hits added, as envoyproxy/ratelimit counts each of them on one key.
func merge(items []item) {
	first := make(map[core.Rule]int, len(items))
	for i := range items {
		it := &items[i]
		it.same, it.cost = -1, it.hits
		if j, ok := first[it.rule]; ok && items[j].lim.shadow == it.lim.shadow {
			it.same = j
			if items[j].cost += it.hits; items[j].cost < it.hits {
				items[j].cost = 1<<64 - 1 // saturated: above any limit
			}
			continue
		}
		first[it.rule] = i
	}
}

// txn is what a request took so far, to give back if it is refused.
type txn struct {
	took []core.Result
	by   [][]int // the items of each call
}

// run decides the items idx (of one hits_addend) in calls of at most
// maxRules Rules; false when one of them refused.
func (t *txn) run(ctx context.Context, l *core.Limiter, items []item, idx []int) (bool, error) {
	for len(idx) > 0 {
		part := idx[:min(len(idx), maxRules)]
		idx = idx[len(part):]
		rules := make([]core.Rule, len(part))
		for j, i := range part {
			rules[j] = items[i].rule
		}
		var res core.Result
		var err error
		if n := items[part[0]].cost; n == 0 {
			res, err = l.Peek(ctx, rules...)
		} else {
			res, err = l.Allow(ctx, int(n), rules...)
		}
		if err != nil {
			return false, err
		}
		for j, i := range part {
			items[i].how, items[i].res = decided, res
			if len(part) > 1 {
				items[i].res = res.Rules[j]
			}
		}
		if !res.Allowed {
			return false, nil
		}
		if res.Granted > 0 {
			t.took, t.by = append(t.took, res), append(t.by, part)
		}
	}
	return true, nil
}

// undo gives back what the request took, even if its caller has gone:
// a refused request counts in none of its descriptors. Their statuses then
// say what they have left without it.
func (t *txn) undo(ctx context.Context, l *core.Limiter, items []item) {
	ctx = context.WithoutCancel(ctx)
	for c := range t.took {
		if l.Refund(ctx, t.took[c]) != nil {
			continue // the windows' units lapse with them
		}
		for _, i := range t.by[c] {
			res := &items[i].res
			res.Remaining = min(res.Remaining+res.Granted, items[i].lim.rule.Capacity())
			res.Granted = 0
		}
	}
}

// fault answers a request the Limiter could not decide: refused
// (OVER_LIMIT), or, with Config.EnvoyFailureMode, the gRPC status
// UNAVAILABLE, for Envoy's failure_mode_deny to decide.
func (s *Server) fault(ctx context.Context, items []item, err error) (bool, error) {
	switch {
	case ctx.Err() != nil:
		return false, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, core.ErrUnavailable) || errors.Is(err, core.ErrClosed):
		s.metrics.failed("redis_error")
		if s.envoyFailureMode || errors.Is(err, core.ErrClosed) {
			return false, status.Error(codes.Unavailable, err.Error())
		}
		for i := range items {
			if it := &items[i]; !it.lim.shadow && it.how != decided {
				it.how = failed
			}
		}
		return false, nil
	default:
		s.metrics.failed("service_error")
		return false, status.Error(codes.Internal, fmt.Sprintf("envoylimit: %v", err))
	}
}
