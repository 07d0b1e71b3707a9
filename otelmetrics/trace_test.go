package otelmetrics_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/metricstest"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/otelmetrics"
)

// traced is an httplimit.Request whose context carries a span.
type traced struct{ ctx context.Context }

func (r traced) Context() context.Context    { return r.ctx }
func (r traced) RemoteAddr() string          { return r.ip() + ":1234" }
func (r traced) Header(name string) []string { return nil }
func (r traced) Method() string              { return "GET" }
func (r traced) Route() string               { return "/" }
func (r traced) ip() string                  { return r.ctx.Value(ipKey{}).(string) }

type ipKey struct{}

// attrs is a span's attributes by key, as strings.
func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// TestTraceSweep walks both ways of tracing (a span per decision, the
// request's own span) with and without the key, through one Policy whose
// every limit refuses in turn: the Limit is 3 per hour, layer 1 is 2 per
// hour, the InFlight cap 1, a Scope "global" 4 per hour; then Redis fails. Each
// decision is recorded once, with its outcome and the limit that refused;
// a span of its own is a child of the request's span; the request's span
// gets attributes and no span is made; the key is an attribute only when
// asked for.
// Guards: WithTracerProvider's, WithRequestSpan's and WithKeyAttribute's
// godoc, and docs/operations.md's ("Traces") "The key is not an attribute
// ... unless otelmetrics.WithKeyAttribute() asks for it".
func TestTraceSweep(t *testing.T) {
	hourly := func(n int) core.Limit { return core.Limit{Algorithm: core.FixedWindow, Rate: n, Period: time.Hour} }
	global := hourly(4)
	type step struct {
		ip        string
		hold      bool // leave the request in flight
		release   bool // the held request ends first
		fault     bool // Redis fails from this step on
		outcome   string
		refusedBy string
	}
	steps := []step{
		{ip: "192.0.2.1", hold: true, outcome: "allowed"},
		{ip: "192.0.2.1", outcome: "in_flight", refusedBy: "inflight"},
		{ip: "192.0.2.1", release: true, outcome: "allowed"},
		{ip: "192.0.2.1", outcome: "denied", refusedBy: "1"},
		{ip: "192.0.2.2", outcome: "allowed"},
		{ip: "192.0.2.2", outcome: "allowed"},
		{ip: "192.0.2.3", outcome: "denied", refusedBy: "global"},
		{ip: "192.0.2.3", fault: true, outcome: "failed_open"},
	}
	for _, mode := range []string{"span", "request span"} {
		for _, withKey := range []bool{false, true} {
			name := mode
			if withKey {
				name += ", with the key"
			}
			t.Run(name, func(t *testing.T) {
				exp := tracetest.NewInMemoryExporter()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
				t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts := []otelmetrics.Option{otelmetrics.WithRequestSpan()}
				if mode == "span" {
					opts = []otelmetrics.Option{otelmetrics.WithTracerProvider(tp)}
				}
				if withKey {
					opts = append(opts, otelmetrics.WithKeyAttribute())
				}
				o, err := otelmetrics.New(noop.NewMeterProvider().Meter("test"), opts...)
				if err != nil {
					t.Fatal(err)
				}
				mr, rdb := redistest.Mini(t)
				// The fallback off: step 8 is the failed-open span.
				l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second), core.WithLocalFallback(0, 0))
				if err != nil {
					t.Fatal(err)
				}
				last := new(metricstest.LastDecision)
				p, err := httplimit.New(httplimit.Config{Name: "api", Limiter: l, Limit: hourly(3), Layers: []core.Limit{hourly(2)},
					InFlight: 1, Scopes: []httplimit.Scope{{Name: "global", Limit: global}}, Observers: []httplimit.Observer{o, last}})
				if err != nil {
					t.Fatal(err)
				}
				var release func()
				for i, s := range steps {
					if s.release {
						release()
					}
					if s.fault {
						mr.SetError("MASTERDOWN the test's fault")
					}
					exp.Reset()
					ctx, req := tp.Tracer("test").Start(context.WithValue(t.Context(), ipKey{}, s.ip), "request")
					var d httplimit.Decision
					if s.hold {
						release = metricstest.Hold(t, p, traced{ctx})
						d = last.Get()
					} else {
						d = metricstest.Serve(p, traced{ctx})
					}
					req.End()
					spans := exp.GetSpans()
					checkTraceStep(t, i+1, mode, withKey, spans, req.SpanContext(), d)
					if got := d.Outcome.String(); got != s.outcome || d.RefusedBy != s.refusedBy {
						t.Fatalf("step %d: %s refused by %q, want %s by %q", i+1, got, d.RefusedBy, s.outcome, s.refusedBy)
					}
				}
			})
		}
	}
}

