package httplimit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/clock"
	"github.com/redlimit/redlimit/redlimittest"
)

// TestHeadersOnTheLimiterClock: under redlimittest the headers tell time
// by the test's clock, so X-RateLimit-Reset is the same on every run and
// follows Advance (it read the process' clock: 2026-01-01 plus
// ResetAfter only if the test ran on that day), for every algorithm,
// FixedWindow's too, and a calendar window's IETF w (February's 28 days
// from the test's clock, not December's 31 from the process').
func TestHeadersOnTheLimiterClock(t *testing.T) {
	r := redlimittest.Start(t)
	l := r.NewLimiter()
	r.Advance(31 * 24 * time.Hour) // 2026-02-01
	for _, a := range []core.Algorithm{core.TokenBucket, core.SlidingWindow, core.SlidingWindowCounter, core.FixedWindow, core.LeakyBucket} {
		lim := core.PerMinute(6)
		lim.Algorithm = a
		p := mustNew(t, Config{Name: "h" + strconv.Itoa(int(a)), Limiter: l, Limit: lim})
		for _, step := range []time.Duration{0, 25 * time.Hour} {
			r.Advance(step)
			d, h := decide(p, from("192.0.2.1"))
			want := ceilUnix(r.Now().Add(d.Result.ResetAfter))
			if got := h.Get("X-RateLimit-Reset"); got != strconv.FormatInt(want, 10) {
				t.Errorf("%v at %v: X-RateLimit-Reset %s, want %d", a, r.Now(), got, want)
			}
		}
	}
	p := mustNew(t, Config{Name: "month", Limiter: l, Limit: core.PerMonth(5, time.UTC), Headers: Headers{IETF{}}})
	if _, h := decide(p, from("192.0.2.1")); !strings.Contains(h.Get("RateLimit-Policy"), ";w=2419200") {
		t.Errorf("February under PerMonth: RateLimit-Policy %q, want w=2419200 (28 days)", h.Get("RateLimit-Policy"))
	}
}

// TestHeadersOnTheDecisionClock backs "One clock" (core.Result.At): the
// headers take their time from the decision, Redis' TIME, not from this
// process' clock nor the Limiter's (clock.With, set here a year away
// from both).
func TestHeadersOnTheDecisionClock(t *testing.T) {
	r := redlimittest.Start(t)
	r.Advance(90 * 24 * time.Hour)
	l := r.NewLimiter(clock.With[core.Option](func() time.Time { return redlimittest.Epoch.AddDate(-1, 0, 0) }))
	for _, a := range []core.Algorithm{core.TokenBucket, core.SlidingWindow, core.SlidingWindowCounter, core.LeakyBucket} {
		lim := core.PerMinute(6)
		lim.Algorithm = a
		p := mustNew(t, Config{Name: "h" + strconv.Itoa(int(a)), Limiter: l, Limit: lim})
		d, h := decide(p, from("192.0.2.1"))
		want := ceilUnix(r.Now().Add(d.Result.ResetAfter))
		if got := h.Get("X-RateLimit-Reset"); got != strconv.FormatInt(want, 10) || !d.Result.At.Equal(r.Now()) {
			t.Errorf("%v: X-RateLimit-Reset %s (At %v), want %d (Redis' %v)", a, got, d.Result.At, want, r.Now())
		}
	}
}
