package httplimit

import (
	"net/http"
	"testing"

	"github.com/redlimit/redlimit/core"
)

// TestStackedRefusalsTakeTheLongestWait backs WriteHeaders' "Several
// Policies on one route compose: ... X-RateLimit-* describe the most
// restrictive (the lowest Remaining), and Retry-After is the longest
// wait", where two Policies refuse one request and both write their
// headers (middleware stops at the first refusal; code that decides
// several Policies itself, or a Check after a refusal, does not): in
// either order, Retry-After is the longer of the two waits, the
// X-RateLimit-* fields the lower Remaining, and the IETF fields list both
// policies.
func TestStackedRefusalsTakeTheLongestWait(t *testing.T) {
	_, _, l := mini(t)
	headers := Headers{XRateLimit{}, IETF{}}
	minute := mustNew(t, Config{Name: "minute", Limiter: l, Limit: core.PerMinute(1), Headers: headers})
	hour := mustNew(t, Config{Name: "hour", Limiter: l, Limit: core.PerHour(2), Headers: headers})
	r := from("198.51.100.7")
	for _, p := range []*Policy{minute, hour} {
		if d := p.testDecide(r); !d.Proceed() {
			t.Fatalf("%s: the first request is refused: %v", p.name, d.Outcome)
		}
	}
	dm, dh := minute.testDecide(r), hour.testDecide(r) // the minute refuses (60s); the hour admits, 0 left
	hour3 := hour.testDecide(r)                        // the hour refuses (30 min)
	if dm.Outcome != OutcomeDenied || dh.Outcome != OutcomeAllowed || hour3.Outcome != OutcomeDenied {
		t.Fatalf("outcomes %v, %v, %v; want denied, allowed, denied", dm.Outcome, dh.Outcome, hour3.Outcome)
	}
	for name, order := range map[string][2]*Decision{"minute then hour": {&dm, &hour3}, "hour then minute": {&hour3, &dm}} {
		h := http.Header{}
		order[0].writeHeaders(h)
		order[1].writeHeaders(h)
		checkHeaders(t, name, h, map[string]string{
			"Retry-After":           "1800",
			"X-RateLimit-Remaining": "0",
		})
		if got := h.Get("RateLimit-Policy"); got != `"minute";q=1;w=60, "hour";q=2;w=3600` && got != `"hour";q=2;w=3600, "minute";q=1;w=60` {
			t.Errorf("%s: RateLimit-Policy %q, want both policies", name, got)
		}
	}
}
