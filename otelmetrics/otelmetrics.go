// Package otelmetrics records the decisions of httplimit Policies, and
// the health of their Redis, as OpenTelemetry metrics, and, if asked, in
// the requests' traces. An Observer is an httplimit.Observer:
//
//	o, err := otelmetrics.New(otel.Meter("github.com/redlimit/redlimit"), otelmetrics.WithLimiter(limiter))
//	if err != nil { ... }
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Observer: o})
//
// The instruments, with the default namespace "redlimit":
//
//	redlimit.decisions            counter {decision}  policy, algorithm, outcome, refused_by
//	redlimit.near_limit           counter {decision}  policy, algorithm
//	redlimit.redis.errors         counter {error}     policy
//	redlimit.decision.duration    histogram s         policy, algorithm
//	redlimit.deny_cache.hits      counter {decision}  policy
//	redlimit.fallback.decisions   counter {decision}  policy
//	redlimit.redis.may_evict      gauge {bool}        (WithLimiter)
//	redlimit.redis.evicted_keys   gauge {key}         (WithLimiter)
//
// Exported to Prometheus, they become the same series as package
// prommetrics writes (redlimit_decisions_total, redlimit_near_limit_total,
// redlimit_decision_duration_seconds, ...). policy is the Policy's Name,
// algorithm and outcome are core.Algorithm and httplimit.Outcome in
// snake_case: every outcome httplimit defines, from allowed to in_flight.
// refused_by, on denied and in_flight decisions only, is
// httplimit.Decision.RefusedBy, the limit that refused: "0" for the Limit,
// "1", "2", ... for the Layers, a Scope's Name, "inflight".
//
// redlimit.near_limit counts the admitted requests that left at most a
// fifth of their quota (httplimit.Decision.NearLimit: of a capacity of 10,
// Remaining 2 counts and 3 does not), as envoy's ratelimit counts
// near_limit. Divided by the allowed decisions, it shows a policy's clients
// nearing their limits before they are denied. Its point is there at 0
// from a policy's first allowed request.
//
// The two gauges report core.Limiter.Health: whether its Redis
// may evict the Limiter's keys (an evicted key is a fresh quota), and the
// keys it has evicted.
// No instrument is given the rate-limit key as an attribute: keys are
// unbounded, and so would the series be. Policy names should be a fixed set
// chosen in code, not derived from requests.
//
// With WithTracerProvider each decision is also a span, a child of the
// request's, and with WithRequestSpan attributes of the request's own span:
// the policy, algorithm, outcome, which limit refused, whether it failed
// open, was cached, leased or decided by the fallback, and its latency.
// The key is left out unless WithKeyAttribute asks for it.
//
// This package is a module of its own: users who do not import it never
// download OpenTelemetry. It uses the OpenTelemetry API only: the
// application chooses the SDK.
package otelmetrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// DefaultNamespace starts every instrument name unless WithNamespace says
// otherwise.
const DefaultNamespace = "redlimit"

// DefaultBuckets are the explicit bucket boundaries, in seconds, advised for
// the decision duration histogram: 100µs to 100ms. A healthy Redis decides
// in well under a millisecond; the Limiter's timeout (50ms by default)
// bounds a slow one.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}

// Attribute keys of the instruments.
const (
	PolicyKey    = attribute.Key("policy")
	AlgorithmKey = attribute.Key("algorithm")
	OutcomeKey   = attribute.Key("outcome")
)

// Option configures an Observer.
type Option func(*config)

type config struct {
	namespace      string
	buckets        []float64
	limiter        *core.Limiter
	tracerProvider trace.TracerProvider
	requestSpan    bool
	keyAttribute   bool
}

// WithNamespace sets the first part of every instrument name, joined by a
// dot; "" leaves names unprefixed ("decisions"). Default: DefaultNamespace.
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithBuckets sets the bucket boundaries, in seconds, advised for the
// decision duration histogram; a View in the SDK still overrides them.
// Default: DefaultBuckets.
func WithBuckets(b []float64) Option {
	return func(c *config) { c.buckets = append([]float64(nil), b...) }
}

// WithLimiter observes the health of l's Redis (core.Limiter.Health) with
// the decisions: whether it may evict the Limiter's keys, and how many keys
// it has evicted. Observing it asks Redis nothing. Default: none.
func WithLimiter(l *core.Limiter) Option {
	return func(c *config) { c.limiter = l }
}

