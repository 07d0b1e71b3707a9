package prommetrics_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/metricstest"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/prommetrics"
)

// gather returns every sample of c, keyed as `name{label="value",...}` with
// labels sorted and those of empty value left out, as Prometheus stores
// them; a histogram gives its sample count under its own name and its sum
// under name_sum.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("Register: %v", err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetValue() != "" {
					labels = append(labels, l.GetName()+"="+`"`+l.GetValue()+`"`)
				}
			}
			slices.Sort(labels)
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				got[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				got[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				got[key] = float64(m.GetHistogram().GetSampleCount())
				got[strings.Replace(key, "{", "_sum{", 1)] = m.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("%s: unexpected type %v", f.GetName(), f.GetType())
			}
		}
	}
	return got
}

func TestObserveSteps(t *testing.T) {
	c := prommetrics.New()
	steps := []struct {
		name  string
		event httplimit.Decision
		want  map[string]float64 // samples that change, with their new values
	}{
		{"allowed", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed, Latency: 300 * time.Microsecond,
			Result: core.Result{Allowed: true, Remaining: 1}},
			map[string]float64{
				`redlimit_decisions_total{algorithm="token_bucket",outcome="allowed",policy="api"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:         1,
				`redlimit_decision_duration_seconds_sum{algorithm="token_bucket",policy="api"}`:     0.0003,
				`redlimit_redis_errors_total{policy="api"}`:                                         0,
				`redlimit_deny_cache_hits_total{policy="api"}`:                                      0,
				`redlimit_degraded_decisions_total{policy="api",reason="fallback"}`:                 0,
				`redlimit_degraded_decisions_total{policy="api",reason="breaker"}`:                  0,
				`redlimit_degraded_decisions_total{policy="api",reason="fail_open"}`:                0,
				`redlimit_degraded_decisions_total{policy="api",reason="fail_closed"}`:              0,
			}},
		{"denied", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, Latency: 200 * time.Microsecond,
			Result: core.Result{RetryAfter: time.Second}},
			map[string]float64{
				`redlimit_decisions_total{algorithm="token_bucket",outcome="denied",policy="api"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:        2,
				`redlimit_decision_duration_seconds_sum{algorithm="token_bucket",policy="api"}`:    0.0005,
			}},
		{"deny cache hit", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied,
			Result: core.Result{RetryAfter: time.Second, Cached: true}},
			map[string]float64{
				`redlimit_decisions_total{algorithm="token_bucket",outcome="denied",policy="api"}`: 2,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:        3,
				`redlimit_deny_cache_hits_total{policy="api"}`:                                     1,
			}},
		{"failed open", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeFailedOpen, Latency: 50 * time.Millisecond, Err: metricstest.ErrRedis, Degraded: "fail_open"},
			map[string]float64{
				`redlimit_degraded_decisions_total{policy="api",reason="fail_open"}`:                    1,
				`redlimit_decisions_total{algorithm="token_bucket",outcome="failed_open",policy="api"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:             4,
				`redlimit_decision_duration_seconds_sum{algorithm="token_bucket",policy="api"}`:         0.0505,
				`redlimit_redis_errors_total{policy="api"}`:                                             1,
			}},
		{"fallback", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed,
			Result: core.Result{Allowed: true, Fallback: true}, Degraded: "fallback"},
			map[string]float64{
				`redlimit_decisions_total{algorithm="token_bucket",outcome="allowed",policy="api"}`: 2,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:         5,
				`redlimit_degraded_decisions_total{policy="api",reason="fallback"}`:                 1,
			}},
		{"other policy and algorithm, failed closed", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: core.SlidingWindow},
			Outcome: httplimit.OutcomeFailedClosed, Latency: time.Millisecond, Err: metricstest.ErrRedis, Degraded: "fail_closed"},
			map[string]float64{
				`redlimit_decisions_total{algorithm="sliding_window",outcome="failed_closed",policy="login"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="sliding_window",policy="login"}`:               1,
				`redlimit_decision_duration_seconds_sum{algorithm="sliding_window",policy="login"}`:           0.001,
				`redlimit_redis_errors_total{policy="login"}`:                                                 1,
				`redlimit_degraded_decisions_total{policy="login",reason="fail_closed"}`:                      1,
				`redlimit_deny_cache_hits_total{policy="login"}`:                                              0,
				`redlimit_degraded_decisions_total{policy="login",reason="fallback"}`:                         0,
				`redlimit_degraded_decisions_total{policy="login",reason="breaker"}`:                          0,
				`redlimit_degraded_decisions_total{policy="login",reason="fail_open"}`:                        0,
			}},
		{"the circuit open, failed closed", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: core.SlidingWindow},
			Outcome: httplimit.OutcomeFailedClosed, Err: metricstest.ErrRedis, Degraded: "breaker"},
			map[string]float64{
				`redlimit_decisions_total{algorithm="sliding_window",outcome="failed_closed",policy="login"}`: 2,
				`redlimit_decision_duration_seconds{algorithm="sliding_window",policy="login"}`:               2,
				`redlimit_redis_errors_total{policy="login"}`:                                                 2,
				`redlimit_degraded_decisions_total{policy="login",reason="breaker"}`:                          1,
			}},
		{"canceled", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: core.LeakyBucket}, Outcome: httplimit.OutcomeCanceled,
			Result: core.Result{Allowed: true, Delay: time.Second}},
			map[string]float64{
				`redlimit_decisions_total{algorithm="leaky_bucket",outcome="canceled",policy="login"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="leaky_bucket",policy="login"}`:          1,
			}},
		{"unknown algorithm and outcome still counted", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: 42}, Outcome: 9},
			map[string]float64{
				`redlimit_decisions_total{algorithm="Algorithm(42)",outcome="Outcome(9)",policy="login"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="Algorithm(42)",policy="login"}`:            1,
			}},
		{"denied by layer 1", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "1",
			Result: core.Result{RetryAfter: time.Hour}},
			map[string]float64{
				`redlimit_decisions_total{algorithm="token_bucket",outcome="denied",policy="api",refused_by="1"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:                       6,
			}},
		{"denied by layer 1 again, then by the Global", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "1"},
			map[string]float64{
				`redlimit_decisions_total{algorithm="token_bucket",outcome="denied",policy="api",refused_by="1"}`: 2,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:                       7,
			}},
		{"the Global", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "global"},
			map[string]float64{
				`redlimit_decisions_total{algorithm="token_bucket",outcome="denied",policy="api",refused_by="global"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:                            8,
			}},
		{"the InFlight permit", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeInFlight, RefusedBy: "inflight"},
			map[string]float64{
				`redlimit_decisions_total{algorithm="token_bucket",outcome="in_flight",policy="api",refused_by="inflight"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`:                                 9,
			}},
		{"a newer algorithm, refused", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: 42}, Outcome: httplimit.OutcomeDenied, RefusedBy: "0"},
			map[string]float64{
				`redlimit_decisions_total{algorithm="Algorithm(42)",outcome="denied",policy="login",refused_by="0"}`: 1,
				`redlimit_decision_duration_seconds{algorithm="Algorithm(42)",policy="login"}`:                       2,
			}},
	}
	want := map[string]float64{}
	for _, s := range steps {
		c.Observe(s.event)
		for k, v := range s.want {
			want[k] = v
		}
		t.Run(s.name, func(t *testing.T) { metricstest.Match(t, gather(t, c), want) })
	}
}

func TestNamespaceAndBuckets(t *testing.T) {
	c := prommetrics.New(prommetrics.WithNamespace("edge"), prommetrics.WithBuckets([]float64{0.001, 0.01}),
		prommetrics.WithConstLabels(prometheus.Labels{"region": "eu"}))
	c.Observe(httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, Latency: 5 * time.Millisecond})
	got := gather(t, c)
	key := `edge_decisions_total{algorithm="token_bucket",outcome="denied",policy="api",region="eu"}`
	if got[key] != 1 {
		t.Errorf("%s = %v, want 1 (have %v)", key, got[key], got)
	}
	// 5ms lands in the +Inf bucket only: buckets were replaced.
	err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP edge_decision_duration_seconds Time the limiter took to decide, in seconds, without any leaky-bucket wait.
# TYPE edge_decision_duration_seconds histogram
edge_decision_duration_seconds_bucket{algorithm="token_bucket",policy="api",region="eu",le="0.001"} 0
edge_decision_duration_seconds_bucket{algorithm="token_bucket",policy="api",region="eu",le="0.01"} 1
edge_decision_duration_seconds_bucket{algorithm="token_bucket",policy="api",region="eu",le="+Inf"} 1
edge_decision_duration_seconds_sum{algorithm="token_bucket",policy="api",region="eu"} 0.005
edge_decision_duration_seconds_count{algorithm="token_bucket",policy="api",region="eu"} 1
`), "edge_decision_duration_seconds")
	if err != nil {
		t.Error(err)
	}
}

