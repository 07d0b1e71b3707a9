package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redlimittest"
)

// concurrently sends n requests of one client at once; each that proceeds
// holds its unit until all n have been decided (the worst case for a
// limiter that would only look before the handler and count after it),
// then ends with status. It returns how many reached the handler.
func concurrently(p *Policy, n, status int) int {
	var decided sync.WaitGroup
	decided.Add(n)
	var reached atomic.Int64
	var done sync.WaitGroup
	for range n {
		done.Go(func() {
			d := p.testDecide(from("198.51.100.7"))
			decided.Done()
			if !d.Proceed() {
				return
			}
			reached.Add(1)
			decided.Wait() // the handler runs while every other request arrives
			d.finish(status)
		})
	}
	done.Wait()
	return int(reached.Load())
}

// TestCountIfBankingAttack backs Config.CountIf's "a request still needs a
// unit free to proceed, and takes it ... So concurrent requests never pass
// beyond the limit: the only error is on the strict side ... and a request
// that ends after its unit's window (or after its bucket would have
// refilled the unit anyway) gives nothing back". The bound it promises is
// the Limit's own: in any span, the failures that reach the handler are at
// most what the Limit admits in that span, as if every request counted.
// Under 10 per minute, with the clock standing still:
//
//   - 100 concurrent requests that all fail: exactly 10 reach the handler.
//   - 10 requests that will succeed hold the 10 units while 100 failures
//     arrive: none of those reach it (successes cannot be used to sneak
//     failures past the limit while in flight).
//   - The banking attempt: those 10 successes stay in flight for two
//     periods, a whole new quota, which 100 failures then spend (10 reach
//     the handler); the successes end and give their units back, and 100
//     more failures arrive at the same instant. None may pass: the units
//     given back belong to a window that has ended (or a bucket that has
//     refilled them), and handing them to the new window would let 20
//     failures through in an instant under a limit of 10.
//
// LeakyBucket is left out: its Delay is slept on the real clock.
func TestCountIfBankingAttack(t *testing.T) {
	const limitRate = 10
	limits := []core.Limit{
		core.PerMinute(limitRate),
		{Algorithm: core.FixedWindow, Rate: limitRate, Period: time.Minute},
		{Algorithm: core.SlidingWindowCounter, Rate: limitRate, Period: time.Minute},
		{Algorithm: core.SlidingWindow, Rate: limitRate, Period: time.Minute},
	}
	configs := []struct {
		name string
		edit func(*Config)
	}{
		{"alone", func(*Config) {}},
		{"with a layer", func(c *Config) { c.Layers = []core.Limit{{Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour}} }},
		{"with a global", func(c *Config) {
			c.Scopes = []Scope{{Name: "global", Limit: core.Limit{Algorithm: core.SlidingWindow, Rate: 1000, Period: time.Hour}}}
		}},
	}
	for _, limit := range limits {
		for _, cfg := range configs {
			t.Run(limit.Algorithm.String()+"/"+cfg.name, func(t *testing.T) {
				rd := redlimittest.Start(t)
				c := Config{Limiter: rd.NewLimiter(), Limit: limit, CountIf: countFailed}
				cfg.edit(&c)
				p := mustNew(t, c)

				if got := concurrently(p, 100, http.StatusUnauthorized); got != limitRate {
					t.Fatalf("100 concurrent failures: %d reached the handler, want exactly %d", got, limitRate)
				}

				rd.Advance(2 * limit.Period)
				var inFlight []Decision
				for i := range limitRate {
					d := p.testDecide(from("198.51.100.7"))
					if !d.Proceed() || !d.wantsFinish() {
						t.Fatalf("success %d of a whole quota: %v, want to proceed and be finished", i, d.Outcome)
					}
					inFlight = append(inFlight, d)
				}
				if got := concurrently(p, 100, http.StatusUnauthorized); got != 0 {
					t.Errorf("100 failures while 10 successes hold the quota: %d reached the handler, want 0", got)
				}

				rd.Advance(2 * limit.Period)
				if got := concurrently(p, 100, http.StatusUnauthorized); got != limitRate {
					t.Errorf("100 failures in a new quota: %d reached the handler, want %d", got, limitRate)
				}
				for _, d := range inFlight {
					d.finish(http.StatusOK) // gives back units of a window long gone
				}
				if got := concurrently(p, 100, http.StatusUnauthorized); got != 0 {
					t.Errorf("after successes from two periods ago ended: %d more failures reached the handler at the same instant, want 0 "+
						"(their refunds were banked into the new quota)", got)
				}
			})
		}
	}
}

