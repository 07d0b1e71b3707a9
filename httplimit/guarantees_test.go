package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// The tests in this file each back one guarantee sentence of README.md or
// a doc comment, quoted beside it, and fail without it.

// realClock is a redis.Hook that sets miniredis' clock, before each script
// call, to redistest.Epoch plus the real time elapsed since start: Redis'
// TIME then runs as a real Redis' would, so a permit lapses on time while
// the Policy's renewal timer runs on the real clock. It reports each
// script call on calls once it has returned (an EVALSHA that found no
// script and the EVAL go-redis sends instead are one).
type realClock struct {
	mr    *miniredis.Miniredis
	start time.Time
	calls chan struct{}
}

func (c *realClock) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *realClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if name != "evalsha" && name != "eval" && name != "fcall" {
			return next(ctx, cmd)
		}
		redistest.SetTime(c.mr, redistest.Epoch.Add(time.Since(c.start)))
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return err // go-redis sends the script itself next: one call
		}
		select {
		case c.calls <- struct{}{}:
		default: // nobody counts this one
		}
		return err
	}
}
func (c *realClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// waitCalls waits for n script calls on c, failing t if they do not come
// within limit (a stuck renewal, not a slow one: limit is generous).
func waitCalls(t *testing.T, c *realClock, n int, limit time.Duration, what string) {
	t.Helper()
	timeout := time.After(limit)
	for i := range n {
		select {
		case <-c.calls:
		case <-timeout:
			t.Fatalf("%s: %d of %d script calls within %v", what, i, n, limit)
		}
	}
}

// TestInFlightRenewedWhileHandlerRuns backs README "Requests in flight":
// "while a handler runs the Policy renews its permit every half lease, so
// a long request keeps it" (and Config.InFlightLease's "the Policy renews
// it every half of this while the handler runs"). Redis' clock follows
// the real one (realClock), so a renewal that came a whole lease after the
// last would find the permit lapsed: after two renewals, past the
// original lease, a second request is still refused for the permit, and
// the first renewal came no sooner than half a lease after the take.
func TestInFlightRenewedWhileHandlerRuns(t *testing.T) {
	const lease = 2 * time.Second
	mr, rdb, l := mini(t)
	clock := &realClock{mr: mr, start: time.Now(), calls: make(chan struct{}, 16)}
	rdb.AddHook(clock)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(100), InFlight: 1, InFlightLease: lease})

	taken := time.Now()
	first := p.testDecide(from("192.0.2.1"))
	if first.Outcome != OutcomeAllowed || !first.wantsFinish() {
		t.Fatalf("first request: %v (err %v), want allowed with a permit to give back", first.Outcome, first.Err)
	}
	<-clock.calls // the take itself
	waitCalls(t, clock, 1, 10*lease, "the first renewal")
	if since := time.Since(taken); since < lease/2 {
		t.Errorf("first renewal %v after the take, want no sooner than half the lease (%v)", since, lease/2)
	}
	waitCalls(t, clock, 1, 10*lease, "the second renewal")
	if since := time.Since(taken); since <= lease {
		t.Fatalf("two renewals within %v of the take: the lease (%v) has not run out, nothing to show", since, lease)
	}
	// The original lease has run out on Redis' clock: only the renewals
	// keep the permit.
	if d := p.testDecide(from("192.0.2.1")); d.Outcome != OutcomeInFlight {
		t.Errorf("a request %v after the first took its permit (lease %v): %v (err %v), want %v: the handler still runs",
			time.Since(taken), lease, d.Outcome, d.Err, OutcomeInFlight)
	}
	first.finish(http.StatusOK)
	if d := p.testDecide(from("192.0.2.1")); d.Outcome != OutcomeAllowed {
		t.Errorf("after the handler returned: %v (err %v), want allowed", d.Outcome, d.Err)
	} else {
		d.finish(http.StatusOK)
	}
}

