package httplimit

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/observe"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redlimittest"
)

// The tests in this file back the IETF style's promises (IETF, and
// docs/http.md#responses): "a client that sends at most q units in every
// window of w seconds is never refused by that policy, whatever its
// algorithm"; "RateLimit's r is what remains of q (at most q), and t the
// seconds until r is q again"; and
// Retry-After's "a client that obeys it is never early" (README). Clients
// that obey them play against random Limits of every rate algorithm on a
// Redis whose clock the test moves (redlimittest), seeded, so a failure
// repeats.

// pacingLimits are n random Limits of algorithm a: rates, periods of whole
// and fractional seconds, bursts above and below the rate, LeakyBucket
// MaxDelays.
func pacingLimits(rng *rand.Rand, a core.Algorithm, n int) []core.Limit {
	periods := []time.Duration{time.Second, 1500 * time.Millisecond, 2 * time.Second, 7 * time.Second,
		10 * time.Second, time.Minute, time.Hour}
	var out []core.Limit
	for range n {
		l := core.Limit{Algorithm: a, Rate: 1 + rng.IntN(20), Period: periods[rng.IntN(len(periods))]}
		if shapeOf(a).refills && rng.IntN(2) == 0 {
			l.Burst = 1 + rng.IntN(3*l.Rate)
		}
		if shapeOf(a).queues && rng.IntN(2) == 0 {
			l.MaxDelay = time.Duration(rng.Int64N(int64(2 * l.Period)))
		}
		out = append(out, l)
	}
	return out
}

// pacer is one client of one Policy on a Redis whose clock it moves.
type pacer struct {
	t      *testing.T
	rd     *redlimittest.Redis
	p      *Policy
	limit  core.Limit
	q, w   int64    // RateLimit-Policy
	r, ttl int64    // RateLimit, from the last response
	log    []string // what happened, for a failure's message
}

// newPacer makes a Policy with the IETF fields for limit. LeakyBucket
// Policies are dry runs, so that a Delay is not slept on the real clock:
// the pacer moves the Redis clock by it instead, as the response arrives
// that much later, and reads a refusal from the Outcome.
func newPacer(t *testing.T, limit core.Limit) *pacer {
	rd := redlimittest.Start(t)
	p := mustNew(t, Config{Limiter: rd.NewLimiter(), Limit: limit, Headers: Headers{IETF{}},
		DryRun: shapeOf(limit.Algorithm).queues})
	return &pacer{t: t, rd: rd, p: p, limit: limit, r: -1}
}

// member parses the one list member of a RateLimit or RateLimit-Policy
// field: `"http";r=5;t=3`.
func member(t *testing.T, field, value string) map[string]int64 {
	t.Helper()
	parts := strings.Split(value, ";")
	if len(parts) < 2 || parts[0] != `"http"` {
		t.Fatalf("%s = %q, want one member named \"http\"", field, value)
	}
	out := map[string]int64{}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			t.Fatalf("%s = %q: bad parameter %q", field, value, kv)
		}
		out[k] = n
	}
	return out
}

// send makes one request now, reads the fields, and reports whether it
// was refused and the Retry-After it was told (for a dry run, t). The
// client waits for the response, which a LeakyBucket holds for its Delay.
func (c *pacer) send() (refused bool, retryAfter int64) {
	c.t.Helper()
	return c.request(true)
}

// fire makes one request now and does not wait for its response: one of a
// burst of concurrent requests.
func (c *pacer) fire() (refused bool, retryAfter int64) {
	c.t.Helper()
	return c.request(false)
}

func (c *pacer) request(wait bool) (refused bool, retryAfter int64) {
	t := c.t
	t.Helper()
	d, h := decide(c.p, from("192.0.2.9"))
	if d.Outcome != OutcomeAllowed && d.Outcome != OutcomeDenied {
		t.Fatalf("outcome %v (%v), want allowed or denied", d.Outcome, d.Err)
	}
	pol := member(t, "RateLimit-Policy", h.Get("RateLimit-Policy"))
	st := member(t, "RateLimit", h.Get("RateLimit"))
	c.q, c.w, c.r, c.ttl = pol["q"], pol["w"], st["r"], st["t"]
	refused = d.Outcome == OutcomeDenied
	c.log = append(c.log, fmt.Sprintf("%v: %v r=%d t=%d (%+v)", c.rd.Now().Sub(redlimittest.Epoch), d.Outcome, c.r, c.ttl, d.Result))
	if len(c.log) > 12 {
		c.log = c.log[1:]
	}
	switch {
	case c.r < 0 || c.r > c.q || c.ttl < 0:
		c.fail("RateLimit r=%d t=%d with q=%d: want 0 <= r <= q and t >= 0", c.r, c.ttl, c.q)
	case refused && !c.p.dryRun:
		retryAfter, _ = strconv.ParseInt(h.Get("Retry-After"), 10, 64)
		if retryAfter < 1 || retryAfter != c.ttl {
			c.fail("refused with Retry-After %q and t=%d: want Retry-After >= 1 and t equal to it", h.Get("Retry-After"), c.ttl)
		}
	case refused:
		retryAfter = c.ttl
	}
	if wait && !refused && d.Result.Delay > 0 {
		c.rd.Advance(d.Result.Delay) // the response leaves after its Delay
	}
	return refused, retryAfter
}

