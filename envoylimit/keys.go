package envoylimit

import (
	"fmt"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/core"
)

// key is the key a descriptor is counted under (core then adds its
// prefix): "<domain>:<key>=<value>,<key>=<value>...", each entry as the
// request sent it, or, under share_threshold, '*' and the configured
// pattern, so that every matching value meets on one counter. A
// backslash escapes ':' and '\' in the domain, '=', ',' and '\' in keys,
// ',' and '\' in values, and a value's leading '*': no two descriptors
// share a key unless they are the same. A Go service that wants to share
// a limit with Envoy uses the same key (docs/envoy.md).
func key(dom string, entries []*rlv3.RateLimitDescriptor_Entry, path []*node) string {
	var b strings.Builder
	escape(&b, dom, ":\\")
	b.WriteByte(':')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		escape(&b, e.GetKey(), "=,\\")
		b.WriteByte('=')
		switch v := e.GetValue(); {
		case path != nil && path[i].shared:
			b.WriteByte('*')
			escape(&b, path[i].value, ",\\")
		case strings.HasPrefix(v, "*"):
			b.WriteString(`\*`)
			escape(&b, v[1:], ",\\")
		default:
			escape(&b, v, ",\\")
		}
	}
	return b.String()
}

func escape(b *strings.Builder, s, special string) {
	if !strings.ContainsAny(s, special) {
		b.WriteString(s)
		return
	}
	for i := range len(s) {
		if strings.IndexByte(special, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
}

// series returns the counters of a matched descriptor: its configured
// name's, unless detailed_metric or value_to_metric put the request's
// values in it, as envoyproxy/ratelimit names them.
func (m *metrics) series(dom string, entries []*rlv3.RateLimitDescriptor_Entry, path []*node) *counters {
	leaf := path[len(path)-1]
	if m == nil || leaf.static && !leaf.detailed {
		return leaf.metrics
	}
	var names [2]string
	for i := range min(2, len(path)) {
		n, v := path[i], entries[i].GetValue()
		switch {
		case n.shared && (leaf.detailed || n.toMetric):
			names[i] = n.key + "_" + n.value
		case leaf.detailed || n.toMetric && n.value != v:
			names[i] = n.key + "_" + v
		default:
			names[i] = n.stat
		}
	}
	if c := m.counters(dom, names[0], names[1]); c != nil {
		return c
	}
	return leaf.metrics
}

// overrideSeries names a descriptor Envoy sent its own limit for, as
// envoyproxy/ratelimit does: "key_value" for each of its first two entries.
func (m *metrics) overrideSeries(dom string, entries []*rlv3.RateLimitDescriptor_Entry) *counters {
	if m == nil {
		return nil
	}
	var names [2]string
	for i := range min(2, len(entries)) {
		names[i] = entries[i].GetKey()
		if v := entries[i].GetValue(); v != "" {
			names[i] += "_" + v
		}
	}
	return m.counters(dom, names[0], names[1])
}

// maxPeriod is core's longest Period (2^46 µs, about 2.2 years).
const maxPeriod = time.Duration(1<<46) * time.Microsecond

// override compiles a limit Envoy sent with a descriptor (its route's
// configuration), a fixed window of its unit times unit_multiplier.
func override(o *rlv3.RateLimitDescriptor_RateLimitOverride) (*limit, error) {
	u := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	var period time.Duration
	for _, x := range units {
		if x.unit == u {
			period = x.period
		}
	}
	if period == 0 {
		return nil, fmt.Errorf("descriptor limit: unknown unit %v", o.GetUnit())
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	if time.Duration(mult) > maxPeriod/period {
		return nil, fmt.Errorf("descriptor limit: %d x %v is longer than %v", mult, o.GetUnit(), maxPeriod)
	}
	l := &limit{
		current: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u, UnitMultiplier: o.GetUnitMultiplier()},
		rule:    core.Limit{Algorithm: core.FixedWindow, Rate: int(o.GetRequestsPerUnit()), Period: period * time.Duration(mult)},
		window:  period * time.Duration(mult),
	}
	if l.rule.Rate > 0 {
		if err := l.rule.Validate(); err != nil {
			return nil, fmt.Errorf("descriptor limit %d per %d %v: %w", o.GetRequestsPerUnit(), mult, o.GetUnit(), err)
		}
	}
	return l, nil
}
