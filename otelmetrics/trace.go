package otelmetrics

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// scopeName is the instrumentation scope of the tracer and of nothing else:
// the meter is the caller's.
const scopeName = "github.com/redlimit/redlimit/otelmetrics"

// spanName names the span of one decision. It is one name for every
// decision, as a span name must be of low cardinality: the policy is an
// attribute.
const spanName = "redlimit.decide"

// The attributes of a decision in a trace. They are prefixed, unlike the
// instruments' attributes, because they may go on the request's own span,
// beside the HTTP server's.
const (
	spanPolicy     = attribute.Key("redlimit.policy")
	spanAlgorithm  = attribute.Key("redlimit.algorithm")
	spanOutcome    = attribute.Key("redlimit.outcome")
	spanRefusedBy  = attribute.Key("redlimit.refused_by")
	spanFailedOpen = attribute.Key("redlimit.failed_open")
	spanCached     = attribute.Key("redlimit.cached")
	spanLeased     = attribute.Key("redlimit.leased")
	spanFallback   = attribute.Key("redlimit.fallback")
	spanLatency    = attribute.Key("redlimit.latency")
	spanDelay      = attribute.Key("redlimit.delay")
	spanKey        = attribute.Key("redlimit.key")
)

// WithTracerProvider records each decision as a span of its own,
// "redlimit.decide", made by a tracer of tp. The span is a child of the
// request's span (the request's context), from when the decision
// started to when the Observer is told, after any LeakyBucket wait. Its
// attributes (the policy, algorithm, outcome, which limit refused, whether
// it failed open, was cached, leased or decided by the fallback, its latency
// and wait) are listed in docs/operations.md ("Traces"); a failed decision
// has the status Error. Mount the tracing middleware outside the limiter's.
// The last of WithTracerProvider and WithRequestSpan wins. Default: no
// spans.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider, c.requestSpan = tp, false }
}

// WithRequestSpan records each decision as attributes of the request's own
// span, and makes no span of its own. The attributes are those
// WithTracerProvider lists; the span is trace.SpanFromContext of
// the request's context, as a tracing middleware such as otelhttp makes
// it: a decision then costs a trace nothing but its attributes. A request
// without a recording span gets nothing. The last of WithTracerProvider and
// WithRequestSpan wins. Default: no attributes.
func WithRequestSpan() Option {
	return func(c *config) { c.tracerProvider, c.requestSpan = nil, true }
}

// WithKeyAttribute adds the rate-limit key (httplimit.Decision.Key) to what
// WithTracerProvider or WithRequestSpan record, as redlimit.key. A key is
// the client's data (an IP address, an API key's hash, a user ID): opt in
// only where your traces may hold it. No metric ever has it. Default: no
// key.
func WithKeyAttribute() Option {
	return func(c *config) { c.keyAttribute = true }
}

// tracing records decisions in traces: in spans of tracer's, or, when
// tracer is nil, on the request's span.
type tracing struct {
	tracer trace.Tracer
	key    bool
}

// newTracing is cfg's tracing; nil when it asks for none.
func newTracing(cfg config) *tracing {
	switch {
	case cfg.requestSpan:
		return &tracing{key: cfg.keyAttribute}
	case cfg.tracerProvider != nil:
		return &tracing{tracer: cfg.tracerProvider.Tracer(scopeName), key: cfg.keyAttribute}
	}
	return nil
}

// record puts d in its request's trace.
func (t *tracing) record(d *httplimit.Decision) {
	ctx := decisions.Context(*d)
	if t.tracer == nil {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(t.attributes(d)...)
		}
		return
	}
	end := time.Now()
	start := end.Add(-d.Latency)
	if d.Outcome == httplimit.OutcomeAllowed {
		// The request waited its Delay after the decision, and before the
		// Observer was told.
		start = start.Add(-d.Result.Delay)
	}
	_, span := t.tracer.Start(ctx, spanName, trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(t.attributes(d)...))
	if d.Outcome == httplimit.OutcomeFailedOpen || d.Outcome == httplimit.OutcomeFailedClosed {
		// Not d.Err's text: an error may quote the key.
		span.SetStatus(codes.Error, "redlimit: "+d.Outcome.String())
	}
	span.End(trace.WithTimestamp(end))
}

// attributes are d's attributes in a trace.
func (t *tracing) attributes(d *httplimit.Decision) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs,
		spanPolicy.String(d.Policy),
		spanAlgorithm.String(d.Limit.Algorithm.String()),
		spanOutcome.String(d.Outcome.String()),
		spanFailedOpen.Bool(d.Outcome == httplimit.OutcomeFailedOpen),
		spanCached.Bool(d.Result.Cached),
		spanLeased.Bool(d.Result.Leased),
		spanFallback.Bool(d.Result.Fallback),
		spanLatency.Float64(d.Latency.Seconds()),
	)
	if d.RefusedBy != "" {
		attrs = append(attrs, spanRefusedBy.String(d.RefusedBy))
	}
	if d.Outcome == httplimit.OutcomeAllowed && d.Result.Delay > 0 {
		attrs = append(attrs, spanDelay.Float64(d.Result.Delay.Seconds()))
	}
	if t.key && d.Key != "" {
		attrs = append(attrs, spanKey.String(d.Key))
	}
	return attrs
}

// recordCall puts a call that decides nothing (Refund, Settle, Renew,
// Peek) in its trace: a span of its own, "redlimit.<verb>", with the
// caller's name, the first Rule's algorithm and the call's latency, status
// Error when it failed. WithRequestSpan records none: on the request's
// span, its attributes would overwrite the decision's.
func (t *tracing) recordCall(ctx context.Context, c *core.Observation) {
	if t.tracer == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, spanPolicy.String(c.Name), spanLatency.Float64(c.Latency.Seconds()))
	if len(c.Rules) > 0 {
		attrs = append(attrs, spanAlgorithm.String(c.Rules[0].Limit.Algorithm.String()))
		if t.key {
			attrs = append(attrs, spanKey.String(c.Rules[0].Key))
		}
	}
	end := time.Now()
	_, span := t.tracer.Start(ctx, "redlimit."+c.Verb, trace.WithTimestamp(end.Add(-c.Latency)),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if c.Err != nil {
		span.SetStatus(codes.Error, "redlimit: "+c.Verb+" failed") // not the error's text: it may quote the key
	}
	span.End(trace.WithTimestamp(end))
}