// TestCountIfRefundInItsWindowFreesTheUnit: the strict side of CountIf is
// no stricter than it says: a success that ends within its unit's window
// gives the unit back at once, so 10 concurrent successes followed by 10
// failures all reach the handler under 10 per minute.
func TestCountIfRefundInItsWindowFreesTheUnit(t *testing.T) {
	for _, limit := range []core.Limit{
		core.PerMinute(10),
		{Algorithm: core.FixedWindow, Rate: 10, Period: time.Minute},
		{Algorithm: core.SlidingWindowCounter, Rate: 10, Period: time.Minute},
		{Algorithm: core.SlidingWindow, Rate: 10, Period: time.Minute},
	} {
		t.Run(limit.Algorithm.String(), func(t *testing.T) {
			rd := redlimittest.Start(t)
			p := mustNew(t, Config{Limiter: rd.NewLimiter(), Limit: limit, CountIf: countFailed})
			if got := concurrently(p, 10, http.StatusOK); got != 10 {
				t.Fatalf("10 concurrent successes: %d proceeded, want 10", got)
			}
			if got := concurrently(p, 100, http.StatusForbidden); got != 10 {
				t.Errorf("then 100 failures: %d reached the handler, want the 10 the successes gave back", got)
			}
		})
	}
}

// TestFallbackYearlyShareHeaders: with the local fallback deciding for 300
// instances, 1 per 2^46µs (about 2.2 years) with a Burst of 300 is a share
// of one unit whose next unit accrues in about 669 years, beyond what a
// time.Duration holds (it saturates near 292 years). The answer still says
// to wait that long: Retry-After and the body's retry_after agree and are
// at least a year. Rounding the saturated duration up to seconds
// overflowed, and a denied client was told Retry-After: 1 (and, when the
// fallback's decisions carried rate-limit fields, a Reset in 1970).
func TestFallbackYearlyShareHeaders(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	l := newLimiter(t, rdb, core.WithLocalFallback(300, 16), core.WithBreaker(0, 0))
	year := 365 * 24 * time.Hour
	limit := core.Limit{Rate: 1, Period: (1 << 46) * time.Microsecond, Burst: 300}
	p := mustNew(t, Config{Limiter: l, Limit: limit, Headers: Headers{XRateLimit{}, IETF{}}})
	mr.SetError("MASTERDOWN Link with MASTER is down") // what a replica answers
	if d, _ := decide(p, from("192.0.2.44")); d.Outcome != OutcomeAllowed || !d.Result.Fallback {
		t.Fatalf("outcome %v, Result %+v: want the share's one unit admitted in fallback", d.Outcome, d.Result)
	}
	d, h := decide(p, from("192.0.2.44"))
	if d.Outcome != OutcomeDenied || !d.Result.Fallback {
		t.Fatalf("outcome %v, Result %+v: want a fallback denial (the next unit accrues for 669 years)", d.Outcome, d.Result)
	}
	retry, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	if err != nil || retry < int64(year/time.Second) || retry < ceilSeconds(d.Result.RetryAfter) {
		t.Errorf("Retry-After %q for a wait of %v: want at least a year, and the wait rounded up", h.Get("Retry-After"), d.Result.RetryAfter)
	}
	if want := fmt.Sprintf(`{"error":"rate limit exceeded","retry_after":%d}`+"\n", retry); string(d.Body()) != want {
		t.Errorf("body %q, want %q", d.Body(), want)
	}
}

