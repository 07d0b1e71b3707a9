package otelmetrics

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/observe"
)

// Observe implements httplimit.Observer: it records d.
func (o *Observer) Observe(d httplimit.Decision) {
	ctx := context.Background()
	p := o.policy(d.Policy)
	a := d.Limit.Algorithm
	if int(a) < numAlgorithms && int(d.Outcome) < numOutcomes {
		if d.RefusedBy != "" {
			o.decisions.Add(ctx, 1, o.refusal(p, refusal{a, d.Outcome, d.RefusedBy})...)
		} else {
			o.decisions.Add(ctx, 1, p.decisions[int(a)*numOutcomes+int(d.Outcome)]...)
		}
		o.duration.Record(ctx, d.Latency.Seconds(), p.duration[a]...)
		switch {
		case decisions.NearLimit(d):
			o.nearLimit.Add(ctx, 1, p.nearLimit[a]...)
		case d.Outcome == httplimit.OutcomeAllowed && !p.nearSeen[a].Load():
			// The series at 0 from the first allowed request, to divide by
			// the allowed ones, as prommetrics has it. Read, not written,
			// on every request: a shared line written by all would bounce.
			o.nearLimit.Add(ctx, 0, p.nearLimit[a]...)
			p.nearSeen[a].Store(true)
		}
	} else {
		o.observeNewer(ctx, &d)
	}
	if observe.RedisFault(d.Degraded) {
		o.redisErrors.Add(ctx, 1, p.policy...)
	}
	if d.Result.Cached {
		o.cacheHits.Add(ctx, 1, p.policy...)
	}
	if d.Degraded != "" {
		o.degraded.Add(ctx, 1, p.degradedBy(d.Degraded)...)
	}
	if o.tracing != nil {
		o.tracing.record(&d)
	}
}

// observeNewer records a decision of an algorithm or outcome newer than
// this package: correct, not cached.
func (o *Observer) observeNewer(ctx context.Context, d *httplimit.Decision) {
	a := d.Limit.Algorithm.String()
	attrs := []attribute.KeyValue{policyKey.String(d.Policy), algorithmKey.String(a), outcomeKey.String(d.Outcome.String())}
	if d.RefusedBy != "" {
		attrs = append(attrs, refusedByKey.String(d.RefusedBy))
	}
	o.decisions.Add(ctx, 1, metric.WithAttributes(attrs...))
	byAlgorithm := metric.WithAttributes(policyKey.String(d.Policy), algorithmKey.String(a))
	o.duration.Record(ctx, d.Latency.Seconds(), byAlgorithm)
	if decisions.NearLimit(*d) {
		o.nearLimit.Add(ctx, 1, byAlgorithm)
	}
}

// observeCall records a call made on the Limiter of WithLimiter outside
// any Policy: a decision as Observe records a Policy's; of the other calls
// (Refund, Settle, Renew, Peek), a Redis fault as a Redis error, and the
// call as a span of its own (WithTracerProvider).
func (o *Observer) observeCall(ctx context.Context, c core.Observation) {
	if d, ok := decisions.Of(ctx, c); ok {
		o.Observe(d)
		return
	}
	if errors.Is(c.Err, core.ErrUnavailable) {
		o.redisErrors.Add(ctx, 1, o.policy(c.Name).policy...)
	}
	if o.tracing != nil {
		o.tracing.recordCall(ctx, &c)
	}
}

// decisions are httplimit's hooks (set at its init, before this package's
// variables).
var decisions = observe.DecisionsOf[httplimit.Decision, core.Observation]()
