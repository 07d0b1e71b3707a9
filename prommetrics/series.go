package prommetrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// degradedReasons are the values of Decision.Degraded, each a series of
// every policy from the start.
var degradedReasons = []string{"fallback", "breaker", "fail_open", "fail_closed"}

// policyMetrics holds one policy's children. The per-policy counters exist
// from the start, so that rate() sees them at 0; the per-algorithm ones are
// made on first use, so a policy shows only the algorithms and outcomes it
// produced.
type policyMetrics struct {
	name        string
	redisErrors prometheus.Counter
	cacheHits   prometheus.Counter
	degraded    []prometheus.Counter                           // by degradedReasons
	decisions   []atomic.Pointer[prometheus.Counter]           // by algorithm*numOutcomes + outcome, refused_by ""
	refused     atomic.Pointer[map[refusal]prometheus.Counter] // the refused decisions, copied on write
	nearLimit   []atomic.Pointer[prometheus.Counter]           // by algorithm
	duration    []atomic.Pointer[prometheus.Observer]          // by algorithm
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
		decisions:   make([]atomic.Pointer[prometheus.Counter], numAlgorithms*numOutcomes),
		nearLimit:   make([]atomic.Pointer[prometheus.Counter], numAlgorithms),
		duration:    make([]atomic.Pointer[prometheus.Observer], numAlgorithms),
	}
	for _, r := range degradedReasons {
		p.degraded = append(p.degraded, c.degraded.WithLabelValues(name, r))
	}
	m := make(map[string]*policyMetrics, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = p
	c.policies.Store(&m)
	return p
}

// degradedBy returns p's degraded_decisions_total child for reason.
func (c *Collector) degradedBy(p *policyMetrics, reason string) prometheus.Counter {
	for i, r := range degradedReasons {
		if r == reason {
			return p.degraded[i]
		}
	}
	return c.degraded.WithLabelValues(p.name, reason) // a reason newer than this package
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
