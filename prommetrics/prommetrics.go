// Package prommetrics exports rate-limit decisions, and the health of their
// Redis, as Prometheus metrics.
//
//	c := prommetrics.New(prommetrics.WithLimiter(limiter))
//	prometheus.MustRegister(c)
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Observers: []httplimit.Observer{c}})
//
// A Collector is an httplimit.Observer and a prometheus.Collector;
// WithLimiter adds the Limiter's own decisions and its Redis' health. No
// metric is labelled by the rate-limit key. The metrics and their labels:
// see docs/operations.md#operations ("Metrics") in the repository.
package prommetrics

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/observe"
)

// Option configures a Collector.
type Option func(*config)

type config struct {
	namespace   string
	buckets     []float64
	constLabels prometheus.Labels
	limiter     *core.Limiter
}

// WithNamespace sets the first part of every metric name; "" leaves names
// unprefixed ("decisions_total"). Default: "redlimit".
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithBuckets sets the upper bounds, in seconds, of the decision latency
// histogram. Default: 100µs to 100ms (.0001, .00025, .0005, .001, .0025,
// .005, .01, .025, .05, .1): a healthy Redis decides in well under a
// millisecond; the Limiter's timeout bounds a slow one.
func WithBuckets(b []float64) Option {
	return func(c *config) { c.buckets = append([]float64(nil), b...) }
}

// WithConstLabels adds labels with fixed values to every metric (an
// instance or region name, say). Default: none.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) { c.constLabels = l }
}

// WithLimiter counts the decisions made on l outside any Policy (see
// core.Limiter.Observe), for l's life. It also exports the health of l's
// Redis (core.Limiter.Health), which reading asks Redis nothing of. Default:
// none.
func WithLimiter(l *core.Limiter) Option {
	return func(c *config) { c.limiter = l }
}

var defaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}

// Collector counts the decisions it observes. It implements
// httplimit.Observer and prometheus.Collector; register it once and give
// it to any number of Policies. It is safe for concurrent use. Observe
// does not allocate once a policy, algorithm and outcome have been seen.
type Collector struct {
	decisions   *prometheus.CounterVec
	nearLimit   *prometheus.CounterVec
	redisErrors *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	cacheHits   *prometheus.CounterVec
	degraded    *prometheus.CounterVec
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
	numAlgorithms = observe.Algorithms
	numOutcomes   = len(observe.Outcomes)
	outcomeNames  = strings.Join(observe.Outcomes, ", ")
)

// New returns a Collector. Register it with a prometheus.Registerer and
// give it to the Policies it should count (httplimit.Config.Observers).
func New(opts ...Option) *Collector {
	cfg := config{namespace: "redlimit", buckets: defaultBuckets}
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
			"Calls Redis failed (an error, a timeout or an open circuit breaker), by policy.",
			"policy"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.namespace, Name: "decision_duration_seconds", ConstLabels: cfg.constLabels,
			Help:    "Time the limiter took to decide, in seconds, without any leaky-bucket wait.",
			Buckets: cfg.buckets,
		}, []string{"policy", "algorithm"}),
		cacheHits: counter("deny_cache_hits_total",
			"Denials answered by the local deny cache without asking Redis, by policy.",
			"policy"),
		degraded: counter("degraded_decisions_total",
			"Decisions made without Redis, by policy and reason: fallback (the local fallback decided), breaker (the circuit was open: the fail policy answered), fail_open (Redis failed: served undecided), fail_closed (Redis failed: refused).",
			"policy", "reason"),
	}
	c.policies.Store(&map[string]*policyMetrics{})
	if c.limiter = cfg.limiter; c.limiter != nil {
		c.mayEvict = prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "redis", "may_evict"),
			"1 while the Limiter's Redis may evict its keys (a maxmemory with a policy other than noeviction): an evicted key is a fresh quota.",
			nil, cfg.constLabels)
		c.evicted = prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "redis", "evicted_keys"),
			"Keys the Limiter's Redis has evicted since it started (evicted_keys, summed over the nodes), as last read.",
			nil, cfg.constLabels)
		c.limiter.Observe(c.observeCall)
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
	c.degraded.Describe(ch)
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
	c.degraded.Collect(ch)
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

var (
	_ httplimit.Observer   = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)