func TestNoKeyLabelAndLint(t *testing.T) {
	c := prommetrics.New()
	// A Decision does not carry its key, so no series can: the series are
	// per policy, however many decisions (and keys) it saw.
	for range 100 {
		c.Observe(httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed})
	}
	// decisions, near_limit (made by the first allowed), duration, and the
	// per-policy counters: Redis errors, deny cache hits, and the four
	// reasons of degraded decisions.
	if got, want := testutil.CollectAndCount(c), 9; got != want {
		t.Errorf("CollectAndCount = %d, want %d", got, want)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestPolicyOnMiniredis(t *testing.T) {
	c := prommetrics.New()
	const (
		allowed  = `redlimit_decisions_total{algorithm="token_bucket",outcome="allowed",policy="api"}`
		denied   = `redlimit_decisions_total{algorithm="token_bucket",outcome="denied",policy="api",refused_by="0"}`
		open     = `redlimit_decisions_total{algorithm="token_bucket",outcome="failed_open",policy="api"}`
		near     = `redlimit_near_limit_total{algorithm="token_bucket",policy="api"}`
		errs     = `redlimit_redis_errors_total{policy="api"}`
		duration = `redlimit_decision_duration_seconds{algorithm="token_bucket",policy="api"}`
	)
	metricstest.PolicyRun(t, c, metricstest.Series{Allowed: allowed, Denied: denied, FailedOpen: open, NearLimit: near, RedisErrors: errs, Duration: duration},
		func(t *testing.T) map[string]float64 { return gather(t, c) })
}

// TestObserveAllocs pins that Observe allocates nothing once its children
// exist: for a denial, for an allowed request near the limit, and for the
// last outcome and algorithm httplimit and core define.
func TestObserveAllocs(t *testing.T) {
	c := prommetrics.New()
	events := []httplimit.Decision{
		{Policy: "api", Outcome: httplimit.OutcomeDenied, Err: metricstest.ErrRedis, Result: core.Result{Cached: true, Fallback: true}, Degraded: "fallback"},
		{Policy: "api", Outcome: httplimit.OutcomeFailedClosed, Err: metricstest.ErrRedis, Degraded: "fail_closed"},
		{Policy: "api", Outcome: httplimit.OutcomeAllowed, Limit: core.PerMinute(10), Result: core.Result{Allowed: true, Remaining: 1}},
		{Policy: "api", Outcome: httplimit.OutcomeInFlight, Limit: core.Limit{Algorithm: core.Concurrency}},
		{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "1", Limit: core.PerMinute(10)},
		{Policy: "api", Outcome: httplimit.OutcomeInFlight, RefusedBy: "inflight", Limit: core.PerMinute(10)},
	}
	for _, e := range events {
		c.Observe(e)
		if got := testing.AllocsPerRun(100, func() { c.Observe(e) }); got != 0 {
			t.Errorf("Observe(%v, %v) allocates %v times per call, want 0", e.Outcome, e.Limit.Algorithm, got)
		}
	}
}

// TestNearLimit: near_limit_total counts what metricstest.NearLimitCases
// say, labelled by policy and algorithm only.
func TestNearLimit(t *testing.T) {
	for _, tc := range metricstest.NearLimitCases {
		t.Run(tc.Name, func(t *testing.T) {
			c := prommetrics.New()
			c.Observe(tc.Decision)
			key := `redlimit_near_limit_total{algorithm="` + tc.Decision.Limit.Algorithm.String() + `",policy="api"}`
			want := 0.0
			if tc.Near {
				want = 1
			}
			if got := gather(t, c)[key]; got != want {
				t.Errorf("%s = %v, want %v", key, got, want)
			}
		})
	}
}

func TestNearLimitOnPolicy(t *testing.T) {
	c := prommetrics.New()
	metricstest.NearLimitRun(t, c, `redlimit_near_limit_total{algorithm="token_bucket",policy="api"}`,
		func(t *testing.T) map[string]float64 { return gather(t, c) })
}

// TestHelpListsEveryOutcome: the help of decisions_total names every
// outcome httplimit defines, in order, in_flight included.
func TestHelpListsEveryOutcome(t *testing.T) {
	c := prommetrics.New()
	c.Observe(httplimit.Decision{Policy: "api"}) // a vector with no child gathers nothing
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	outcomes := metricstest.Outcomes()
	if !slices.Contains(outcomes, httplimit.OutcomeInFlight.String()) {
		t.Fatalf("metricstest.Outcomes() = %q, without %q", outcomes, httplimit.OutcomeInFlight)
	}
	for _, f := range families {
		if f.GetName() != "redlimit_decisions_total" {
			continue
		}
		if want := "(" + strings.Join(outcomes, ", ") + ")"; !strings.Contains(f.GetHelp(), want) {
			t.Errorf("help %q does not list the outcomes %s", f.GetHelp(), want)
		}
		return
	}
	t.Fatal("no redlimit_decisions_total gathered")
}

func BenchmarkObserve(b *testing.B) {
	c := prommetrics.New()
	e := httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed, Latency: 300 * time.Microsecond,
		Result: core.Result{Allowed: true, Remaining: 9}}
	c.Observe(e) // warm: the children exist
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Observe(e)
		}
	})
}

