// Package prommetrics exports the decisions of httplimit Policies, and
// the health of their Redis, as Prometheus metrics. A Collector is both an
// httplimit.Observer and a prometheus.Collector:
//
//	c := prommetrics.New(prommetrics.WithLimiter(limiter))
//	prometheus.MustRegister(c)
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Observer: c})
//
// The metrics, with the default namespace "redlimit":
//
//	redlimit_decisions_total{policy,algorithm,outcome,refused_by}  counter
//	redlimit_near_limit_total{policy,algorithm}               counter
//	redlimit_redis_errors_total{policy}                       counter
//	redlimit_decision_duration_seconds{policy,algorithm}      histogram
//	redlimit_deny_cache_hits_total{policy}                    counter
//	redlimit_fallback_decisions_total{policy}                 counter
//	redlimit_redis_may_evict                                  gauge (WithLimiter)
//	redlimit_redis_evicted_keys                               gauge (WithLimiter)
//
// policy is the Policy's Name, algorithm and outcome are core.Algorithm and
// httplimit.Outcome in snake_case: every outcome httplimit defines, from
// allowed to in_flight. refused_by is httplimit.Decision.RefusedBy, the
// limit that refused a denied or in_flight decision: "0" for the Limit,
// "1", "2", ... for the Layers, a Scope's Name, "inflight"; empty for the other
// outcomes. No metric is labelled by the rate-limit key: keys are
// unbounded, and so would the series be. Policy names should be a fixed
// set chosen in code, not derived from requests.
//
// Which limit refuses, per policy:
//
//	sum by (policy, refused_by) (rate(redlimit_decisions_total{refused_by!=""}[5m]))
//
// redlimit_near_limit_total counts the admitted requests that left at most
// a fifth of their quota (httplimit.Decision.NearLimit: of a capacity of
// 10, Remaining 2 counts and 3 does not), as envoy's ratelimit counts
// near_limit. Its share of the allowed requests shows a policy's clients
// nearing their limits before they are denied:
//
//	rate(redlimit_near_limit_total[5m])
//	  / ignoring(outcome) rate(redlimit_decisions_total{outcome="allowed"}[5m])
//
// A policy's series starts at 0 with its first allowed request.
//
// redlimit_redis_may_evict is 1 while the Limiter's Redis may evict its
// keys (see core.Health.MayEvict): alert on it, since an evicted key is a
// fresh quota. redlimit_redis_evicted_keys is Redis' evicted_keys as last
// read, summed over the nodes; its rate() shows evictions as they happen.
//
// This package is a module of its own: users who do not import it never
// download client_golang.
package prommetrics

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// DefaultNamespace prefixes every metric name unless WithNamespace says
// otherwise.
const DefaultNamespace = "redlimit"

// DefaultBuckets are the upper bounds, in seconds, of the decision latency
// histogram: 100µs to 100ms. A healthy Redis decides in well under a
// millisecond; the Limiter's timeout (50ms by default) bounds a slow one.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}

// Option configures a Collector.
type Option func(*config)

type config struct {
	namespace   string
	buckets     []float64
	constLabels prometheus.Labels
	limiter     *core.Limiter
}

// WithNamespace sets the first part of every metric name; "" leaves names
// unprefixed ("decisions_total"). Default: DefaultNamespace.
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithBuckets sets the upper bounds, in seconds, of the decision latency
// histogram. Default: DefaultBuckets.
func WithBuckets(b []float64) Option {
	return func(c *config) { c.buckets = append([]float64(nil), b...) }
}

// WithConstLabels adds labels with fixed values to every metric (an
// instance or region name, say). Default: none.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) { c.constLabels = l }
}

// WithLimiter exports the health of l's Redis (core.Limiter.Health) with
// the decisions: whether it may evict the Limiter's keys, and how many keys
// it has evicted. Reading it asks Redis nothing. Default: none.
func WithLimiter(l *core.Limiter) Option {
	return func(c *config) { c.limiter = l }
}