// checkTraceStep checks the spans one decision d left: the request's, and
// in span mode the decision's, child of parent, with d's attributes.
func checkTraceStep(t *testing.T, step int, mode string, withKey bool, spans tracetest.SpanStubs, parent trace.SpanContext, d httplimit.Decision) {
	t.Helper()
	var mine *tracetest.SpanStub
	for i := range spans {
		if s := &spans[i]; s.Name == "redlimit.decide" {
			if mine != nil {
				t.Fatalf("step %d: two redlimit.decide spans", step)
			}
			mine = s
		}
	}
	want := map[string]string{
		"redlimit.policy": "api", "redlimit.algorithm": "fixed_window", "redlimit.outcome": d.Outcome.String(),
		"redlimit.failed_open": "false", "redlimit.cached": "false", "redlimit.leased": "false", "redlimit.fallback": "false",
	}
	if d.Outcome == httplimit.OutcomeFailedOpen {
		want["redlimit.failed_open"] = "true"
	}
	if d.RefusedBy != "" {
		want["redlimit.refused_by"] = d.RefusedBy
	}
	if withKey {
		want["redlimit.key"] = d.Key
	}
	var got map[string]string
	switch mode {
	case "span":
		if mine == nil || len(spans) != 2 {
			t.Fatalf("step %d: %d spans, want the request's and one redlimit.decide", step, len(spans))
		}
		if mine.Parent.SpanID() != parent.SpanID() || mine.SpanContext.TraceID() != parent.TraceID() {
			t.Errorf("step %d: redlimit.decide's parent is %v, want the request's span %v", step, mine.Parent.SpanID(), parent.SpanID())
		}
		if dur := mine.EndTime.Sub(mine.StartTime); dur < d.Latency {
			t.Errorf("step %d: the span lasts %v, less than the decision's latency %v", step, dur, d.Latency)
		}
		if failed := d.Outcome == httplimit.OutcomeFailedOpen; failed != (mine.Status.Code == codes.Error) {
			t.Errorf("step %d: status %v for %v", step, mine.Status, d.Outcome)
		}
		got = attrs(mine.Attributes)
		t.Logf("step %d, %s: span %q, parent %s, %v, attributes %v", step, d.Outcome, mine.Name, mine.Parent.SpanID(),
			mine.EndTime.Sub(mine.StartTime), mine.Attributes)
	default:
		if mine != nil || len(spans) != 1 {
			t.Fatalf("step %d: %d spans (redlimit.decide among them: %v), want the request's alone", step, len(spans), mine != nil)
		}
		got = attrs(spans[0].Attributes)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("step %d: %s = %q, want %q", step, k, got[k], w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && k != "redlimit.latency" {
			t.Errorf("step %d: unexpected attribute %s = %q (no key unless asked for)", step, k, got[k])
		}
	}
	if _, ok := got["redlimit.latency"]; !ok {
		t.Errorf("step %d: no redlimit.latency", step)
	}
}

// TestTraceFlags: cached, leased, fallback and a LeakyBucket wait show in
// a decision's span, whose start is its latency and wait before its end.
func TestTraceFlags(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	o, err := otelmetrics.New(noop.NewMeterProvider().Meter("test"), otelmetrics.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		d    httplimit.Decision
		want map[string]string
		took time.Duration
	}{
		{"cached", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeDenied, RefusedBy: "0", Result: core.Result{Cached: true}},
			map[string]string{"redlimit.cached": "true", "redlimit.refused_by": "0"}, 0},
		{"leased", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed, Latency: time.Millisecond, Result: core.Result{Allowed: true, Leased: true}},
			map[string]string{"redlimit.leased": "true", "redlimit.latency": "0.001"}, time.Millisecond},
		{"fallback", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed, Result: core.Result{Allowed: true, Fallback: true}},
			map[string]string{"redlimit.fallback": "true"}, 0},
		{"waited", httplimit.Decision{Policy: "api", Outcome: httplimit.OutcomeAllowed, Limit: core.Limit{Algorithm: core.LeakyBucket},
			Latency: time.Millisecond, Result: core.Result{Allowed: true, Delay: time.Second}},
			map[string]string{"redlimit.delay": "1", "redlimit.algorithm": "leaky_bucket"}, time.Second + time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp.Reset()
			o.Observe(tt.d)
			spans := exp.GetSpans()
			if len(spans) != 1 || spans[0].Parent.IsValid() {
				t.Fatalf("%d spans (%v): want one root span, a Decision made by hand having no request span", len(spans), spans)
			}
			got := attrs(spans[0].Attributes)
			for k, w := range tt.want {
				if got[k] != w {
					t.Errorf("%s = %q, want %q", k, got[k], w)
				}
			}
			if took := spans[0].EndTime.Sub(spans[0].StartTime); took != tt.took {
				t.Errorf("the span lasts %v, want %v", took, tt.took)
			}
		})
	}
}

// TestNoTracing: without a tracing option the request's span gets nothing.
func TestNoTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	o, err := otelmetrics.New(noop.NewMeterProvider().Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	_, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p, err := httplimit.New(httplimit.Config{Limiter: l, Observers: []httplimit.Observer{o}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, req := tp.Tracer("test").Start(context.WithValue(t.Context(), ipKey{}, "192.0.2.1"), "request")
	metricstest.Serve(p, traced{ctx})
	req.End()
	if spans := exp.GetSpans(); len(spans) != 1 || slices.ContainsFunc(spans[0].Attributes, func(kv attribute.KeyValue) bool {
		return strings.HasPrefix(string(kv.Key), "redlimit.")
	}) {
		t.Errorf("spans %v: want the request's, without redlimit attributes", spans)
	}
}

// TestRequestSpanAllocs: under WithRequestSpan a request without a
// recording span costs Observe no allocation.
// Guards: WithRequestSpan's "A request without a recording span gets
// nothing".
func TestRequestSpanAllocs(t *testing.T) {
	o, _ := newObserver(t, otelmetrics.WithRequestSpan(), otelmetrics.WithKeyAttribute())
	d := httplimit.Decision{Policy: "api", Key: "ip:192.0.2.1", Outcome: httplimit.OutcomeDenied, RefusedBy: "1"}
	o.Observe(d)
	if got := testing.AllocsPerRun(100, func() { o.Observe(d) }); got != 0 {
		t.Errorf("Observe allocates %v times per call, want 0", got)
	}
}