// TestFallbackDecisionsCarryNoFields: what the local fallback decides is
// answered without rate-limit fields, in every style, since its Remaining
// is this instance's share rather than the key's: an admitted request is
// served with none, a refused one gets its status, Retry-After and body,
// and no field either. Both carried the share's fields before.
func TestFallbackDecisionsCarryNoFields(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	l := newLimiter(t, rdb, core.WithLocalFallback(2, 16), core.WithBreaker(0, 0))
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(2), Headers: Headers{XRateLimit{}, IETF{}, OpenAI{}}})
	mr.SetError("MASTERDOWN Link with MASTER is down")
	fields := func(h http.Header) []string {
		var got []string
		for name := range h {
			if name != "Retry-After" {
				got = append(got, name)
			}
		}
		return got
	}
	d, h := decide(p, from("192.0.2.46"))
	if d.Outcome != OutcomeAllowed || !d.Result.Fallback || len(h) != 0 {
		t.Errorf("the share's unit: outcome %v, fallback %v, fields %v; want allowed by the fallback with none", d.Outcome, d.Result.Fallback, h)
	}
	d, h = decide(p, from("192.0.2.46"))
	if d.Outcome != OutcomeDenied || !d.Result.Fallback || len(fields(h)) != 0 {
		t.Errorf("beyond the share: outcome %v, fallback %v, fields %v; want denied by the fallback with none", d.Outcome, d.Result.Fallback, fields(h))
	}
	if retry, err := strconv.Atoi(h.Get("Retry-After")); err != nil || retry < 1 || d.Status() != http.StatusTooManyRequests ||
		!strings.HasPrefix(string(d.Body()), `{"error":"rate limit exceeded","retry_after":`) {
		t.Errorf("the refusal: %d, Retry-After %q, body %q; want 429, seconds and the JSON body", d.Status(), h.Get("Retry-After"), d.Body())
	}
}

// TestLimitFuncTierOfAnotherAlgorithmIsAnotherState documents where
// LimitFunc's "A key keeps one state whatever Limit it is decided under"
// ends: each Algorithm keeps a state of its own (core.Limiter), so a key
// whose tier moves it to another Algorithm starts with that Algorithm's
// whole quota, while a tier of the same Algorithm carries the key's use
// over.
func TestLimitFuncTierOfAnotherAlgorithmIsAnotherState(t *testing.T) {
	rd := redlimittest.Start(t)
	tier := core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: time.Hour}
	p := mustNew(t, Config{Limiter: rd.NewLimiter(), Limit: core.Limit{Rate: 3, Period: time.Hour},
		LimitFunc: func(Request, string) (core.Limit, bool) { return tier, true }})
	admitted := func() int {
		n := 0
		for range 5 {
			if p.testDecide(from("192.0.2.77")).Outcome == OutcomeAllowed {
				n++
			}
		}
		return n
	}
	if got := admitted(); got != 3 {
		t.Fatalf("under the first tier: %d of 5 admitted, want 3", got)
	}
	tier.Rate = 4 // the same Algorithm: the 3 used carry over
	if got := admitted(); got != 1 {
		t.Errorf("a tier of 4 per hour, same algorithm: %d admitted, want 1 (3 used of 4)", got)
	}
	tier = core.Limit{Algorithm: core.SlidingWindow, Rate: 4, Period: time.Hour} // another Algorithm: another state
	if got := admitted(); got != 4 {
		t.Errorf("a tier of 4 per hour under another algorithm: %d admitted, want its whole 4", got)
	}
}

// TestFallbackShareBelowOneUnitBounded is issue 34's finding 1: 10 per
// minute on 20 instances (half a unit each), Redis down, 100 requests on
// one instance. FailOpen served all 100 with no limit before (the
// fallback gave the share up to the fail policy); now the fallback admits
// one unit per 2 minutes there, and FailClosed refuses even that one.
func TestFallbackShareBelowOneUnitBounded(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	limit := core.Limit{Algorithm: core.SlidingWindow, Rate: 10, Period: time.Minute}
	mr.SetError("MASTERDOWN Link with MASTER is down")
	for _, c := range []struct {
		failClosed bool
		served     int
	}{{false, 1}, {true, 0}} {
		l := newLimiter(t, rdb, core.WithLocalFallback(20, 16), core.WithBreaker(0, 0))
		p := mustNew(t, Config{Limiter: l, Limit: limit, FailClosed: c.failClosed})
		served := 0
		for range 100 {
			if d, _ := decide(p, from("192.0.2.45")); d.Proceed() {
				served++
			}
		}
		if served != c.served {
			t.Errorf("fail closed %v: %d of 100 served with Redis down, want %d (a unit per 20 x 1m / 10)", c.failClosed, served, c.served)
		}
	}
}
