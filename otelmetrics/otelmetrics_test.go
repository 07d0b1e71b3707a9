package otelmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/metricstest"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/otelmetrics"
)

// newObserver returns an Observer on an SDK meter and the reader to collect
// it with.
func newObserver(t testing.TB, opts ...otelmetrics.Option) (*otelmetrics.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o, err := otelmetrics.New(mp.Meter("test"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return o, r
}

// collect returns every data point of r, keyed as `name{key="value",...}`
// with attributes sorted; a histogram gives its count under its own name and
// its sum under name_sum.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	key := func(name string, s attribute.Set) string {
		var kv []string
		for _, a := range s.ToSlice() {
			kv = append(kv, string(a.Key)+`="`+a.Value.String()+`"`)
		}
		slices.Sort(kv)
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: want a cumulative monotonic sum, got %+v", m.Name, d)
				}
				for _, p := range d.DataPoints {
					got[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[key(m.Name, p.Attributes)] = float64(p.Count)
					got[key(m.Name+"_sum", p.Attributes)] = p.Sum
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return got
}

func TestObserveSteps(t *testing.T) {
	o, r := newObserver(t)
	steps := []struct {
		name  string
		event httplimit.Decision
		want  map[string]float64 // points that change, with their new values
	}{
		{"allowed", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed, Latency: 300 * time.Microsecond,
			Result: core.Result{Allowed: true, Remaining: 1}},
			map[string]float64{
				`redlimit.decisions{algorithm="token_bucket",outcome="allowed",policy="api"}`: 1,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:           1,
				`redlimit.decision.duration_sum{algorithm="token_bucket",policy="api"}`:       0.0003,
			}},
		{"denied", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, Latency: 200 * time.Microsecond,
			Result: core.Result{RetryAfter: time.Second}},
			map[string]float64{
				`redlimit.decisions{algorithm="token_bucket",outcome="denied",policy="api"}`: 1,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:          2,
				`redlimit.decision.duration_sum{algorithm="token_bucket",policy="api"}`:      0.0005,
			}},
		{"deny cache hit", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied,
			Result: core.Result{RetryAfter: time.Second, Cached: true}},
			map[string]float64{
				`redlimit.decisions{algorithm="token_bucket",outcome="denied",policy="api"}`: 2,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:          3,
				`redlimit.deny_cache.hits{policy="api"}`:                                     1,
			}},
		{"failed open", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeFailedOpen, Latency: 50 * time.Millisecond, Err: metricstest.ErrRedis, Degraded: "fail_open"},
			map[string]float64{
				`redlimit.degraded.decisions{policy="api",reason="fail_open"}`:                    1,
				`redlimit.decisions{algorithm="token_bucket",outcome="failed_open",policy="api"}`: 1,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:               4,
				`redlimit.decision.duration_sum{algorithm="token_bucket",policy="api"}`:           0.0505,
				`redlimit.redis.errors{policy="api"}`:                                             1,
			}},
		{"fallback", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed,
			Result: core.Result{Allowed: true, Fallback: true}, Degraded: "fallback"},
			map[string]float64{
				`redlimit.decisions{algorithm="token_bucket",outcome="allowed",policy="api"}`: 2,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:           5,
				`redlimit.degraded.decisions{policy="api",reason="fallback"}`:                 1,
			}},
		{"other policy and algorithm, failed closed", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: core.SlidingWindow},
			Outcome: httplimit.OutcomeFailedClosed, Latency: time.Millisecond, Err: metricstest.ErrRedis, Degraded: "fail_closed"},
			map[string]float64{
				`redlimit.decisions{algorithm="sliding_window",outcome="failed_closed",policy="login"}`: 1,
				`redlimit.decision.duration{algorithm="sliding_window",policy="login"}`:                 1,
				`redlimit.decision.duration_sum{algorithm="sliding_window",policy="login"}`:             0.001,
				`redlimit.redis.errors{policy="login"}`:                                                 1,
				`redlimit.degraded.decisions{policy="login",reason="fail_closed"}`:                      1,
			}},
		{"the circuit open, failed closed", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: core.SlidingWindow},
			Outcome: httplimit.OutcomeFailedClosed, Err: metricstest.ErrRedis, Degraded: "breaker"},
			map[string]float64{
				`redlimit.decisions{algorithm="sliding_window",outcome="failed_closed",policy="login"}`: 2,
				`redlimit.decision.duration{algorithm="sliding_window",policy="login"}`:                 2,
				`redlimit.redis.errors{policy="login"}`:                                                 2,
				`redlimit.degraded.decisions{policy="login",reason="breaker"}`:                          1,
			}},
		{"canceled", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: core.LeakyBucket}, Outcome: httplimit.OutcomeCanceled,
			Result: core.Result{Allowed: true, Delay: time.Second}},
			map[string]float64{
				`redlimit.decisions{algorithm="leaky_bucket",outcome="canceled",policy="login"}`: 1,
				`redlimit.decision.duration{algorithm="leaky_bucket",policy="login"}`:            1,
			}},
		{"unknown algorithm and outcome still counted", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: 42}, Outcome: 9},
			map[string]float64{
				`redlimit.decisions{algorithm="Algorithm(42)",outcome="Outcome(9)",policy="login"}`: 1,
				`redlimit.decision.duration{algorithm="Algorithm(42)",policy="login"}`:              1,
			}},
		{"denied by layer 1", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "1",
			Result: core.Result{RetryAfter: time.Hour}},
			map[string]float64{
				`redlimit.decisions{algorithm="token_bucket",outcome="denied",policy="api",refused_by="1"}`: 1,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:                         6,
			}},
		{"denied by layer 1 again", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "1"},
			map[string]float64{
				`redlimit.decisions{algorithm="token_bucket",outcome="denied",policy="api",refused_by="1"}`: 2,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:                         7,
			}},
		{"the Global", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "global"},
			map[string]float64{
				`redlimit.decisions{algorithm="token_bucket",outcome="denied",policy="api",refused_by="global"}`: 1,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:                              8,
			}},
		{"the InFlight permit", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeInFlight, RefusedBy: "inflight"},
			map[string]float64{
				`redlimit.decisions{algorithm="token_bucket",outcome="in_flight",policy="api",refused_by="inflight"}`: 1,
				`redlimit.decision.duration{algorithm="token_bucket",policy="api"}`:                                   9,
			}},
		{"a newer algorithm, refused", httplimit.Decision{Policy: "login", Limit: core.Limit{Algorithm: 42}, Outcome: httplimit.OutcomeDenied, RefusedBy: "0"},
			map[string]float64{
				`redlimit.decisions{algorithm="Algorithm(42)",outcome="denied",policy="login",refused_by="0"}`: 1,
				`redlimit.decision.duration{algorithm="Algorithm(42)",policy="login"}`:                         2,
			}},
	}
	want := map[string]float64{}
	for _, s := range steps {
		o.Observe(s.event)
		for k, v := range s.want {
			want[k] = v
		}
		t.Run(s.name, func(t *testing.T) { metricstest.Match(t, collect(t, r), want) })
	}
}