func BenchmarkObserveMixed(b *testing.B) {
	c := prommetrics.New()
	events := []httplimit.Decision{
		{Policy: "api", Outcome: httplimit.OutcomeAllowed, Latency: 300 * time.Microsecond},
		{Policy: "api", Outcome: httplimit.OutcomeDenied, Result: core.Result{Cached: true}},
		{Policy: "login", Limit: core.Limit{Algorithm: core.SlidingWindow}, Outcome: httplimit.OutcomeFailedOpen, Err: metricstest.ErrRedis, Degraded: "fail_open"},
		{Policy: "login", Limit: core.Limit{Algorithm: core.SlidingWindow}, Outcome: httplimit.OutcomeAllowed, Result: core.Result{Fallback: true}, Degraded: "fallback"},
	}
	for _, e := range events {
		c.Observe(e)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c.Observe(events[i%len(events)])
			i++
		}
	})
}

func ExampleNew() {
	reg := prometheus.NewRegistry()
	c := prommetrics.New()
	reg.MustRegister(c)
	// Pass c as httplimit.Config.Observers; here, one decision by hand.
	c.Observe(httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied})
	n, err := testutil.GatherAndCount(reg, "redlimit_decisions_total", "redlimit_redis_errors_total")
	fmt.Println(n, err)
	// Output: 2 <nil>
}

// TestLimiterHealth: with WithLimiter, a Redis that may evict the Limiter's
// keys shows as redlimit_redis_may_evict 1, beside its evicted_keys.
func TestLimiterHealth(t *testing.T) {
	c := prommetrics.New(prommetrics.WithLimiter(metricstest.EvictingLimiter(t)))
	metricstest.Match(t, gather(t, c), map[string]float64{
		"redlimit_redis_may_evict{}":    1,
		"redlimit_redis_evicted_keys{}": 0,
	})
}

func TestMain(m *testing.M) { redistest.Main(m) }
