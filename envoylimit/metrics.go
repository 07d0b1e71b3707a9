package envoylimit

import (
	"regexp"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the series envoyproxy/ratelimit's users already chart and
// alert on, under the names its Prometheus mapping gives them: per
// domain and the first two parts of a descriptor's name (key1, key2).
type metrics struct {
	total, over, near, within, shadow *prometheus.CounterVec
	loadOK, loadErr                   prometheus.Counter
	errors                            *prometheus.CounterVec
	collectors                        []prometheus.Collector // each of the above

	mu  sync.Mutex
	set map[[3]string]*counters
}

// counters are one descriptor name's series.
type counters struct {
	total, over, near, within, shadow prometheus.Counter
}

// maxSeries bounds the names a request can create (detailed_metric and
// value_to_metric put the request's values in them); beyond it, new names
// are counted under their configured one.
const maxSeries = 10000

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	vec := func(stat, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_" + stat,
			Help: help,
		}, []string{"domain", "key1", "key2"})
	}
	m := &metrics{
		total:  vec("total_hits", "Hits (hits_addend units) of the descriptors that matched a rate_limit."),
		over:   vec("over_limit", "Hits refused by the descriptor's limit."),
		near:   vec("near_limit", "Hits admitted beyond 80% of the descriptor's limit."),
		within: vec("within_limit", "Hits admitted."),
		shadow: vec("shadow_mode", "Hits a shadow_mode limit would have refused, admitted."),
		loadOK: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_success", Help: "Configurations loaded.",
		}),
		loadErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_error", Help: "Configurations refused (the last good one stays).",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_should_rate_limit_error", Help: "Calls that ended in an error, by cause.",
		}, []string{"err_type"}),
		set: map[[3]string]*counters{},
	}
	m.collectors = []prometheus.Collector{m.total, m.over, m.near, m.within, m.shadow, m.loadOK, m.loadErr, m.errors}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			m.collectors = m.collectors[:i]
			m.unregister(reg)
			return nil, err
		}
	}
	return m, nil
}

// unregister takes the series off reg, so that a New that failed leaves
// reg as it found it, for the next New.
func (m *metrics) unregister(reg prometheus.Registerer) {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		reg.Unregister(c)
	}
}

// counters returns the series of a name, made once; nil without metrics,
// or when the name is new and maxSeries names exist already.
func (m *metrics) counters(domain, key1, key2 string) *counters {
	if m == nil {
		return nil
	}
	id := [3]string{domain, sanitize(key1), sanitize(key2)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.set[id]; c != nil || len(m.set) >= maxSeries {
		return c
	}
	c := &counters{
		total:  m.total.WithLabelValues(id[:]...),
		over:   m.over.WithLabelValues(id[:]...),
		near:   m.near.WithLabelValues(id[:]...),
		within: m.within.WithLabelValues(id[:]...),
		shadow: m.shadow.WithLabelValues(id[:]...),
	}
	m.set[id] = c
	return c
}

func (m *metrics) loaded(err error) {
	switch {
	case m == nil:
	case err == nil:
		m.loadOK.Inc()
	default:
		m.loadErr.Inc()
	}
}

func (m *metrics) failed(errType string) {
	if m != nil {
		m.errors.WithLabelValues(errType).Inc()
	}
}

var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitize makes a name part as envoyproxy/ratelimit makes its stat
// names: ':' and '|' become '_', and so do the dots of an IPv4 address.
func sanitize(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	if strings.Count(s, ".") < 3 {
		return s
	}
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}