func TestNamespaceAndBuckets(t *testing.T) {
	o, r := newObserver(t, otelmetrics.WithNamespace("edge"), otelmetrics.WithBuckets([]float64{0.001, 0.01}))
	o.Observe(httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, Latency: 5 * time.Millisecond})
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		names = append(names, m.Name+" "+m.Unit)
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
			p := h.DataPoints[0]
			if got, want := p.Bounds, []float64{0.001, 0.01}; !slices.Equal(got, want) {
				t.Errorf("Bounds = %v, want %v", got, want)
			}
			if got, want := p.BucketCounts, []uint64{0, 1, 0}; !slices.Equal(got, want) {
				t.Errorf("BucketCounts = %v, want %v", got, want)
			}
		}
	}
	slices.Sort(names)
	if got, want := names, []string{"edge.decision.duration s", "edge.decisions {decision}"}; !slices.Equal(got, want) {
		t.Errorf("instruments = %q, want %q", got, want)
	}
}

func TestDefaultBuckets(t *testing.T) {
	o, r := newObserver(t)
	o.Observe(httplimit.Decision{Policy: "api", Latency: 700 * time.Microsecond})
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
			if got, want := h.DataPoints[0].Bounds, []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}; !slices.Equal(got, want) {
				t.Errorf("Bounds = %v, want %v", got, want)
			}
			return
		}
	}
	t.Fatal("no histogram collected")
}

func TestPolicyOnMiniredis(t *testing.T) {
	o, reader := newObserver(t)
	const (
		allowed  = `redlimit.decisions{algorithm="token_bucket",outcome="allowed",policy="api"}`
		denied   = `redlimit.decisions{algorithm="token_bucket",outcome="denied",policy="api",refused_by="0"}`
		open     = `redlimit.decisions{algorithm="token_bucket",outcome="failed_open",policy="api"}`
		near     = `redlimit.near_limit{algorithm="token_bucket",policy="api"}`
		errs     = `redlimit.redis.errors{policy="api"}`
		duration = `redlimit.decision.duration{algorithm="token_bucket",policy="api"}`
	)
	metricstest.PolicyRun(t, o, metricstest.Series{Allowed: allowed, Denied: denied, FailedOpen: open, NearLimit: near, RedisErrors: errs, Duration: duration},
		func(t *testing.T) map[string]float64 { return collect(t, reader) })
}