// TestInFlightFailOpenServesWithoutPermit backs README "Requests in
// flight": "A Redis fault follows the fail policy: failing open serves the
// request without a permit." The request Redis could not decide is
// served, holds nothing (no permit to give back, no renewal), and so does
// not count against InFlight once Redis answers again; a second one, with
// Redis up, takes the only permit, and a third is refused for it.
func TestInFlightFailOpenServesWithoutPermit(t *testing.T) {
	mr, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(100), InFlight: 1})
	mr.SetError("MASTERDOWN Link with MASTER is down")
	open := p.testDecide(from("192.0.2.1"))
	if open.Outcome != OutcomeFailedOpen || !open.Proceed() {
		t.Fatalf("with Redis down: %v, Proceed %v (err %v); want failed open and served", open.Outcome, open.Proceed(), open.Err)
	}
	if open.wantsFinish() || open.renewal != nil {
		t.Errorf("a request served failing open: WantsFinish %v, renewal %v; want no permit to keep or give back", open.wantsFinish(), open.renewal != nil)
	}
	mr.SetError("")
	second := p.testDecide(from("192.0.2.1"))
	if second.Outcome != OutcomeAllowed {
		t.Fatalf("Redis up, the failed-open request still in flight: %v (err %v), want allowed: it holds no permit", second.Outcome, second.Err)
	}
	if d := p.testDecide(from("192.0.2.1")); d.Outcome != OutcomeInFlight {
		t.Errorf("third request while the second holds the permit: %v (err %v), want %v", d.Outcome, d.Err, OutcomeInFlight)
	}
	open.finish(http.StatusOK) // nothing to give back, and nobody else's permit
	if d := p.testDecide(from("192.0.2.1")); d.Outcome != OutcomeInFlight {
		t.Errorf("after the failed-open request ended: %v, want %v: the second still holds the permit", d.Outcome, OutcomeInFlight)
	}
	second.finish(http.StatusOK)
}

// TestInFlightRateRefusalTakesNoPermit backs README "Requests in flight":
// "A request takes a permit together with its unit of the rate limit, in
// the same script call: one refused for either takes neither", in the
// direction the conformance in_flight case leaves out: refused for its
// rate. Under InFlight 2, one request holds a permit and spends the rate
// of 1 per minute; three more are refused for the rate while it runs.
// Had they taken permits, a request under another Limit of the key (its
// own rate state, the same permits) would be refused for its permit; it
// takes the second permit, and the one after it is refused.
func TestInFlightRateRefusalTakesNoPermit(t *testing.T) {
	_, _, l := mini(t)
	big := core.Limit{Algorithm: core.SlidingWindow, Rate: 100, Period: time.Minute}
	p := mustNew(t, Config{Limiter: l, Limit: core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: time.Minute}, InFlight: 2,
		LimitFunc: func(r Request, _ string) (core.Limit, bool) { return big, len(r.Header("X-Big")) > 0 }})
	first := p.testDecide(from("192.0.2.1"))
	if first.Outcome != OutcomeAllowed {
		t.Fatalf("first request: %v (err %v), want allowed", first.Outcome, first.Err)
	}
	for i := range 3 {
		if d := p.testDecide(from("192.0.2.1")); d.Outcome != OutcomeDenied {
			t.Fatalf("request %d over the rate: %v (err %v), want %v", i+2, d.Outcome, d.Err, OutcomeDenied)
		}
	}
	second := p.testDecide(from("192.0.2.1", "X-Big", "1"))
	if second.Outcome != OutcomeAllowed {
		t.Fatalf("a request with rate to spare while one is in flight under InFlight 2: %v (err %v), want allowed: "+
			"the requests refused for their rate took permits", second.Outcome, second.Err)
	}
	if d := p.testDecide(from("192.0.2.1", "X-Big", "1")); d.Outcome != OutcomeInFlight {
		t.Errorf("a third in flight under InFlight 2: %v (err %v), want %v", d.Outcome, d.Err, OutcomeInFlight)
	}
	first.finish(http.StatusOK)
	second.finish(http.StatusOK)
}

// settled serves one request under p as an adapter does: Decide, Attach,
// the handler (report, nil for none), Finish with status. It fails t
// unless the request proceeds, and returns the Decision.
func settled(t *testing.T, p *Policy, ip string, status int, report func(ctx context.Context)) Decision {
	t.Helper()
	d := p.testDecide(from(ip))
	if !d.Proceed() || !d.wantsFinish() {
		t.Fatalf("request from %s: %v (err %v), want it to proceed and be finished", ip, d.Outcome, d.Err)
	}
	ctx := d.attach(context.Background())
	if report != nil {
		report(ctx)
	}
	d.finish(status)
	return d
}

// left is what key has left under limit, read without taking anything.
func left(t *testing.T, l *core.Limiter, key string, limit core.Limit) int {
	t.Helper()
	r, err := l.Peek(context.Background(), limit.For(key))
	if err != nil {
		t.Fatalf("Peek %s: %v", key, err)
	}
	return r.Remaining
}

