package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestInFlightWithACost: a request of any cost holds one permit ("a request
// holds one permit whatever its cost" in the README), its cost taken by
// the rate layer; the next one in flight is refused for its permit alone,
// and Finish gives both back where the handler failed under CountIf.
func TestInFlightWithACost(t *testing.T) {
	_, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.Limit{Rate: 2000, Period: time.Minute}, InFlight: 1,
		Cost: func(Request) int { return 500 }})
	first := p.Decide(from("192.0.2.1"))
	if !first.Proceed() || first.Result.Remaining != 1500 {
		t.Fatalf("first request of cost 500: %v, Remaining %d, %v; want served, 1500 left", first.Outcome, first.Result.Remaining, first.Err)
	}
	second := p.Decide(from("192.0.2.1"))
	if second.Outcome != OutcomeInFlight {
		t.Fatalf("second request while the first is in flight: %v, %v; want %v", second.Outcome, second.Err, OutcomeInFlight)
	}
	first.Finish(http.StatusOK)
	third := p.Decide(from("192.0.2.1"))
	if !third.Proceed() || third.Result.Remaining != 1000 {
		t.Errorf("after the first finished: %v, Remaining %d, %v; want served, 1000 left (the refused one took nothing)", third.Outcome, third.Result.Remaining, third.Err)
	}
	third.Finish(http.StatusOK)
}