// TestObserveAllocs pins that Observe itself allocates nothing once warm
// (the noop meter adds nothing of its own, so any allocation is ours): for
// a denial, for an allowed request near the limit, and for the last
// outcome and algorithm httplimit and core define, whose attribute sets
// are made once like the others'.
func TestObserveAllocs(t *testing.T) {
	o, err := otelmetrics.New(noop.NewMeterProvider().Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	events := []httplimit.Decision{
		{Policy: "api", Outcome: httplimit.OutcomeDenied, Err: metricstest.ErrRedis, Result: core.Result{Cached: true, Fallback: true}, Degraded: "fallback"},
		{Policy: "api", Outcome: httplimit.OutcomeFailedClosed, Err: metricstest.ErrRedis, Degraded: "breaker"},
		{Policy: "api", Outcome: httplimit.OutcomeAllowed, Limit: core.PerMinute(10), Result: core.Result{Allowed: true, Remaining: 1}},
		{Policy: "api", Outcome: httplimit.OutcomeInFlight, Limit: core.Limit{Algorithm: core.Concurrency}},
		{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "1", Limit: core.PerMinute(10)},
		{Policy: "api", Outcome: httplimit.OutcomeInFlight, RefusedBy: "inflight", Limit: core.PerMinute(10)},
	}
	for _, e := range events {
		o.Observe(e)
		if got := testing.AllocsPerRun(100, func() { o.Observe(e) }); got != 0 {
			t.Errorf("Observe(%v, %v) allocates %v times per call, want 0", e.Outcome, e.Limit.Algorithm, got)
		}
	}
}

// TestNearLimit: redlimit.near_limit counts what metricstest.NearLimitCases
// say, with the attributes policy and algorithm only.
func TestNearLimit(t *testing.T) {
	for _, tc := range metricstest.NearLimitCases {
		t.Run(tc.Name, func(t *testing.T) {
			o, r := newObserver(t)
			o.Observe(tc.Decision)
			key := `redlimit.near_limit{algorithm="` + tc.Decision.Limit.Algorithm.String() + `",policy="api"}`
			want := 0.0
			if tc.Near {
				want = 1
			}
			got := collect(t, r)
			if got[key] != want {
				t.Errorf("%s = %v, want %v", key, got[key], want)
			}
			if _, ok := got[key]; !ok && tc.Decision.Outcome == httplimit.OutcomeAllowed {
				t.Errorf("%s: no point after an allowed request, want one at %v", key, want)
			}
		})
	}
}

func TestNearLimitOnPolicy(t *testing.T) {
	o, r := newObserver(t)
	metricstest.NearLimitRun(t, o, `redlimit.near_limit{algorithm="token_bucket",policy="api"}`,
		func(t *testing.T) map[string]float64 { return collect(t, r) })
}

// TestDescriptionListsEveryOutcome: the description of redlimit.decisions
// names every outcome httplimit defines, in order, in_flight included.
func TestDescriptionListsEveryOutcome(t *testing.T) {
	o, r := newObserver(t)
	o.Observe(httplimit.Decision{Policy: "api"})
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	outcomes := metricstest.Outcomes()
	if !slices.Contains(outcomes, httplimit.OutcomeInFlight.String()) {
		t.Fatalf("metricstest.Outcomes() = %q, without %q", outcomes, httplimit.OutcomeInFlight)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "redlimit.decisions" {
			continue
		}
		if want := "(" + strings.Join(outcomes, ", ") + ")"; !strings.Contains(m.Description, want) {
			t.Errorf("description %q does not list the outcomes %s", m.Description, want)
		}
		return
	}
	t.Fatal("no redlimit.decisions collected")
}

// refusingMeter fails to make one instrument.
type refusingMeter struct{ metric.Meter }

var errRefused = errors.New("refused")

func (m refusingMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, errRefused
}

func TestNewError(t *testing.T) {
	_, err := otelmetrics.New(refusingMeter{noop.NewMeterProvider().Meter("test")})
	if !errors.Is(err, errRefused) || !strings.HasPrefix(err.Error(), "otelmetrics: redlimit.decision.duration: ") {
		t.Errorf("New error = %v, want otelmetrics: redlimit.decision.duration: ... wrapping %v", err, errRefused)
	}
}

func benchmarkObserve(b *testing.B, meter metric.Meter) {
	o, err := otelmetrics.New(meter)
	if err != nil {
		b.Fatal(err)
	}
	e := httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed, Latency: 300 * time.Microsecond,
		Result: core.Result{Allowed: true, Remaining: 9}}
	o.Observe(e) // warm: the policy's attribute sets exist
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.Observe(e)
		}
	})
}

func BenchmarkObserveSDK(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	benchmarkObserve(b, mp.Meter("bench"))
}

func BenchmarkObserveNoop(b *testing.B) {
	benchmarkObserve(b, noop.NewMeterProvider().Meter("bench"))
}

func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o, err := otelmetrics.New(mp.Meter("github.com/redlimit/redlimit"))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Pass o as httplimit.Config.Observers; here, one decision by hand.
	o.Observe(httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied})
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		fmt.Println(m.Name, m.Unit)
	}
	// Output:
	// redlimit.decisions {decision}
	// redlimit.decision.duration s
}

// TestLimiterHealth: with WithLimiter, a Redis that may evict the Limiter's
// keys shows as redlimit.redis.may_evict 1, beside its evicted_keys.
func TestLimiterHealth(t *testing.T) {
	_, r := newObserver(t, otelmetrics.WithLimiter(metricstest.EvictingLimiter(t)))
	metricstest.Match(t, collect(t, r), map[string]float64{
		"redlimit.redis.may_evict{}":    1,
		"redlimit.redis.evicted_keys{}": 0,
	})
}

func TestMain(m *testing.M) { redistest.Main(m) }