// TestSettleReports backs README "Costs known after the response": "A
// handler that reports nothing keeps its estimate; the last report before
// it returns counts" (and ReportCost's "the last report before the handler
// returns counts"). An estimate of 500 of 2000 at one instant: no report
// leaves 1500; reports of 100 then 700 leave 1300 (the first report
// counting would leave 1900); a report made after the handler returned
// changes nothing; one report of 200, the control, leaves 1800.
func TestSettleReports(t *testing.T) {
	limit := core.PerMinute(2000)
	tests := []struct {
		name   string
		report func(ctx context.Context, p *Policy)
		late   int // reported after Finish, if > 0
		want   int
	}{
		{"one report", func(ctx context.Context, p *Policy) { p.ReportCost(ctx, 200) }, 0, 1800},
		{"no report keeps the estimate", nil, 0, 1500},
		{"the last report counts", func(ctx context.Context, p *Policy) {
			p.ReportCost(ctx, 100)
			p.ReportCost(ctx, 700)
		}, 0, 1300},
		{"a report after the handler returned does not count", func(ctx context.Context, p *Policy) { p.ReportCost(ctx, 700) }, 5, 1300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, l := mini(t)
			p := mustNew(t, Config{Limiter: l, Limit: limit, Cost: func(Request) int { return 500 }, Settle: true})
			var ctx context.Context
			settled(t, p, "192.0.2.1", http.StatusOK, func(c context.Context) {
				ctx = c
				if tt.report != nil {
					tt.report(c, p)
				}
			})
			if tt.late > 0 {
				p.ReportCost(ctx, tt.late)
			}
			if got := left(t, l, "http:ip:192.0.2.1", limit); got != tt.want {
				t.Errorf("left after the request: %d, want %d", got, tt.want)
			}
		})
	}
}

// TestReportCostFalseAfterFailingOpen backs README "Costs known after the
// response": ReportCost "returns false when there is nothing to settle:
// the Policy does not settle, or took nothing for the request (it failed
// open)". The adapters serve such a request without Finish (WantsFinish is
// false) and so without Attach; Attach too leaves its context without the
// decision. The control: with Redis up, ReportCost reports true.
func TestReportCostFalseAfterFailingOpen(t *testing.T) {
	mr, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(10), Settle: true})
	up := p.testDecide(from("192.0.2.1"))
	if ctx := up.attach(context.Background()); !up.wantsFinish() || !p.ReportCost(ctx, 3) {
		t.Fatalf("Redis up: WantsFinish %v, ReportCost false; want a cost to settle", up.wantsFinish())
	}
	up.finish(http.StatusOK)
	mr.SetError("MASTERDOWN Link with MASTER is down")
	d := p.testDecide(from("192.0.2.1"))
	if d.Outcome != OutcomeFailedOpen || !d.Proceed() {
		t.Fatalf("Redis down: %v, Proceed %v (err %v); want failed open", d.Outcome, d.Proceed(), d.Err)
	}
	if d.wantsFinish() {
		t.Error("a request served failing open wants Finish: it took nothing")
	}
	if p.ReportCost(d.attach(context.Background()), 3) {
		t.Error("ReportCost after failing open returned true, want false: there is nothing to settle")
	}
	unsettled := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(10), Name: "plain"})
	mr.SetError("")
	d = unsettled.testDecide(from("192.0.2.1"))
	if unsettled.ReportCost(d.attach(context.Background()), 3) {
		t.Error("ReportCost to a Policy that does not settle returned true, want false")
	}
}

