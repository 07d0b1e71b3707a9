package envoylimit

import (
	"fmt"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/core"
)

// A domain compiles to a tree: each node one configured descriptor entry,
// its children by key, each key's children found by exact value first,
// then the first wildcard (in file order) the value matches, then the
// entry without a value; as envoyproxy/ratelimit looks them up.

type domain struct {
	name string
	file string // where it was configured, for errors
	top  level
}

type level map[string]*choices // by key

type choices struct {
	exact map[string]*node // by value, a wildcard's too
	wild  []*node          // in file order
	any   *node            // the key without a value
}

type node struct {
	key, value string
	parts      []string // a wildcard value split at '*'; nil for others
	shared     bool     // share_threshold: every matching value counts as one
	detailed   bool     // detailed_metric
	toMetric   bool     // value_to_metric
	stat       string   // its part of a metric's name: key, key_value or key_pattern
	limit      *limit   // nil: no rate_limit here
	children   level
	static     bool      // no part of the metric's name above it comes from the request
	metrics    *counters // the series of its configured name
}

// limit is a rate_limit, compiled.
type limit struct {
	rule      core.Limit    // zero Rate: requests_per_unit 0, every request refused
	window    time.Duration // its unit (times unit_multiplier)
	current   *rlsv3.RateLimitResponse_RateLimit
	unlimited bool
	shadow    bool
	overdraft bool // hits that do not fit are charged anyway (see Server.owe)
	name      string
	replaces  []string
}

// units are the format's units; a month is 30 days and a year 365, in
// windows aligned to the Unix epoch, as envoyproxy/ratelimit counts them,
// unless a calendar is named.
var units = map[string]struct {
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
	period time.Duration
	cal    core.Calendar
}{
	"second": {rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second, core.NoCalendar},
	"minute": {rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute, core.NoCalendar},
	"hour":   {rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour, core.NoCalendar},
	"day":    {rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour, core.Daily},
	"week":   {rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour, core.Weekly},
	"month":  {rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour, core.Monthly},
	"year":   {rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour, core.NoCalendar},
}

func compileDomain(fd fileDomain, file string, m *metrics) (*domain, error) {
	d := &domain{name: fd.name, file: file, top: level{}}
	return d, d.top.add(fd.descriptors, parent{dom: fd.name, static: true}, m)
}

// parent is what a level's nodes inherit: the domain, the names of the
// nodes above (the metric's key1 and key2 come from the first two), the
// composite key for errors, and whether the metric's name is all
// configured so far.
type parent struct {
	dom    string
	names  []string
	where  string
	static bool
}

func (p parent) labels(stat string) (key1, key2 string) {
	names := append(p.names[:len(p.names):len(p.names)], stat)
	if len(names) > 1 {
		key2 = names[1]
	}
	return names[0], key2
}

// add compiles descriptors under p into l.
func (l level) add(fds []fileDescriptor, p parent, m *metrics) error {
	for _, fd := range fds {
		n := &node{key: fd.key, value: fd.value, shared: fd.shared, detailed: fd.detailed, toMetric: fd.toMetric, stat: fd.key}
		if fd.value != "" {
			n.stat += "_" + fd.value
		}
		id := p.where + n.stat
		c := l[fd.key]
		if c == nil {
			c = &choices{exact: map[string]*node{}}
			l[fd.key] = c
		}
		switch {
		case fd.value == "" && c.any != nil, fd.value != "" && c.exact[fd.value] != nil:
			return fmt.Errorf("line %d: duplicate descriptor composite key %q", fd.line, id)
		case fd.value == "":
			c.any = n
		case strings.Contains(fd.value, "*"):
			n.parts = strings.Split(fd.value, "*")
			c.wild = append(c.wild, n)
			c.exact[fd.value] = n // a request's value "ab*" is ab*'s, before any wildcard, as envoyproxy/ratelimit looks it up
		default:
			c.exact[fd.value] = n
		}
		n.static = p.static && !n.toMetric
		if fd.limit != nil {
			var err error
			if n.limit, err = compileLimit(fd.limit, fd.shadow); err != nil {
				return err
			}
			key1, key2 := p.labels(n.stat)
			n.metrics = m.counters(p.dom, key1, key2) // a name with the request's values falls back to it
		}
		if len(fd.descriptors) > 0 {
			n.children = level{}
			sub := parent{dom: p.dom, names: append(p.names[:len(p.names):len(p.names)], n.stat), where: id + ".", static: n.static}
			if len(sub.names) > 2 {
				sub.names = sub.names[:2]
			}
			if err := n.children.add(fd.descriptors, sub, m); err != nil {
				return err
			}
		}
	}
	return nil
}