func (c *pacer) fail(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("%v q=%d w=%d: %s\nlast responses:\n%s", c.limit, c.q, c.w, fmt.Sprintf(format, args...), strings.Join(c.log, "\n"))
}

func pacingCases(t *testing.T) int {
	if redistest.Long() {
		return 12
	}
	redistest.Reduced(t, "the IETF pacing properties check 4 Limits per algorithm")
	return 4
}

// pacingAlgorithms are the rate algorithms: every one core has, so that a
// new one is checked here too, but the permits (inflight_test.go).
var pacingAlgorithms = func() []core.Algorithm {
	var out []core.Algorithm
	for a := range core.Algorithm(observe.Algorithms) {
		if !shapeOf(a).permits {
			out = append(out, a)
		}
	}
	return out
}()

// TestIETFClientObeyingRemainingIsNeverRefused: a client that sends while
// the last response's r is above 0 (one request, or a burst of r at once,
// now or after idling a while), and otherwise waits t seconds first, is
// never refused, under any algorithm.
func TestIETFClientObeyingRemainingIsNeverRefused(t *testing.T) {
	for _, a := range pacingAlgorithms {
		for i, limit := range pacingLimits(rand.New(rand.NewPCG(2026, 1)), a, pacingCases(t)) {
			t.Run(fmt.Sprintf("%v/%d/%v", a, i, limit), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(20261, uint64(a)<<8|uint64(i)))
				c := newPacer(t, limit)
				for range 150 {
					switch {
					case c.r == 0:
						c.rd.Advance(time.Duration(c.ttl) * time.Second)
					case c.r > 0 && rng.IntN(4) == 0:
						c.rd.Advance(time.Duration(rng.Int64N(int64(limit.Period))))
					case c.r > 1 && rng.IntN(3) == 0:
						// A burst of the r that remain, sent together.
						r := c.r
						for k := range r - 1 {
							if refused, _ := c.fire(); refused {
								c.fail("request %d of a burst of r=%d was refused", k+1, r)
							}
						}
					}
					if refused, _ := c.send(); refused {
						c.fail("refused, although the last response said r=%d (or t=%d seconds have passed since r=0)", c.r, c.ttl)
					}
				}
			})
		}
	}
}

// TestIETFClientWithinPolicyIsNeverRefused: a client that sends at most q
// requests in every window of w seconds (RateLimit-Policy) is never
// refused, under any algorithm, whatever its pace within that.
func TestIETFClientWithinPolicyIsNeverRefused(t *testing.T) {
	for _, a := range pacingAlgorithms {
		for i, limit := range pacingLimits(rand.New(rand.NewPCG(2026, 2)), a, pacingCases(t)) {
			t.Run(fmt.Sprintf("%v/%d/%v", a, i, limit), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(20262, uint64(a)<<8|uint64(i)))
				c := newPacer(t, limit)
				// The first request learns q and w; it is the first of the
				// window, and a fresh key admits it.
				if refused, _ := c.send(); refused {
					c.fail("the first request was refused")
				}
				sent := []time.Time{c.rd.Now()}
				for range 150 {
					at := c.rd.Now()
					if rng.IntN(3) == 0 {
						at = at.Add(time.Duration(rng.Int64N(int64(c.w) * int64(time.Second))))
					}
					// The window (at - w, at] must hold at most q, this one
					// included: the q-th latest must be w or more before.
					if int64(len(sent)) >= c.q {
						if earliest := sent[int64(len(sent))-c.q].Add(time.Duration(c.w) * time.Second); at.Before(earliest) {
							at = earliest
						}
					}
					c.rd.Advance(at.Sub(c.rd.Now()))
					sent = append(sent, at)
					if refused, _ := c.send(); refused {
						c.fail("refused, although the client sent at most q=%d in every window of w=%d seconds", c.q, c.w)
					}
				}
			})
		}
	}
}