// TestCountIfWithSettle backs README "Costs known after the response":
// "Under CountIf, a response whose status does not count gives back the
// whole estimate instead", of the key and of the Global, whatever the
// handler reported; a status that counts is settled to the report. (The
// README, Config's docs and Decision.Finish agree: a refund under CountIf
// comes before a settlement.)
func TestCountIfWithSettle(t *testing.T) {
	limit, global := core.PerMinute(2000), core.PerMinute(10000)
	for _, tt := range []struct {
		name             string
		status           int
		report           int // -1: none
		wantKey, wantAll int
	}{
		{"not counted, reported less", http.StatusOK, 200, 2000, 10000},
		{"not counted, reported more", http.StatusOK, 1900, 2000, 10000},
		{"not counted, no report", http.StatusOK, -1, 2000, 10000},
		{"counted, reported less", http.StatusUnauthorized, 200, 1800, 9800},
		{"counted, no report", http.StatusUnauthorized, -1, 1500, 9500},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, l := mini(t)
			p := mustNew(t, Config{Limiter: l, Limit: limit, Scopes: []Scope{{Name: "global", Limit: global}}, Cost: func(Request) int { return 500 },
				Settle: true, CountIf: countFailed})
			settled(t, p, "192.0.2.1", tt.status, func(ctx context.Context) {
				if tt.report >= 0 && !p.ReportCost(ctx, tt.report) {
					t.Error("ReportCost returned false")
				}
			})
			if got := left(t, l, "http:ip:192.0.2.1", limit); got != tt.wantKey {
				t.Errorf("the key has %d left, want %d", got, tt.wantKey)
			}
			if got := left(t, l, "http|global", global); got != tt.wantAll {
				t.Errorf("the Global has %d left, want %d", got, tt.wantAll)
			}
		})
	}
}

// TestGlobalSettledLikeTheKey backs README "Costs known after the
// response": "A Global ceiling is settled the same way" as the key's
// layers: an estimate of 500 leaves the key's Limit and its layer, and the
// Global, each short of exactly what the handler reported (the estimate
// when it reports nothing), above or below the estimate.
func TestGlobalSettledLikeTheKey(t *testing.T) {
	limit, layer := core.PerMinute(2000), core.Limit{Algorithm: core.FixedWindow, Rate: 5000, Period: time.Hour}
	global := core.Limit{Algorithm: core.SlidingWindow, Rate: 10000, Period: time.Hour}
	for _, tt := range []struct {
		name   string
		report int // -1: none
		used   int // what each must be short of
	}{
		{"reported less", 200, 200},
		{"reported more", 1900, 1900},
		{"reported nothing", -1, 500},
		{"reported 0", 0, 0},
	} {
		for _, layered := range []bool{false, true} {
			name := tt.name
			if layered {
				name += ", with a layer"
			}
			t.Run(name, func(t *testing.T) {
				_, _, l := mini(t)
				cfg := Config{Limiter: l, Limit: limit, Scopes: []Scope{{Name: "global", Limit: global}}, Cost: func(Request) int { return 500 }, Settle: true}
				if layered {
					cfg.Layers = []core.Limit{layer}
				}
				p := mustNew(t, cfg)
				settled(t, p, "192.0.2.1", http.StatusOK, func(ctx context.Context) {
					if tt.report >= 0 {
						p.ReportCost(ctx, tt.report)
					}
				})
				if got, want := left(t, l, "http:ip:192.0.2.1", limit), limit.Rate-tt.used; got != want {
					t.Errorf("the key's Limit has %d left, want %d", got, want)
				}
				if got, want := left(t, l, "http|global", global), global.Rate-tt.used; got != want {
					t.Errorf("the Global has %d left, want %d (the key's layers have %d)", got, want, limit.Rate-tt.used)
				}
				if layered {
					// Layer 1 keeps its own state: read it as AllowLayers does.
					res, err := l.Allow(context.Background(), 1, limit.For("http:ip:192.0.2.1"), layer.For("http:ip:192.0.2.1"))
					rs := res.Rules
					if err != nil || len(rs) != 2 {
						t.Fatalf("Allow of two rules: %v, %v", rs, err)
					}
					if got, want := rs[1].Remaining+1, layer.Rate-tt.used; got != want {
						t.Errorf("the key's layer had %d left, want %d", got, want)
					}
				}
			})
		}
	}
}