func compileLimit(fl *fileLimit, shadow bool) (*limit, error) {
	l := &limit{shadow: shadow, overdraft: fl.overdraft, name: fl.name, replaces: fl.replaces}
	u, ok := units[strings.ToLower(fl.unit)]
	bad := func(format string, args ...any) error {
		return fmt.Errorf("line %d: rate_limit: %s", fl.line, fmt.Sprintf(format, args...))
	}
	if fl.unlimited {
		switch {
		case ok:
			return nil, bad("should not specify rate limit unit when unlimited")
		case fl.algorithm != "" || fl.burst != 0 || fl.calendar != "" || fl.overdraft:
			return nil, bad("unlimited takes no algorithm, burst, calendar or overdraft")
		}
		l.unlimited = true
		return l, nil
	}
	if !ok {
		return nil, bad("invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", fl.unit)
	}
	l.current = &rlsv3.RateLimitResponse_RateLimit{Name: fl.name, RequestsPerUnit: fl.rate, Unit: u.unit}
	l.window = u.period
	r, err := coreLimit(fl, u.period, u.cal)
	if err != nil {
		return nil, bad("%v", err)
	}
	l.rule = r
	return l, nil
}

// coreLimit is the Limit a rate_limit enforces: a fixed window of the unit
// by default, as envoyproxy/ratelimit counts, or what the extensions name.
func coreLimit(fl *fileLimit, period time.Duration, cal core.Calendar) (core.Limit, error) {
	r := core.Limit{Algorithm: core.FixedWindow, Rate: int(fl.rate), Period: period}
	if fl.algorithm != "" {
		if err := r.Algorithm.UnmarshalText([]byte(fl.algorithm)); err != nil {
			return r, err
		}
		switch r.Algorithm {
		case core.LeakyBucket, core.Concurrency:
			return r, fmt.Errorf("algorithm %s does not fit Envoy, which cannot delay a request or give a permit back", r.Algorithm)
		}
	}
	if fl.burst > 0 {
		if r.Algorithm != core.TokenBucket {
			return r, fmt.Errorf("burst is for algorithm token_bucket, not %s", r.Algorithm)
		}
		if fl.burst > 1<<40 {
			return r, fmt.Errorf("burst %d is above 2^40", fl.burst)
		}
		r.Burst = int(fl.burst)
	}
	if fl.calendar != "" {
		loc, err := time.LoadLocation(fl.calendar)
		switch {
		case err != nil:
			return r, fmt.Errorf("calendar %q: %v", fl.calendar, err)
		case cal == core.NoCalendar || r.Algorithm != core.FixedWindow:
			return r, fmt.Errorf("calendar is for units day, week and month under fixed_window, not %s under %s", fl.unit, r.Algorithm)
		}
		r.Period, r.Calendar, r.Location = 0, cal, loc
	}
	if fl.rate == 0 { // refuses every request, with no state to keep
		return r, nil
	}
	return r, r.Validate()
}

// match finds the rate_limit of a request's descriptor: the path of nodes
// its entries lead to, or nil when they lead to no rate_limit (a path
// longer or shorter than the configured one, as envoyproxy/ratelimit).
func (d *domain) match(entries []*rlv3.RateLimitDescriptor_Entry, path []*node) []*node {
	l := d.top
	for i, e := range entries {
		c := l[e.GetKey()]
		if c == nil {
			return nil
		}
		v := e.GetValue()
		n := c.exact[v]
		for _, w := range c.wild {
			if n != nil {
				break
			}
			if wildcard(w.parts, v) {
				n = w
			}
		}
		if n == nil {
			n = c.any
		}
		if n == nil {
			return nil
		}
		path = append(path, n)
		if i == len(entries)-1 {
			if n.limit == nil {
				return nil
			}
			return path
		}
		if n.children == nil {
			return nil
		}
		l = n.children
	}
	return nil
}

// wildcard reports whether v matches the pattern split at its stars: each
// star any run of bytes, the parts in order.
func wildcard(parts []string, v string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	v = v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return true
}
