package httplimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/observe"
)

// Observer is told of every decision, with all a Decision carries. It must
// be safe for concurrent use and fast: it runs on the request path. The
// metrics packages implement it.
type Observer interface {
	Observe(d Decision)
}

// callContext is ctx for the Limiter's calls of a decision: marked as the
// Policy's while the Limiter has observers, which then leave them to the
// Policy's Observers (see core.Limiter.Observe).
func (p *Policy) callContext(ctx context.Context) context.Context {
	if observe.Observed(p.limiter) {
		return observe.ByPolicy(ctx, p.name)
	}
	return ctx
}

// observe tells p's Observers of d.
func (p *Policy) observe(d *Decision) {
	d.Degraded = degraded(d)
	for _, o := range p.observers {
		o.Observe(*d)
	}
}

// checkObservers refuses a nil Observer, which would fail every decision.
func checkObservers(obs []Observer) error {
	for i, o := range obs {
		if o == nil {
			return fmt.Errorf("httplimit: Config.Observers[%d] is nil", i)
		}
	}
	return nil
}

func init() {
	observe.SetDecisions(observe.Decisions[Decision, core.Observation]{
		Of:        decisionOf,
		Context:   func(d Decision) context.Context { return d.context() },
		NearLimit: func(d Decision) bool { return d.nearLimit() },
	})
}

// decisionOf is observe.Decisions.Of: the Decision of a call a core.Limiter
// made outside any Policy (see core.Limiter.Observe). Policy is the
// caller's Name, Key the first Rule's, Outcome allowed or denied (a Wait's
// deadline too near included), failed_closed when the call failed,
// canceled when ctx ended first; Latency is the call's, without a Wait's
// sleeps. It reports false for a call that decides no admission: Peek,
// Refund, Settle, Renew.
func decisionOf(ctx context.Context, o core.Observation) (Decision, bool) {
	switch o.Verb {
	case "allow", "allow_at_most", "wait":
	default:
		return Decision{}, false
	}
	d := Decision{Policy: o.Name, Result: o.Result, Err: o.Err, Latency: o.Latency, ctx: ctx}
	if len(o.Rules) > 0 {
		d.Key, d.Limit = o.Rules[0].Key, o.Rules[0].Limit
		d.capacity = d.Limit.Capacity()
	}
	switch {
	case o.Err == nil && o.Result.Allowed:
	case o.Err == nil || errors.Is(o.Err, core.ErrWaitExceedsDeadline):
		d.Outcome, d.RefusedBy = OutcomeDenied, "0"
	case ctx.Err() != nil:
		d.Outcome = OutcomeCanceled
	default:
		d.Outcome = OutcomeFailedClosed
	}
	d.Degraded = degraded(&d)
	// Of several Rules, the one Result reports: the first that refused,
	// else the one with the fewest units left (nearLimit's capacity).
	for i, r := range o.Result.Rules {
		if i >= len(o.Rules) {
			break
		}
		switch {
		case d.Outcome == OutcomeDenied && !r.Allowed && r.RetryAfter > 0:
			d.RefusedBy, d.Limit, d.capacity = strconv.Itoa(i), o.Rules[i].Limit, o.Rules[i].Limit.Capacity()
			return d, true
		case d.Outcome == OutcomeAllowed && r.Remaining == o.Result.Remaining && o.Rules[i].Limit.Algorithm != core.Concurrency:
			d.Limit, d.capacity = o.Rules[i].Limit, o.Rules[i].Limit.Capacity()
			return d, true
		}
	}
	return d, true
}

// The reasons of Decision.Degraded.
const (
	degradedFallback   = "fallback"    // the local fallback decided: Redis failed, or the circuit was open
	degradedBreaker    = "breaker"     // the circuit was open: the fail policy answered, Redis not asked
	degradedFailOpen   = "fail_open"   // Redis failed: served without a decision
	degradedFailClosed = "fail_closed" // Redis failed: refused without a decision
)

// degraded is the one classification of a decision made without Redis
// (Decision.Degraded): each such decision has one reason.
func degraded(d *Decision) string {
	switch {
	case d.Result.Fallback && d.Outcome == OutcomeFailedClosed:
		return degradedFailClosed // FailClosed refuses what the fallback decided
	case d.Result.Fallback:
		return degradedFallback
	case !d.redisFault():
		return ""
	case errors.Is(d.Err, core.ErrCircuitOpen):
		return degradedBreaker
	case d.Outcome == OutcomeFailedOpen:
		return degradedFailOpen
	}
	return degradedFailClosed
}