// TestIETFRetryAfterIsNeverEarly: a client that bursts until refused, then
// waits the Retry-After it was told (whole seconds), is admitted, under
// any algorithm.
func TestIETFRetryAfterIsNeverEarly(t *testing.T) {
	for _, a := range pacingAlgorithms {
		for i, limit := range pacingLimits(rand.New(rand.NewPCG(2026, 3)), a, pacingCases(t)) {
			t.Run(fmt.Sprintf("%v/%d/%v", a, i, limit), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(20263, uint64(a)<<8|uint64(i)))
				c := newPacer(t, limit)
				for round := range 10 {
					var wait int64
					for n := 0; ; n++ {
						refused, retry := c.fire()
						if refused {
							wait = retry
							break
						}
						if n > 3*limit.Capacity()+10 {
							c.fail("round %d: a burst of %d was never refused", round, n)
						}
					}
					c.rd.Advance(time.Duration(wait) * time.Second)
					if refused, _ := c.send(); refused {
						c.fail("round %d: refused again %d seconds later, the Retry-After it was told", round, wait)
					}
					c.rd.Advance(time.Duration(rng.Int64N(int64(2 * limit.Period))))
				}
			})
		}
	}
}

// TestIETFRateLimitParses: the fields the pacing tests read are the ones a
// response carries (a guard for the parser above).
func TestIETFRateLimitParses(t *testing.T) {
	c := newPacer(t, core.PerMinute(5))
	if refused, _ := c.send(); refused || c.q != 5 || c.w != 60 || c.r != 4 {
		t.Errorf("first response: q=%d w=%d r=%d t=%d, want q=5 w=60 r=4", c.q, c.w, c.r, c.ttl)
	}
	h := http.Header{}
	h.Set("RateLimit", `"http";r=1;t=2`)
	if m := member(t, "RateLimit", h.Get("RateLimit")); m["r"] != 1 || m["t"] != 2 {
		t.Errorf("member = %v", m)
	}
}

// TestIETFCalendarWindowSkippedMidnight: the w a calendar day advertises is
// the day core counts in. Santiago's 2024-09-08 has no midnight and lasts
// 23 hours; computed apart from core, it read as 24.
func TestIETFCalendarWindowSkippedMidnight(t *testing.T) {
	santiago, err := time.LoadLocation("America/Santiago")
	if err != nil {
		t.Skipf("no tzdata: %v", err)
	}
	daily := core.Limit{Algorithm: core.FixedWindow, Rate: 10, Calendar: core.Daily, Location: santiago}
	if _, w := advertise(daily, time.Date(2024, 9, 8, 12, 0, 0, 0, santiago)); w != 23*3600 {
		t.Errorf("w = %d s, want %d (23 hours)", w, 23*3600)
	}
}

// TestIETFSlidingWindowAbove1024: above Rate 1024 a sliding window's
// units may leave up to Period/1024 late, so RateLimit-Policy's w covers
// that too (IETF's doc: "a 1024th of a period more"). A client that kept
// to q per Period would be refused: one unit at t0 and the rest 400µs
// later share an entry stamped at the later instant, so one more a Period
// after t0 meets a full window.
func TestIETFSlidingWindowAbove1024(t *testing.T) {
	mr, _, l := mini(t)
	limit := core.Limit{Algorithm: core.SlidingWindow, Rate: 2048, Period: time.Second}
	p := mustNew(t, Config{Limiter: l, Limit: limit, Headers: Headers{IETF{}}})
	// A slice is a 1024th of the Period (976.5625µs) in whole µs: t0 is
	// a multiple of both 976 and 977, so t0 and t0+400µs share one.
	const lcm = 976 * 977
	t0 := time.UnixMicro((redistest.Epoch.UnixMicro()/lcm + 1) * lcm)
	redistest.SetTime(mr, t0)
	_, h := decide(p, from("192.0.2.9"))
	if got := h.Get("RateLimit-Policy"); got != `"http";q=2048;w=2` {
		t.Fatalf("RateLimit-Policy %q, want w=2: a second and a 1024th, rounded up", got)
	}
	redistest.SetTime(mr, t0.Add(400*time.Microsecond))
	if d := p.testCheck(from("192.0.2.9"), 2047); d.Outcome != OutcomeAllowed {
		t.Fatalf("the other 2047 units: %v", d.Outcome)
	}
	redistest.SetTime(mr, t0.Add(time.Second))
	if d := p.testDecide(from("192.0.2.9")); d.Outcome != OutcomeDenied {
		t.Fatalf("one unit a Period after the first: %v; the shared entry should still count it", d.Outcome)
	}
	redistest.SetTime(mr, t0.Add(time.Second+time.Second/1024))
	if d := p.testDecide(from("192.0.2.9")); d.Outcome != OutcomeAllowed {
		t.Errorf("one unit a Period and a 1024th after the first: %v, want admitted", d.Outcome)
	}
}
