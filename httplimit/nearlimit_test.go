package httplimit

import (
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestNearLimit: an admitted request is near the limit when it left at
// most a fifth of the capacity of the layer its Result reports ("Remaining
// 2 of 10 is near, 3 is not" in Decision.NearLimit's doc), with a smaller
// layer counting by its own capacity; denials and the InFlight permit
// never count.
func TestNearLimit(t *testing.T) {
	for _, tt := range []struct {
		name   string
		cfg    Config
		near   []bool // by request, from the first
		denied int    // the request (1-based) that is denied, 0: none
	}{
		{name: "one limit", cfg: Config{Limit: core.Limit{Rate: 10, Period: time.Hour}},
			near: []bool{false, false, false, false, false, false, false, true, true, true, false}, denied: 11},
		{name: "a smaller layer", cfg: Config{Limit: core.Limit{Rate: 1000, Period: time.Hour},
			Layers: []core.Limit{{Rate: 10, Period: time.Minute}}},
			near: []bool{false, false, false, false, false, false, false, true, true, true, false}, denied: 11},
		{name: "in flight", cfg: Config{Limit: core.Limit{Rate: 1000, Period: time.Hour}, InFlight: 1},
			near: []bool{false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, l := mini(t)
			tt.cfg.Limiter = l
			p := mustNew(t, tt.cfg)
			for i, want := range tt.near {
				d := p.testDecide(from("192.0.2.1"))
				if denied := !d.Proceed(); denied != (i+1 == tt.denied) {
					t.Fatalf("request %d: proceed %v (%v)", i+1, d.Proceed(), d.Outcome)
				}
				if got := d.nearLimit(); got != want {
					t.Errorf("request %d: Remaining %d, NearLimit() = %v, want %v", i+1, d.Result.Remaining, got, want)
				}
			}
		})
	}
}