// Observer records the decisions it observes. It implements
// httplimit.Observer;
// one Observer may serve any number of Policies. It is safe for concurrent
// use. Observe allocates nothing of its own once a policy has been seen: the
// attribute sets are made once per policy.
type Observer struct {
	decisions   metric.Int64Counter
	nearLimit   metric.Int64Counter
	redisErrors metric.Int64Counter
	duration    metric.Float64Histogram
	cacheHits   metric.Int64Counter
	fallbacks   metric.Int64Counter
	tracing     *tracing // nil: no traces

	// policies maps a policy name to its precomputed options. It is copied
	// on write: policies are few and seen early, reads are on every request.
	policies atomic.Pointer[map[string]*policyAttrs]
	mu       sync.Mutex // serializes writers of policies
}

// The algorithms and outcomes core and httplimit define, so that a new one
// is cached and listed without a change here.
var (
	numAlgorithms = len(core.Algorithms())
	numOutcomes   = len(httplimit.Outcomes())
	outcomeNames  = joinNames(httplimit.Outcomes())
)

func joinNames[E fmt.Stringer](values []E) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = v.String()
	}
	return strings.Join(s, ", ")
}

// policyAttrs holds the measurement options of one policy, each a ready
// variadic slice, so that Add and Record are called without building one.
type policyAttrs struct {
	name      string
	policy    []metric.AddOption                             // {policy}
	decisions [][]metric.AddOption                           // {policy, algorithm, outcome}, by algorithm*numOutcomes + outcome
	refused   atomic.Pointer[map[refusal][]metric.AddOption] // {policy, algorithm, outcome, refused_by}, copied on write
	nearLimit [][]metric.AddOption                           // {policy, algorithm}, by algorithm
	nearSeen  []atomic.Bool                                  // by algorithm: near_limit has a point
	duration  [][]metric.RecordOption                        // {policy, algorithm}, by algorithm
}

// New makes the instruments on meter. It fails only if meter refuses one.
func New(meter metric.Meter, opts ...Option) (*Observer, error) {
	cfg := config{namespace: DefaultNamespace, buckets: DefaultBuckets}
	for _, opt := range opts {
		opt(&cfg)
	}
	name := func(s string) string {
		if cfg.namespace == "" {
			return s
		}
		return cfg.namespace + "." + s
	}
	o := &Observer{tracing: newTracing(cfg)}
	var err error
	counter := func(dst *metric.Int64Counter, n, unit, desc string) {
		if err != nil {
			return
		}
		*dst, err = meter.Int64Counter(name(n), metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			err = fmt.Errorf("otelmetrics: %s: %w", name(n), err)
		}
	}
	counter(&o.decisions, "decisions", "{decision}",
		"Rate-limit decisions, by policy, algorithm, outcome ("+outcomeNames+") and, for denied and in_flight, the limit that refused (refused_by: 0 the Limit, 1.. the Layers, a Scope's name, inflight).")
	counter(&o.nearLimit, "near_limit", "{decision}",
		"Allowed requests that left at most a fifth of their limit's capacity, by policy and algorithm.")
	counter(&o.redisErrors, "redis.errors", "{error}",
		"Decisions Redis failed (an error, a timeout or an open circuit breaker), by policy.")
	counter(&o.cacheHits, "deny_cache.hits", "{decision}",
		"Denials answered by the local deny cache without asking Redis, by policy.")
	counter(&o.fallbacks, "fallback.decisions", "{decision}",
		"Decisions made by the in-process fallback limiter because Redis could not answer, by policy.")
	if err != nil {
		return nil, err
	}
	o.duration, err = meter.Float64Histogram(name("decision.duration"), metric.WithUnit("s"),
		metric.WithDescription("Time the limiter took to decide, without any leaky-bucket wait."),
		metric.WithExplicitBucketBoundaries(cfg.buckets...))
	if err != nil {
		return nil, fmt.Errorf("otelmetrics: %s: %w", name("decision.duration"), err)
	}
	o.policies.Store(&map[string]*policyAttrs{})
	if l := cfg.limiter; l != nil {
		mayEvict, err := meter.Int64ObservableGauge(name("redis.may_evict"), metric.WithUnit("{bool}"),
			metric.WithDescription("1 while the Limiter's Redis may evict its keys (a maxmemory with a policy other than noeviction): an evicted key is a fresh quota."))
		if err != nil {
			return nil, fmt.Errorf("otelmetrics: %s: %w", name("redis.may_evict"), err)
		}
		evicted, err := meter.Int64ObservableGauge(name("redis.evicted_keys"), metric.WithUnit("{key}"),
			metric.WithDescription("Keys the Limiter's Redis has evicted since it started (evicted_keys, summed over the nodes), as last read."))
		if err != nil {
			return nil, fmt.Errorf("otelmetrics: %s: %w", name("redis.evicted_keys"), err)
		}
		if _, err := meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
			h := l.Health()
			may := int64(0)
			if h.MayEvict {
				may = 1
			}
			obs.ObserveInt64(mayEvict, may)
			obs.ObserveInt64(evicted, h.EvictedKeys)
			return nil
		}, mayEvict, evicted); err != nil {
			return nil, fmt.Errorf("otelmetrics: Redis health: %w", err)
		}
	}
	return o, nil
}

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
		case d.NearLimit():
			o.nearLimit.Add(ctx, 1, p.nearLimit[a]...)
		case d.Outcome == httplimit.OutcomeAllowed && !p.nearSeen[a].Load():
			// The series at 0 from the first allowed request, to divide by
			// the allowed ones, as prommetrics has it. Read, not written,
			// on every request: a shared line written by all would bounce.
			o.nearLimit.Add(ctx, 0, p.nearLimit[a]...)
			p.nearSeen[a].Store(true)
		}
	} else {
		// An algorithm or outcome newer than this package: correct, not cached.
		attrs := []attribute.KeyValue{PolicyKey.String(d.Policy), AlgorithmKey.String(a.String()), OutcomeKey.String(d.Outcome.String())}
		if d.RefusedBy != "" {
			attrs = append(attrs, refusedByKey.String(d.RefusedBy))
		}
		o.decisions.Add(ctx, 1, metric.WithAttributes(attrs...))
		o.duration.Record(ctx, d.Latency.Seconds(), metric.WithAttributes(PolicyKey.String(d.Policy),
			AlgorithmKey.String(a.String())))
		if d.NearLimit() {
			o.nearLimit.Add(ctx, 1, metric.WithAttributes(PolicyKey.String(d.Policy), AlgorithmKey.String(a.String())))
		}
	}
	if d.RedisFault() {
		o.redisErrors.Add(ctx, 1, p.policy...)
	}
	if d.Result.Cached {
		o.cacheHits.Add(ctx, 1, p.policy...)
	}
	if d.Result.Fallback {
		o.fallbacks.Add(ctx, 1, p.policy...)
	}
	if o.tracing != nil {
		o.tracing.record(&d)
	}
}

