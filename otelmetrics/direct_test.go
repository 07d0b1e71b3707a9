package otelmetrics_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/metricstest"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/otelmetrics"
)

// TestDirectDecisions: with WithLimiter, the decisions made on the Limiter
// outside any Policy are recorded as a Policy's are, metrics and spans
// (issue 36, item 7, found 0 of 70): the 60 direct ones (Allow,
// AllowAtMost, Wait) under the policy "", the 10 of a nethttplimit
// Transport under its Name; a Refund that Redis fails is a Redis error and
// a span of its own.
func TestDirectDecisions(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second), core.WithLocalFallback(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	_, reader := newObserver(t, otelmetrics.WithLimiter(l), otelmetrics.WithTracerProvider(tp))
	got := metricstest.DirectRun(t, l, mr, func(t *testing.T) map[string]float64 { return collect(t, reader) }, "outbound")
	metricstest.Match(t, got, map[string]float64{
		`redlimit.decisions{algorithm="token_bucket",outcome="allowed",policy=""}`:               35,
		`redlimit.decisions{algorithm="token_bucket",outcome="denied",policy="",refused_by="0"}`: 15,
		`redlimit.decisions{algorithm="fixed_window",outcome="allowed",policy=""}`:               10,
		`redlimit.decisions{algorithm="token_bucket",outcome="allowed",policy="outbound"}`:       10,
		`redlimit.decisions{algorithm="token_bucket",outcome="failed_closed",policy=""}`:         1,
		`redlimit.near_limit{algorithm="token_bucket",policy=""}`:                                9,
		`redlimit.near_limit{algorithm="fixed_window",policy=""}`:                                3,
		`redlimit.near_limit{algorithm="token_bucket",policy="outbound"}`:                        3,
		`redlimit.decision.duration{algorithm="token_bucket",policy=""}`:                         51,
		`redlimit.decision.duration{algorithm="fixed_window",policy=""}`:                         10,
		`redlimit.decision.duration{algorithm="token_bucket",policy="outbound"}`:                 10,
		`redlimit.redis.errors{policy=""}`:                                                       2,
		`redlimit.degraded.decisions{policy="",reason="fail_closed"}`:                            1,
	})
	names := map[string]int{}
	for _, s := range spans.Ended() {
		names[s.Name()]++
	}
	if names["redlimit.decide"] != 71 || names["redlimit.refund"] != 1 || len(names) != 2 {
		t.Errorf("spans %v, want 71 redlimit.decide (70 decisions, 1 failed) and 1 redlimit.refund", names)
	}
}
