package httplimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/redlimittest"
)

// TestHeadersOnTheLimiterClock backs internal/clock: under redlimittest
// the headers tell time by the test's Redis clock, so X-RateLimit-Reset
// is the same on every run and follows Advance (it read the process'
// clock: 2026-01-01 plus ResetAfter only if the test ran on that day).
func TestHeadersOnTheLimiterClock(t *testing.T) {
	r := redlimittest.Start(t)
	p := mustNew(t, Config{Limiter: r.NewLimiter(), Limit: core.PerMinute(6)})
	for _, step := range []time.Duration{0, 25 * time.Hour} {
		r.Advance(step)
		_, h := decide(p, from("192.0.2.1"))
		want := r.Now().Add(10 * time.Second).Unix() // one unit of 6 per minute refills in 10 s
		if got := h.Get("X-RateLimit-Reset"); got != strconv.FormatInt(want, 10) {
			t.Errorf("at %v: X-RateLimit-Reset %s, want %d", r.Now(), got, want)
		}
	}
}
