package httplimit

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Guards: Finish "settles a reported cost" of any size (Config.Settle):
// a report above the largest charge core took was refused, and Finish
// dropped the error, so the 1000/min with an estimate of 10 was
// refused after a report of 2^20 and admitted 20 of 20 after one of 2^40,
// 2^40+1 or 2^62. The same through Config.Layers (SettleLayers), the
// Global (Settle on its key), an InFlight permit beside the rate and the
// issue's 99991 per 24 hours.
func TestSettleHugeReportIsCharged(t *testing.T) {
	minute := core.PerMinute(1000)
	daily := core.Limit{Rate: 99991, Period: 24 * time.Hour}
	configs := map[string]func(l *core.Limiter) Config{
		"limit": func(l *core.Limiter) Config { return Config{Limiter: l, Limit: minute} },
		"layers": func(l *core.Limiter) Config {
			return Config{Limiter: l, Limit: minute, Layers: []core.Limit{{Algorithm: core.FixedWindow, Rate: 5000, Period: time.Hour}}}
		},
		"global": func(l *core.Limiter) Config {
			return Config{Limiter: l, Limit: core.PerMinute(1 << 30), Scopes: []Scope{{Name: "global", Limit: minute}}}
		},
		"inflight": func(l *core.Limiter) Config { return Config{Limiter: l, Limit: minute, InFlight: 5} },
		"daily":    func(l *core.Limiter) Config { return Config{Limiter: l, Limit: daily} },
	}
	for name, config := range configs {
		for _, report := range []int{1 << 20, 1 << 40, 1<<40 + 1, 1 << 62, math.MaxInt} {
			t.Run(fmt.Sprintf("%s/%d", name, report), func(t *testing.T) {
				_, _, l := mini(t)
				cfg := config(l)
				cfg.Cost, cfg.Settle = func(Request) int { return 10 }, true
				p := mustNew(t, cfg)
				settled(t, p, "192.0.2.1", http.StatusOK, func(ctx context.Context) {
					if !p.ReportCost(ctx, report) {
						t.Fatal("ReportCost = false, want the report taken")
					}
				})
				admitted := 0
				for range 20 {
					d := p.testDecide(from("192.0.2.1"))
					if d.Proceed() {
						admitted++
						d.finish(http.StatusOK)
					}
				}
				if admitted != 0 {
					t.Errorf("after a report of %d: %d of 20 admitted, want 0", report, admitted)
				}
			})
		}
	}
}