func (o *Observer) policy(name string) *policyAttrs {
	if p, ok := (*o.policies.Load())[name]; ok {
		return p
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.policies.Load()
	if p, ok := old[name]; ok {
		return p
	}
	p := newPolicyAttrs(name)
	m := make(map[string]*policyAttrs, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = p
	o.policies.Store(&m)
	return p
}

// refusal is a refused decision's series of a policy: a policy has a few,
// one per limit that refuses (httplimit.Decision.RefusedBy).
type refusal struct {
	algorithm core.Algorithm
	outcome   httplimit.Outcome
	by        string
}

// refusedByKey is the attribute of the limit that refused.
const refusedByKey = attribute.Key("refused_by")

// refusal returns the options of p's refused series r, made once.
func (o *Observer) refusal(p *policyAttrs, r refusal) []metric.AddOption {
	if m := p.refused.Load(); m != nil {
		if opts, ok := (*m)[r]; ok {
			return opts
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var old map[refusal][]metric.AddOption
	if m := p.refused.Load(); m != nil {
		old = *m
	}
	if opts, ok := old[r]; ok {
		return opts
	}
	m := make(map[refusal][]metric.AddOption, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	set := attribute.NewSet(PolicyKey.String(p.name), AlgorithmKey.String(r.algorithm.String()),
		OutcomeKey.String(r.outcome.String()), refusedByKey.String(r.by))
	m[r] = []metric.AddOption{metric.WithAttributeSet(set)}
	p.refused.Store(&m)
	return m[r]
}

func newPolicyAttrs(name string) *policyAttrs {
	pol := PolicyKey.String(name)
	p := &policyAttrs{
		name:      name,
		policy:    []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(pol))},
		decisions: make([][]metric.AddOption, numAlgorithms*numOutcomes),
		nearLimit: make([][]metric.AddOption, numAlgorithms),
		nearSeen:  make([]atomic.Bool, numAlgorithms),
		duration:  make([][]metric.RecordOption, numAlgorithms),
	}
	for a := range numAlgorithms {
		alg := AlgorithmKey.String(core.Algorithm(a).String())
		byAlgorithm := metric.WithAttributeSet(attribute.NewSet(pol, alg))
		p.duration[a] = []metric.RecordOption{byAlgorithm}
		p.nearLimit[a] = []metric.AddOption{byAlgorithm}
		for out := range numOutcomes {
			set := attribute.NewSet(pol, alg, OutcomeKey.String(httplimit.Outcome(out).String()))
			p.decisions[a*numOutcomes+out] = []metric.AddOption{metric.WithAttributeSet(set)}
		}
	}
	return p
}

var _ httplimit.Observer = (*Observer)(nil)
