package otelmetrics

import (
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// degradedReasons are the values of Decision.Degraded, each with its
// attribute set made once per policy.
var degradedReasons = []string{"fallback", "breaker", "fail_open", "fail_closed"}

// policyAttrs holds the measurement options of one policy, each a ready
// variadic slice, so that Add and Record are called without building one.
type policyAttrs struct {
	name      string
	policy    []metric.AddOption                             // {policy}
	degraded  [][]metric.AddOption                           // {policy, reason}, by degradedReasons
	decisions [][]metric.AddOption                           // {policy, algorithm, outcome}, by algorithm*numOutcomes + outcome
	refused   atomic.Pointer[map[refusal][]metric.AddOption] // {policy, algorithm, outcome, refused_by}, copied on write
	nearLimit [][]metric.AddOption                           // {policy, algorithm}, by algorithm
	nearSeen  []atomic.Bool                                  // by algorithm: near_limit has a point
	duration  [][]metric.RecordOption                        // {policy, algorithm}, by algorithm
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
	set := attribute.NewSet(policyKey.String(p.name), algorithmKey.String(r.algorithm.String()),
		outcomeKey.String(r.outcome.String()), refusedByKey.String(r.by))
	m[r] = []metric.AddOption{metric.WithAttributeSet(set)}
	p.refused.Store(&m)
	return m[r]
}

// degradedBy returns the options of p's series of reason.
func (p *policyAttrs) degradedBy(reason string) []metric.AddOption {
	for i, r := range degradedReasons {
		if r == reason {
			return p.degraded[i]
		}
	}
	// A reason newer than this package: correct, not cached.
	return []metric.AddOption{metric.WithAttributes(policyKey.String(p.name), reasonKey.String(reason))}
}

func newPolicyAttrs(name string) *policyAttrs {
	pol := policyKey.String(name)
	p := &policyAttrs{
		name:      name,
		policy:    []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(pol))},
		decisions: make([][]metric.AddOption, numAlgorithms*numOutcomes),
		nearLimit: make([][]metric.AddOption, numAlgorithms),
		nearSeen:  make([]atomic.Bool, numAlgorithms),
		duration:  make([][]metric.RecordOption, numAlgorithms),
	}
	for _, r := range degradedReasons {
		p.degraded = append(p.degraded, []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(pol, reasonKey.String(r)))})
	}
	for a := range numAlgorithms {
		alg := algorithmKey.String(core.Algorithm(a).String())
		byAlgorithm := metric.WithAttributeSet(attribute.NewSet(pol, alg))
		p.duration[a] = []metric.RecordOption{byAlgorithm}
		p.nearLimit[a] = []metric.AddOption{byAlgorithm}
		for out := range numOutcomes {
			set := attribute.NewSet(pol, alg, outcomeKey.String(httplimit.Outcome(out).String()))
			p.decisions[a*numOutcomes+out] = []metric.AddOption{metric.WithAttributeSet(set)}
		}
	}
	return p
}