// Collector counts the decisions it observes. It implements httplimit.Observer
// and prometheus.Collector; register it once and give it to any number of
// Policies. It is safe for concurrent use. Observe does not allocate once a
// policy, algorithm and outcome have been seen.
type Collector struct {
	decisions   *prometheus.CounterVec
	nearLimit   *prometheus.CounterVec
	redisErrors *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	cacheHits   *prometheus.CounterVec
	fallbacks   *prometheus.CounterVec
	limiter     *core.Limiter
	mayEvict    *prometheus.Desc
	evicted     *prometheus.Desc

	// policies maps a policy name to its children. It is copied on write:
	// policies are few and seen early, reads are on every request.
	policies atomic.Pointer[map[string]*policyMetrics]
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

// policyMetrics holds one policy's children. The per-policy counters exist
// from the start, so that rate() sees them at 0; the per-algorithm ones are
// made on first use, so a policy shows only the algorithms and outcomes it
// produced.
type policyMetrics struct {
	name        string
	redisErrors prometheus.Counter
	cacheHits   prometheus.Counter
	fallbacks   prometheus.Counter
	decisions   []atomic.Pointer[prometheus.Counter]           // by algorithm*numOutcomes + outcome, refused_by ""
	refused     atomic.Pointer[map[refusal]prometheus.Counter] // the refused decisions, copied on write
	nearLimit   []atomic.Pointer[prometheus.Counter]           // by algorithm
	duration    []atomic.Pointer[prometheus.Observer]          // by algorithm
}

// New returns a Collector. Register it with a prometheus.Registerer and set
// it as the Observer (httplimit.Config.Observer) of the Policies it should
// count.
func New(opts ...Option) *Collector {
	cfg := config{namespace: DefaultNamespace, buckets: DefaultBuckets}
	for _, opt := range opts {
		opt(&cfg)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.namespace, Name: name, Help: help, ConstLabels: cfg.constLabels,
		}, labels)
	}
	c := &Collector{
		decisions: counter("decisions_total",
			"Rate-limit decisions, by policy, algorithm, outcome ("+outcomeNames+") and, for denied and in_flight, the limit that refused (refused_by: 0 the Limit, 1.. the Layers, a Scope's name, inflight).",
			"policy", "algorithm", "outcome", "refused_by"),
		nearLimit: counter("near_limit_total",
			"Allowed requests that left at most a fifth of their limit's capacity, by policy and algorithm.",
			"policy", "algorithm"),
		redisErrors: counter("redis_errors_total",
			"Decisions Redis failed (an error, a timeout or an open circuit breaker), by policy.",
			"policy"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.namespace, Name: "decision_duration_seconds", ConstLabels: cfg.constLabels,
			Help:    "Time the limiter took to decide, in seconds, without any leaky-bucket wait.",
			Buckets: cfg.buckets,
		}, []string{"policy", "algorithm"}),
		cacheHits: counter("deny_cache_hits_total",
			"Denials answered by the local deny cache without asking Redis, by policy.",
			"policy"),
		fallbacks: counter("fallback_decisions_total",
			"Decisions made by the in-process fallback limiter because Redis could not answer, by policy.",
			"policy"),
	}
	c.policies.Store(&map[string]*policyMetrics{})
	if c.limiter = cfg.limiter; c.limiter != nil {
		c.mayEvict = prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "redis", "may_evict"),
			"1 while the Limiter's Redis may evict its keys (a maxmemory with a policy other than noeviction): an evicted key is a fresh quota.",
			nil, cfg.constLabels)
		c.evicted = prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "redis", "evicted_keys"),
			"Keys the Limiter's Redis has evicted since it started (evicted_keys, summed over the nodes), as last read.",
			nil, cfg.constLabels)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.nearLimit.Describe(ch)
	c.redisErrors.Describe(ch)
	c.duration.Describe(ch)
	c.cacheHits.Describe(ch)
	c.fallbacks.Describe(ch)
	if c.limiter != nil {
		ch <- c.mayEvict
		ch <- c.evicted
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.nearLimit.Collect(ch)
	c.redisErrors.Collect(ch)
	c.duration.Collect(ch)
	c.cacheHits.Collect(ch)
	c.fallbacks.Collect(ch)
	if c.limiter != nil {
		h := c.limiter.Health()
		may := 0.0
		if h.MayEvict {
			may = 1
		}
		ch <- prometheus.MustNewConstMetric(c.mayEvict, prometheus.GaugeValue, may)
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.GaugeValue, float64(h.EvictedKeys))
	}
}

