// Package otelmetrics records rate-limit decisions, and the health of their
// Redis, as OpenTelemetry metrics and, if asked, in the requests' traces.
//
//	o, err := otelmetrics.New(otel.Meter("github.com/redlimit/redlimit"), otelmetrics.WithLimiter(limiter))
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Observers: []httplimit.Observer{o}})
//
// An Observer is an httplimit.Observer; WithLimiter adds the Limiter's own
// decisions and its Redis' health. It uses the OpenTelemetry API only, and
// never the rate-limit key as a metric attribute. The instruments, what
// each counts and what a span holds: see docs/operations.md#operations
// ("Metrics", "Traces") in the repository.
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
	"github.com/redlimit/redlimit/internal/observe"
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
// dot; "" leaves names unprefixed ("decisions"). Default: "redlimit".
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithBuckets sets the bucket boundaries, in seconds, advised for the
// decision duration histogram; a View in the SDK still overrides them.
// Default: 100µs to 100ms (.0001, .00025, .0005, .001, .0025, .005, .01,
// .025, .05, .1).
func WithBuckets(b []float64) Option {
	return func(c *config) { c.buckets = append([]float64(nil), b...) }
}

// WithLimiter records the decisions made on l outside any Policy (see
// core.Limiter.Observe), for l's life. It also observes the health of l's
// Redis (core.Limiter.Health), which asks Redis nothing. Default: none.
func WithLimiter(l *core.Limiter) Option {
	return func(c *config) { c.limiter = l }
}

var defaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}

// Observer records the decisions it observes. It implements
// httplimit.Observer; one Observer may serve any number of Policies. It is
// safe for concurrent use. Observe allocates nothing of its own once a
// policy has been seen: the attribute sets are made once per policy.
type Observer struct {
	decisions   metric.Int64Counter
	nearLimit   metric.Int64Counter
	redisErrors metric.Int64Counter
	duration    metric.Float64Histogram
	cacheHits   metric.Int64Counter
	degraded    metric.Int64Counter
	tracing     *tracing // nil: no traces

	// policies maps a policy name to its precomputed options. It is copied
	// on write: policies are few and seen early, reads are on every request.
	policies atomic.Pointer[map[string]*policyAttrs]
	mu       sync.Mutex // serializes writers of policies
}

// The algorithms and outcomes core and httplimit define, so that a new one
// is cached and listed without a change here.
var (
	numAlgorithms = observe.Algorithms
	numOutcomes   = len(observe.Outcomes)
	outcomeNames  = strings.Join(observe.Outcomes, ", ")
)

// New makes the instruments on meter. It fails only if meter refuses one.
func New(meter metric.Meter, opts ...Option) (*Observer, error) {
	cfg := config{namespace: "redlimit", buckets: defaultBuckets}
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
	if err := o.instruments(meter, name, cfg.buckets); err != nil {
		return nil, err
	}
	o.policies.Store(&map[string]*policyAttrs{})
	if l := cfg.limiter; l != nil {
		if err := observeHealth(meter, name, l); err != nil {
			return nil, err
		}
		l.Observe(o.observeCall)
	}
	return o, nil
}

// instruments makes o's instruments on meter, named by name.
func (o *Observer) instruments(meter metric.Meter, name func(string) string, buckets []float64) error {
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
		"Calls Redis failed (an error, a timeout or an open circuit breaker), by policy.")
	counter(&o.cacheHits, "deny_cache.hits", "{decision}",
		"Denials answered by the local deny cache without asking Redis, by policy.")
	counter(&o.degraded, "degraded.decisions", "{decision}",
		"Decisions made without Redis, by policy and reason: fallback (the local fallback decided), breaker (the circuit was open: the fail policy answered), fail_open (Redis failed: served undecided), fail_closed (Redis failed: refused).")
	if err != nil {
		return err
	}
	o.duration, err = meter.Float64Histogram(name("decision.duration"), metric.WithUnit("s"),
		metric.WithDescription("Time the limiter took to decide, without any leaky-bucket wait."),
		metric.WithExplicitBucketBoundaries(buckets...))
	if err != nil {
		return fmt.Errorf("otelmetrics: %s: %w", name("decision.duration"), err)
	}
	return nil
}

// observeHealth registers the gauges of l's Redis health on meter.
func observeHealth(meter metric.Meter, name func(string) string, l *core.Limiter) error {
	mayEvict, err := meter.Int64ObservableGauge(name("redis.may_evict"), metric.WithUnit("{bool}"),
		metric.WithDescription("1 while the Limiter's Redis may evict its keys (a maxmemory with a policy other than noeviction): an evicted key is a fresh quota."))
	if err != nil {
		return fmt.Errorf("otelmetrics: %s: %w", name("redis.may_evict"), err)
	}
	evicted, err := meter.Int64ObservableGauge(name("redis.evicted_keys"), metric.WithUnit("{key}"),
		metric.WithDescription("Keys the Limiter's Redis has evicted since it started (evicted_keys, summed over the nodes), as last read."))
	if err != nil {
		return fmt.Errorf("otelmetrics: %s: %w", name("redis.evicted_keys"), err)
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
		return fmt.Errorf("otelmetrics: Redis health: %w", err)
	}
	return nil
}

// The attributes of the instruments.
const (
	policyKey    = attribute.Key("policy")
	algorithmKey = attribute.Key("algorithm")
	outcomeKey   = attribute.Key("outcome")
	refusedByKey = attribute.Key("refused_by")
	reasonKey    = attribute.Key("reason")
)

var _ httplimit.Observer = (*Observer)(nil)
