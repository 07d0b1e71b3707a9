package prommetrics_test

import (
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/metricstest"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/prommetrics"
)

// TestDirectDecisions: with WithLimiter, the decisions made on the Limiter
// outside any Policy are counted as a Policy's are (issue 36, item 7,
// found 0 of 70): the 60 direct ones (Allow, AllowAtMost, Wait) under the
// policy "", the 10 of a nethttplimit Transport under its Name, and a
// Redis fault of a Refund as a Redis error.
func TestDirectDecisions(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second), core.WithLocalFallback(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	c := prommetrics.New(prommetrics.WithLimiter(l))
	got := metricstest.DirectRun(t, l, mr, func(t *testing.T) map[string]float64 { return gather(t, c) }, "outbound")
	metricstest.Match(t, got, map[string]float64{
		`redlimit_decisions_total{algorithm="token_bucket",outcome="allowed"}`:                   35,
		`redlimit_decisions_total{algorithm="token_bucket",outcome="denied",refused_by="0"}`:     15,
		`redlimit_decisions_total{algorithm="fixed_window",outcome="allowed"}`:                   10,
		`redlimit_decisions_total{algorithm="token_bucket",outcome="allowed",policy="outbound"}`: 10,
		`redlimit_decisions_total{algorithm="token_bucket",outcome="failed_closed"}`:             1,
		`redlimit_near_limit_total{algorithm="token_bucket"}`:                                    9,
		`redlimit_near_limit_total{algorithm="fixed_window"}`:                                    3,
		`redlimit_near_limit_total{algorithm="token_bucket",policy="outbound"}`:                  3,
		`redlimit_decision_duration_seconds{algorithm="token_bucket"}`:                           51,
		`redlimit_decision_duration_seconds{algorithm="fixed_window"}`:                           10,
		`redlimit_decision_duration_seconds{algorithm="token_bucket",policy="outbound"}`:         10,
		`redlimit_redis_errors_total{}`:                                                          2,
		`redlimit_degraded_decisions_total{reason="fail_closed"}`:                                1,
		`redlimit_redis_may_evict{}`:                                                             0,
	})
}
