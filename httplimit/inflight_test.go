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
	first := p.testDecide(from("192.0.2.1"))
	if !first.Proceed() || first.Result.Remaining != 1500 {
		t.Fatalf("first request of cost 500: %v, Remaining %d, %v; want served, 1500 left", first.Outcome, first.Result.Remaining, first.Err)
	}
	second := p.testDecide(from("192.0.2.1"))
	if second.Outcome != OutcomeInFlight {
		t.Fatalf("second request while the first is in flight: %v, %v; want %v", second.Outcome, second.Err, OutcomeInFlight)
	}
	first.finish(http.StatusOK)
	third := p.testDecide(from("192.0.2.1"))
	if !third.Proceed() || third.Result.Remaining != 1000 {
		t.Errorf("after the first finished: %v, Remaining %d, %v; want served, 1000 left (the refused one took nothing)", third.Outcome, third.Result.Remaining, third.Err)
	}
	third.finish(http.StatusOK)
}

// TestCheckTakesNoPermit guards DecideN's "It takes no InFlight permit":
// a Check inside a handler has no Finish to give a permit back, so before,
// each one held a permit renewed for the life of the process, and under
// InFlight 1 a Check inside the Policy's own middleware was refused.
func TestCheckTakesNoPermit(t *testing.T) {
	_, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(100), InFlight: 1})
	outer := p.testDecide(from("192.0.2.1")) // the middleware's: holds the one permit
	if outer.Outcome != OutcomeAllowed {
		t.Fatalf("the request: %v, want allowed", outer.Outcome)
	}
	defer outer.finish(http.StatusOK)
	for i := range 3 {
		d := p.testCheck(from("192.0.2.1"), 5)
		if d.Outcome != OutcomeAllowed || d.renewal != nil || d.wantsFinish() {
			t.Fatalf("Check %d beside the running request: %v, renewing %t, wants Finish %t; want allowed, no permit",
				i, d.Outcome, d.renewal != nil, d.wantsFinish())
		}
		if got, want := d.Result.Remaining, 100-1-5*(i+1); got != want {
			t.Errorf("Check %d: Remaining %d, want %d: the rate layers still count it", i, got, want)
		}
	}
	if d := p.testDecide(from("192.0.2.1")); d.Outcome != OutcomeInFlight {
		t.Errorf("a second request beside the running one: %v, want in_flight", d.Outcome)
	}
}
