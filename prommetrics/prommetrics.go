// Package prommetrics exports the decisions of a core.Policy as Prometheus
// metrics. A Collector is both a core.Observer and a prometheus.Collector:
//
//	c := prommetrics.New()
//	prometheus.MustRegister(c)
//	p, err := core.NewPolicy(core.Policy{Limiter: l, Limit: core.PerSecond(10), Observer: c})
//
// The metrics, with the default namespace "redlimit":
//
//	redlimit_decisions_total{policy,algorithm,outcome}        counter
//	redlimit_redis_errors_total{policy}                       counter
//	redlimit_decision_duration_seconds{policy,algorithm}      histogram
//	redlimit_deny_cache_hits_total{policy}                    counter
//	redlimit_fallback_decisions_total{policy}                 counter
//
// policy is the Policy's Name, algorithm and outcome are core.Algorithm and
// core.Outcome in snake_case. No metric is labelled by the rate-limit key:
// keys are unbounded, and so would the series be. Policy names should be a
// fixed set chosen in code, not derived from requests.
//
// Users who do not import this package never link client_golang: core knows
// only its own Observer interface.
package prommetrics

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/core"
)

// DefaultNamespace prefixes every metric name unless WithNamespace says
// otherwise.
const DefaultNamespace = "redlimit"

// DefaultBuckets are the upper bounds, in seconds, of the decision latency
// histogram: 100µs to 100ms. A healthy Redis decides in well under a
// millisecond; core.DefaultTimeout (50ms) bounds a slow one.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}

// Option configures a Collector.
type Option func(*config)

type config struct {
	namespace   string
	buckets     []float64
	constLabels prometheus.Labels
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

// Collector counts the decisions it observes. It implements core.Observer
// and prometheus.Collector; register it once and give it to any number of
// Policies. It is safe for concurrent use. Observe does not allocate once a
// policy, algorithm and outcome have been seen.
type Collector struct {
	decisions   *prometheus.CounterVec
	redisErrors *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	cacheHits   *prometheus.CounterVec
	fallbacks   *prometheus.CounterVec

	// policies maps a policy name to its children. It is copied on write:
	// policies are few and seen early, reads are on every request.
	policies atomic.Pointer[map[string]*policyMetrics]
	mu       sync.Mutex // serializes writers of policies
}

const (
	numAlgorithms = int(core.LeakyBucket) + 1
	numOutcomes   = int(core.OutcomeCanceled) + 1
)

// policyMetrics holds one policy's children. The per-policy counters exist
// from the start, so that rate() sees them at 0; the per-algorithm ones are
// made on first use, so a policy shows only the algorithms and outcomes it
// produced.
type policyMetrics struct {
	name        string
	redisErrors prometheus.Counter
	cacheHits   prometheus.Counter
	fallbacks   prometheus.Counter
	decisions   [numAlgorithms][numOutcomes]atomic.Pointer[prometheus.Counter]
	duration    [numAlgorithms]atomic.Pointer[prometheus.Observer]
}

// New returns a Collector. Register it with a prometheus.Registerer and set
// it as the Observer of the Policies it should count.
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
			"Rate-limit decisions, by policy, algorithm and outcome (allowed, denied, failed_open, failed_closed, canceled).",
			"policy", "algorithm", "outcome"),
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
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.redisErrors.Describe(ch)
	c.duration.Describe(ch)
	c.cacheHits.Describe(ch)
	c.fallbacks.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.redisErrors.Collect(ch)
	c.duration.Collect(ch)
	c.cacheHits.Collect(ch)
	c.fallbacks.Collect(ch)
}

// Observe implements core.Observer: it counts e.
func (c *Collector) Observe(e core.Event) {
	p := c.policy(e.Policy)
	c.decision(p, e.Algorithm, e.Outcome).Inc()
	c.latency(p, e.Algorithm).Observe(e.Latency.Seconds())
	if e.RedisFault {
		p.redisErrors.Inc()
	}
	if e.Result.Cached {
		p.cacheHits.Inc()
	}
	if e.Result.Fallback {
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
	}
	m := make(map[string]*policyMetrics, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = p
	c.policies.Store(&m)
	return p
}

// decision returns the decisions_total child of p for a and o. Children are
// made once; WithLabelValues returns the same child to racing callers, so a
// lost race costs only the duplicate lookup.
func (c *Collector) decision(p *policyMetrics, a core.Algorithm, o core.Outcome) prometheus.Counter {
	if int(a) >= numAlgorithms || int(o) >= numOutcomes {
		// An algorithm or outcome newer than this package: correct, not cached.
		return c.decisions.WithLabelValues(p.name, a.String(), o.String())
	}
	slot := &p.decisions[a][o]
	if ctr := slot.Load(); ctr != nil {
		return *ctr
	}
	ctr := c.decisions.WithLabelValues(p.name, a.String(), o.String())
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
	_ core.Observer        = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)