// TestIETFCalendarWindowLength backs README "Calendar quotas": "the IETF
// RateLimit-Policy gives the current window's length as w": a month of 28,
// 30 or 31 days, a day of 23 or 25 hours where daylight saving changes,
// an ISO week, in the Limit's Location.
func TestIETFCalendarWindowLength(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone Europe/Berlin on this machine: %v", err)
	}
	const day = 24 * 3600
	for _, tt := range []struct {
		name  string
		limit core.Limit
		now   time.Time
		w     int64
	}{
		{"February", core.PerMonth(100, nil), time.Date(2026, 2, 14, 12, 0, 0, 0, time.UTC), 28 * day},
		{"February of a leap year", core.PerMonth(100, nil), time.Date(2028, 2, 29, 23, 59, 0, 0, time.UTC), 29 * day},
		{"April", core.PerMonth(100, nil), time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), 30 * day},
		{"the last second of January", core.PerMonth(100, nil), time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC), 31 * day},
		{"March in Berlin (an hour short)", core.PerMonth(100, berlin), time.Date(2026, 3, 10, 0, 0, 0, 0, berlin), 31*day - 3600},
		{"the first of March in Berlin, still February in UTC", core.PerMonth(100, berlin), time.Date(2026, 3, 1, 0, 30, 0, 0, berlin), 31*day - 3600},
		{"a day of 23 hours", core.Limit{Algorithm: core.FixedWindow, Rate: 100, Calendar: core.Daily, Location: berlin},
			time.Date(2026, 3, 29, 12, 0, 0, 0, berlin), 23 * 3600},
		{"a day of 25 hours", core.Limit{Algorithm: core.FixedWindow, Rate: 100, Calendar: core.Daily, Location: berlin},
			time.Date(2026, 10, 25, 12, 0, 0, 0, berlin), 25 * 3600},
		{"an ISO week", core.Limit{Algorithm: core.FixedWindow, Rate: 100, Calendar: core.Weekly},
			time.Date(2026, 1, 11, 23, 0, 0, 0, time.UTC), 7 * day}, // a Sunday: its week began on Monday the 5th
		{"the ISO week of a change to summer time", core.Limit{Algorithm: core.FixedWindow, Rate: 100, Calendar: core.Weekly, Location: berlin},
			time.Date(2026, 3, 23, 0, 0, 0, 0, berlin), 7*day - 3600},
	} {
		if q, w := advertise(tt.limit, tt.now); q != int64(tt.limit.Rate) || w != tt.w {
			t.Errorf("%s (%v): q=%d;w=%d, want q=%d;w=%d", tt.name, tt.now, q, w, tt.limit.Rate, tt.w)
		}
	}

	// Through a Policy, on the application's clock: its month's length.
	mr, _, l := mini(t)
	mr.SetTime(time.Now()) // Redis within a window of the application's clock
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMonth(100, nil), Headers: Headers{IETF{}}})
	monthOf := func(t time.Time) string {
		y, m, _ := t.UTC().Date()
		start := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return `"http";q=100;w=` + strconv.FormatInt(int64(start.AddDate(0, 1, 0).Sub(start)/time.Second), 10)
	}
	before := monthOf(time.Now())
	d, h := decide(p, from("192.0.2.1"))
	after := monthOf(time.Now())
	if d.Outcome != OutcomeAllowed {
		t.Fatalf("a monthly quota's first request: %v (err %v)", d.Outcome, d.Err)
	}
	if got := h.Get("RateLimit-Policy"); got != before && got != after {
		t.Errorf("RateLimit-Policy %q, want %q: w is this month's length in seconds", got, before)
	}
}

// TestInFlightPermitBackWhenGlobalRefuses: "It gives the permit back when
// its handler returns" (README "Requests in flight") presumes a handler;
// a request whose key's layers took a permit but that the Global then
// refuses has none, and must give its permit back at once, or the key is
// refused for its permit for a whole InFlightLease (an hour here) after
// the ceiling has room again.
func TestInFlightPermitBackWhenGlobalRefuses(t *testing.T) {
	mr, _, l := mini(t)
	global := core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: time.Minute}
	p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(100), Scopes: []Scope{{Name: "global", Limit: global}}, InFlight: 1, InFlightLease: time.Hour})
	first := p.testDecide(from("192.0.2.1"))
	if first.Outcome != OutcomeAllowed {
		t.Fatalf("first request: %v (err %v)", first.Outcome, first.Err)
	}
	first.finish(http.StatusOK)
	if d := p.testDecide(from("192.0.2.2")); d.Outcome != OutcomeDenied {
		t.Fatalf("another key over the Global: %v (err %v), want denied", d.Outcome, d.Err)
	}
	redistest.SetTime(mr, redistest.Epoch.Add(time.Minute)) // the Global's next window; the lease runs for an hour
	d := p.testDecide(from("192.0.2.2"))
	if d.Outcome != OutcomeAllowed {
		t.Errorf("the key the Global refused, a window later: %v (err %v), want allowed: the refused request kept its permit", d.Outcome, d.Err)
	} else {
		d.finish(http.StatusOK)
	}
}