// Observe implements httplimit.Observer: it counts d.
func (c *Collector) Observe(d httplimit.Decision) {
	p := c.policy(d.Policy)
	a := d.Limit.Algorithm
	c.decision(p, a, d.Outcome, d.RefusedBy).Inc()
	if d.Outcome == httplimit.OutcomeAllowed {
		// Made on the first allowed request, so that the series is there
		// at 0 to divide by the allowed ones.
		near := c.near(p, a)
		if d.NearLimit() {
			near.Inc()
		}
	}
	c.latency(p, a).Observe(d.Latency.Seconds())
	if d.RedisFault() {
		p.redisErrors.Inc()
	}
	if d.Result.Cached {
		p.cacheHits.Inc()
	}
	if d.Result.Fallback {
		p.fallbacks.Inc()
	}
}

func (c *Collector) policy(name string) *policyMetrics {
	if p, ok := (*c.policies.Load())[name]; ok {
		return p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.policies.Load()
	if p, ok := old[name]; ok {
		return p
	}
	p := &policyMetrics{
		name:        name,
		redisErrors: c.redisErrors.WithLabelValues(name),
		cacheHits:   c.cacheHits.WithLabelValues(name),
		fallbacks:   c.fallbacks.WithLabelValues(name),
		decisions:   make([]atomic.Pointer[prometheus.Counter], numAlgorithms*numOutcomes),
		nearLimit:   make([]atomic.Pointer[prometheus.Counter], numAlgorithms),
		duration:    make([]atomic.Pointer[prometheus.Observer], numAlgorithms),
	}
	m := make(map[string]*policyMetrics, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = p
	c.policies.Store(&m)
	return p
}

// decision returns the decisions_total child of p for a, o and by. Children
// are made once; WithLabelValues returns the same child to racing callers,
// so a lost race costs only the duplicate lookup.
func (c *Collector) decision(p *policyMetrics, a core.Algorithm, o httplimit.Outcome, by string) prometheus.Counter {
	if int(a) >= numAlgorithms || int(o) >= numOutcomes {
		// An algorithm or outcome newer than this package: correct, not cached.
		return c.decisions.WithLabelValues(p.name, a.String(), o.String(), by)
	}
	if by != "" {
		return c.refusal(p, refusal{a, o, by})
	}
	slot := &p.decisions[int(a)*numOutcomes+int(o)]
	if ctr := slot.Load(); ctr != nil {
		return *ctr
	}
	ctr := c.decisions.WithLabelValues(p.name, a.String(), o.String(), "")
	slot.Store(&ctr)
	return ctr
}

// refusal is a refused decision's series of a policy: a policy has a few,
// one per limit that refuses (httplimit.Decision.RefusedBy).
type refusal struct {
	algorithm core.Algorithm
	outcome   httplimit.Outcome
	by        string
}

// refusal returns the decisions_total child of p for r, made once.
func (c *Collector) refusal(p *policyMetrics, r refusal) prometheus.Counter {
	if m := p.refused.Load(); m != nil {
		if ctr, ok := (*m)[r]; ok {
			return ctr
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[refusal]prometheus.Counter
	if m := p.refused.Load(); m != nil {
		old = *m
	}
	if ctr, ok := old[r]; ok {
		return ctr
	}
	m := make(map[refusal]prometheus.Counter, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[r] = c.decisions.WithLabelValues(p.name, r.algorithm.String(), r.outcome.String(), r.by)
	p.refused.Store(&m)
	return m[r]
}

// near returns the near_limit_total child of p for a, made once as
// decision's are.
func (c *Collector) near(p *policyMetrics, a core.Algorithm) prometheus.Counter {
	if int(a) >= numAlgorithms {
		return c.nearLimit.WithLabelValues(p.name, a.String())
	}
	slot := &p.nearLimit[a]
	if ctr := slot.Load(); ctr != nil {
		return *ctr
	}
	ctr := c.nearLimit.WithLabelValues(p.name, a.String())
	slot.Store(&ctr)
	return ctr
}

func (c *Collector) latency(p *policyMetrics, a core.Algorithm) prometheus.Observer {
	if int(a) >= numAlgorithms {
		return c.duration.WithLabelValues(p.name, a.String())
	}
	slot := &p.duration[a]
	if obs := slot.Load(); obs != nil {
		return *obs
	}
	obs := c.duration.WithLabelValues(p.name, a.String())
	slot.Store(&obs)
	return obs
}

var (
	_ httplimit.Observer   = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)
