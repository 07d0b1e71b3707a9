package prommetrics

import (
	"context"
	"errors"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/observe"
)

// Observe implements httplimit.Observer: it counts d.
func (c *Collector) Observe(d httplimit.Decision) {
	p := c.policy(d.Policy)
	a := d.Limit.Algorithm
	c.decision(p, a, d.Outcome, d.RefusedBy).Inc()
	if d.Outcome == httplimit.OutcomeAllowed {
		// Made on the first allowed request, so that the series is there
		// at 0 to divide by the allowed ones.
		near := c.near(p, a)
		if decisions.NearLimit(d) {
			near.Inc()
		}
	}
	c.latency(p, a).Observe(d.Latency.Seconds())
	if observe.RedisFault(d.Degraded) {
		p.redisErrors.Inc()
	}
	if d.Result.Cached {
		p.cacheHits.Inc()
	}
	if d.Degraded != "" {
		c.degradedBy(p, d.Degraded).Inc()
	}
}

// observeCall counts a call made on the Limiter of WithLimiter outside
// any Policy: a decision as Observe counts a Policy's; a Redis fault of
// the other calls (Refund, Settle, Renew, Peek) as a Redis error.
func (c *Collector) observeCall(ctx context.Context, o core.Observation) {
	if d, ok := decisions.Of(ctx, o); ok {
		c.Observe(d)
		return
	}
	if errors.Is(o.Err, core.ErrUnavailable) {
		c.policy(o.Name).redisErrors.Inc()
	}
}

// decisions are httplimit's hooks (set at its init, before this package's
// variables).
var decisions = observe.DecisionsOf[httplimit.Decision, core.Observation]()