// TestLoweredLimitOverHTTP backs the README's "Changing the Rate ...
// takes effect on the next call ... a lowered limit refuses until the
// spending fits it" through a Policy: 300 requests under 1000/min, then
// LimitFunc (an Overrides edit) says 200/min. The next request is answered at once, with a sane result:
// the window algorithms refuse it with a Retry-After, leases included, and
// nothing spins against Redis: a handful of commands, where a denial
// that ended at once sent a lease or a waiter back to Redis until its
// deadline.
func TestLoweredLimitOverHTTP(t *testing.T) {
	for _, c := range []struct {
		alg    core.Algorithm
		leases bool
		denied bool          // 300 spent is above 200 in the window
		wait   time.Duration // the exact RetryAfter at the first request after lowering, where checked
	}{
		// (The leaky bucket is left to core's TestLoweredLimitIsSane: a
		// Policy sleeps its Delay on the real clock, 300 times here.)
		{core.TokenBucket, false, false, 0},                                // the bucket holds at most its new burst, 200
		{core.FixedWindow, false, true, 30*time.Second + time.Millisecond}, // the window's end (from its key's expiry: 1 ms more)
		{core.FixedWindow, true, true, 0},                                  // a lease remembers the denial on the process' clock
		{core.SlidingWindow, false, true, 40 * time.Second},                // until 101 entries left: the 101st was at 10s
		{core.SlidingWindowCounter, false, true, 0},
	} {
		name := c.alg.String()
		if c.leases {
			name += "/leases"
		}
		t.Run(name, func(t *testing.T) {
			mr, rdb := redistest.Mini(t)
			var opts []core.Option
			if c.leases {
				opts = append(opts, core.WithLeases(0.1))
			}
			l := newLimiter(t, rdb, opts...)
			var lowered atomic.Bool
			limit := func(rate int) core.Limit {
				return core.Limit{Algorithm: c.alg, Rate: rate, Period: time.Minute}
			}
			p := mustNew(t, Config{Limiter: l, Limit: limit(1000),
				LimitFunc: func(Request, string) (core.Limit, bool) {
					if lowered.Load() {
						return limit(200), true
					}
					return limit(1000), true
				}})
			// 300 requests 100ms apart from the start of a minute: one
			// fixed window, and a sliding log of 300 entries.
			start := redistest.Epoch.Truncate(time.Minute).Add(time.Minute)
			for i := range 300 {
				redistest.SetTime(mr, start.Add(time.Duration(i)*100*time.Millisecond))
				if d := p.testDecide(from("192.0.2.1")); d.Outcome != OutcomeAllowed {
					t.Fatalf("request %d under 1000/min: %v (%v)", i+1, d.Outcome, d.Err)
				}
			}
			lowered.Store(true)
			for i := range 3 {
				redistest.SetTime(mr, start.Add(30*time.Second+time.Duration(i)*time.Second))
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				r := from("192.0.2.1")
				r.ctx = ctx
				commands := mr.CommandCount()
				d := p.testDecide(r)
				cancel()
				sent := mr.CommandCount() - commands
				if d.Err != nil || (d.Outcome != OutcomeAllowed && d.Outcome != OutcomeDenied) {
					t.Fatalf("request %d after lowering: %v (%v), want an answer", i+1, d.Outcome, d.Err)
				}
				if got := d.Outcome == OutcomeDenied; got != c.denied {
					t.Errorf("request %d after lowering: %v, want denied %v", i+1, d.Outcome, c.denied)
				}
				if d.Result.Granted < 0 || d.Result.Remaining < 0 {
					t.Errorf("request %d after lowering: Granted %d, Remaining %d, want neither negative", i+1, d.Result.Granted, d.Result.Remaining)
				}
				if d.Outcome == OutcomeDenied && (d.Result.RetryAfter <= 0 || d.RetryAfter() < 1) {
					t.Errorf("request %d after lowering: denied with RetryAfter %v (header %d), want a wait", i+1, d.Result.RetryAfter, d.RetryAfter())
				}
				if want := c.wait - time.Duration(i)*time.Second; c.wait > 0 && d.Result.RetryAfter != want {
					t.Errorf("request %d after lowering: RetryAfter %v, want %v under the new Limit", i+1, d.Result.RetryAfter, want)
				}
				// miniredis counts the commands a script runs too: a
				// denial's binary search over 300 entries is a dozen.
				if sent > 40 {
					t.Errorf("request %d after lowering sent Redis %d commands, want a handful", i+1, sent)
				}
			}
		})
	}
}
