package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// The tests of this file hold the engine to its promises at the edges a
// user reaches in production: a Limit lowered below what a key spent, a
// refund after its window, a long period, an outage, a caller who gives
// up, a Redis that stalls, Limiters made and dropped on one client.

// TestLoweredLimitIsSane backs "lowering a Limit below what the key has
// spent refuses the key, with the wait the new Limit gives" (Limiter's
// doc): under every algorithm, after 50 of 100 were taken, a Limit of 10
// never grants a negative count, and a denial's RetryAfter is exact: the
// request passes after it, not a microsecond before (a fixed window's, a
// millisecond).
func TestLoweredLimitIsSane(t *testing.T) {
	ctx := context.Background()
	for _, a := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			mr, _, l := miniLimiter(t)
			at := func(d time.Duration) { redistest.SetTime(mr, redistest.Epoch.Add(d)) }
			high := Limit{Algorithm: a, Rate: 100, Period: time.Minute}
			low := Limit{Algorithm: a, Rate: 10, Period: time.Minute}
			if a == LeakyBucket {
				high.MaxDelay, low.MaxDelay = time.Hour, time.Hour
			}
			at(0)
			if r, err := l.Allow(ctx, 50, high.For("k")); err != nil || !r.Allowed {
				t.Fatalf("AllowN(50) under 100/min: %+v, %v", r, err)
			}
			for _, n := range []int{5, 1} {
				for _, atMost := range []bool{true, false} {
					r, err := l.one(ctx, "k", low, n, map[bool]int{true: modeAtMost, false: modePeek}[atMost], Result{})
					if err != nil {
						t.Fatal(err)
					}
					if r.Granted < 0 || r.Remaining < 0 || r.Remaining > low.Capacity() {
						t.Fatalf("n=%d at most %v under 10/min: %+v: negative or out of range", n, atMost, r)
					}
					if !r.Allowed && r.RetryAfter <= 0 {
						t.Fatalf("n=%d at most %v: denied with RetryAfter %v, want > 0", n, atMost, r.RetryAfter)
					}
				}
			}
			r, err := l.Peek(ctx, low.For("k"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				return // the bucket carried what the new capacity holds
			}
			// (A fixed window's RetryAfter is whole ms, up to 1 ms long: see
			// TestAllowSteps.)
			early := map[bool]time.Duration{true: time.Millisecond}[a == FixedWindow]
			at(r.RetryAfter - early - time.Microsecond)
			if p, _ := l.Peek(ctx, low.For("k")); p.Allowed {
				t.Errorf("RetryAfter %v, yet one unit passes 1µs before it", r.RetryAfter)
			}
			at(r.RetryAfter)
			if p, _ := l.Peek(ctx, low.For("k")); !p.Allowed {
				t.Errorf("RetryAfter %v, yet one unit is still denied after it: %+v", r.RetryAfter, p)
			}
		})
	}
}

// TestLeaseLoweredLimitReturns backs "no lease or Wait loops" after a
// Limit is lowered: a leased key of fixed_window 1000/min with 500 taken,
// now under 100/min, answers Allow at once with a denial (a few Redis
// calls, not a spin), and Wait gives up at once when the wait outlasts its
// context.
func TestLeaseLoweredLimitReturns(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	var count opsCounter
	rdb.AddHook(&count)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.1))
	high := Limit{Algorithm: FixedWindow, Rate: 1000, Period: time.Minute}
	low := Limit{Algorithm: FixedWindow, Rate: 100, Period: time.Minute}
	for i := range 500 {
		if r, err := l.Allow(ctx, 1, high.For("hot")); err != nil || !r.Allowed {
			t.Fatalf("request %d under 1000/min: %+v, %v", i, r, err)
		}
	}
	before := count.cmds.Load()
	start := time.Now()
	r, err := l.Allow(ctx, 1, low.For("hot"))
	if err != nil || r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("Allow under 100/min after 500 of 1000: %+v, %v; want a denial with a wait", r, err)
	}
	if calls := count.cmds.Load() - before; calls > 4 || time.Since(start) > 2*time.Second {
		t.Errorf("the denial took %d Redis calls and %v, want a few and at once", calls, time.Since(start))
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	before, start = count.cmds.Load(), time.Now()
	if _, err := l.Wait(wctx, 1, low.For("hot")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait whose wait outlasts its context: %v, want DeadlineExceeded", err)
	}
	if calls, took := count.cmds.Load()-before, time.Since(start); calls > 4 || took > time.Second {
		t.Errorf("Wait took %d Redis calls and %v, want a few and at once", calls, took)
	}
}

// TestRefundAfterItsWindowGivesNothing backs "a refund never makes room
// the limit would not have had if the units had never been taken"
// (Refund): a unit taken at the end of one window and refunded in the next
// lets that window admit its Rate, not one more; a bucket's unit refunded
// after the bucket would have refilled it gives nothing.
func TestRefundAfterItsWindowGivesNothing(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		lim  Limit
		late time.Duration // the refund comes this long after the take
	}{
		{Limit{Algorithm: FixedWindow, Rate: 2, Period: time.Second}, time.Millisecond},
		{Limit{Algorithm: SlidingWindowCounter, Rate: 2, Period: time.Second}, time.Second + time.Millisecond},
		{Limit{Algorithm: SlidingWindow, Rate: 2, Period: time.Second}, time.Second},
		{Limit{Algorithm: TokenBucket, Rate: 2, Period: time.Second}, time.Second},
		{Limit{Algorithm: LeakyBucket, Rate: 2, Period: time.Second}, time.Second},
	} {
		t.Run(tt.lim.Algorithm.String(), func(t *testing.T) {
			mr, _, l := miniLimiter(t)
			at := func(d time.Duration) { redistest.SetTime(mr, redistest.Epoch.Add(d)) }
			end := time.Second - time.Millisecond // the last ms of the window
			at(end)
			taken, err := l.Allow(ctx, 2, tt.lim.For("k"))
			if err != nil || !taken.Allowed {
				t.Fatalf("AllowN(2) = %+v, %v", taken, err)
			}
			at(end + tt.late)
			if err := l.Refund(ctx, taken); err != nil {
				t.Fatal(err)
			}
			r, err := l.Peek(ctx, tt.lim.For("k"))
			if err != nil {
				t.Fatal(err)
			}
			// Without the refund the key holds what it holds now from time
			// alone: the refund added nothing to it.
			fresh, err := l.Peek(ctx, tt.lim.For("fresh-twin"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Remaining > fresh.Remaining {
				t.Errorf("after a late refund Remaining is %d, above a whole quota's %d", r.Remaining, fresh.Remaining)
			}
			if tt.lim.Algorithm == FixedWindow {
				if r2, _ := l.Allow(ctx, 2, tt.lim.For("k")); !r2.Allowed {
					t.Errorf("the next window: AllowN(2) = %+v, want its Rate", r2)
				}
				if r3, _ := l.Allow(ctx, 1, tt.lim.For("k")); r3.Allowed {
					t.Errorf("the next window admitted a third unit after a late refund: %+v", r3)
				}
			}
		})
	}
}

// TestRefundInItsWindowGivesBack is the other half: a refund in the window
// of its take gives the units back, under every algorithm.
func TestRefundInItsWindowGivesBack(t *testing.T) {
	ctx := context.Background()
	for _, a := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			_, _, l := miniLimiter(t) // the clock stands still
			lim := Limit{Algorithm: a, Rate: 3, Period: time.Minute}
			taken, err := l.Allow(ctx, 3, lim.For("k"))
			if err != nil || !taken.Allowed {
				t.Fatalf("AllowN(3) = %+v, %v", taken, err)
			}
			if r, _ := l.Allow(ctx, 1, lim.For("k")); r.Allowed {
				t.Fatalf("a fourth unit passed: %+v", r)
			}
			if err := l.Refund(ctx, taken); err != nil {
				t.Fatal(err)
			}
			if r, err := l.Allow(ctx, 3, lim.For("k")); err != nil || !r.Allowed {
				t.Errorf("after the refund AllowN(3) = %+v, %v; want admitted", r, err)
			}
		})
	}
}

// TestSlidingWindowLogIsBounded backs "the log never holds more than 1025
// entries" (scripts/sliding_window.lua): above 1024 requests per window,
// requests within 1/1024 of the period share an entry, so a call's trim
// and a key's memory are bounded whatever the rate; and a rate of 1e6 per
// period is a Limit like any other.
func TestSlidingWindowLogIsBounded(t *testing.T) {
	ctx := context.Background()
	mr, rdb, l := miniLimiter(t)
	lim := Limit{Algorithm: SlidingWindow, Rate: 1_000_000, Period: 10 * time.Second}
	n := 3000
	if !redistest.Long() {
		n = 1500
		redistest.Reduced(t, "the bounded log fills 1500 instants")
	}
	for i := range n {
		redistest.SetTime(mr, redistest.Epoch.Add(time.Duration(i)*10*time.Second/time.Duration(n)))
		if r, err := l.Allow(ctx, 100, lim.For("k")); err != nil || !r.Allowed {
			t.Fatalf("request %d: %+v, %v", i, r, err)
		}
	}
	log := stateKeys(nil, l.prefix, "k", &algorithms[SlidingWindow], 0)[0]
	if m := mr.Exists(log); !m {
		t.Fatal("no log")
	}
	card, err := rdb.ZCard(ctx, log).Result()
	if err != nil || card > 1025 || card < 1000 {
		t.Errorf("the log holds %d entries after %d requests at distinct instants (%v), want 1000 to 1025", card, n, err)
	}
	// Every unit still counts: the window holds n*100 of the 1e6.
	if r, err := l.Peek(ctx, lim.For("k")); err != nil || r.Remaining != lim.Rate-100*n {
		t.Errorf("Peek: Remaining %d, %v; want %d", r.Remaining, err, lim.Rate-100*n)
	}
	redistest.SetTime(mr, redistest.Epoch.Add(30*time.Second))
	if r, err := l.Allow(ctx, 1_000_000, lim.For("k")); err != nil || !r.Allowed {
		t.Errorf("after the window, AllowN(1e6) = %+v, %v; want admitted", r, err)
	}
	if r, err := l.Allow(ctx, 1, lim.For("k")); err != nil || r.Allowed || r.RetryAfter != 10*time.Second {
		t.Errorf("then Allow = %+v, %v; want denied for 10s", r, err)
	}
}

// TestLongPeriodsAndLargeRates backs "every algorithm accepts and enforces
// exactly any Rate up to at least 1e9 and any Period up to at least one
// year" (Limit): daily, monthly and yearly quotas validate under every
// algorithm, and one that is spent waits its period.
func TestLongPeriodsAndLargeRates(t *testing.T) {
	ctx := context.Background()
	const day = 24 * time.Hour
	for _, a := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		for _, lim := range []Limit{
			{Rate: 100_000, Period: day},
			{Rate: 10_000_000, Period: 30 * day},
			{Rate: 1, Period: 365 * day},
			{Rate: 1_000_000_000, Period: 365 * day},
			{Rate: 999_999_937, Period: 365*day + 7*time.Microsecond},
		} {
			lim.Algorithm = a
			if a == LeakyBucket {
				lim.MaxDelay = 400 * day
			}
			t.Run(fmt.Sprintf("%s/%s", a, lim), func(t *testing.T) {
				if err := lim.Validate(); err != nil {
					t.Fatalf("Validate: %v", err)
				}
				mr, _, l := miniLimiter(t)
				redistest.SetTime(mr, redistest.Epoch)
				if r, err := l.Allow(ctx, lim.Rate, lim.For("k")); err != nil || !r.Allowed {
					t.Fatalf("AllowN(Rate) = %+v, %v", r, err)
				}
				r, err := l.Allow(ctx, 1, lim.For("k"))
				if err != nil || r.Allowed {
					t.Fatalf("Allow after the Rate = %+v, %v; want denied", r, err)
				}
				if r.RetryAfter <= 0 || r.RetryAfter > 2*lim.Period {
					t.Errorf("RetryAfter %v, want within two periods", r.RetryAfter)
				}
			})
		}
	}
	var l Limit
	if err := l.UnmarshalText([]byte("2/w")); err != nil || l.Period != 7*day {
		t.Errorf(`"2/w": %+v, %v; want a week`, l, err)
	}
	if err := l.UnmarshalText([]byte("5/2week sliding_window")); err != nil || l.Period != 14*day || l.String() != "5/2w sliding_window" {
		t.Errorf(`"5/2week sliding_window": %+v (%s), %v`, l, l, err)
	}
}

// TestCancelledFetcherFailsNoOne backs "a caller's cancellation ends only
// that caller's wait" (leases): the caller that starts a lease fetch gives
// up at once, and the callers waiting on the same fetch get its answer.
func TestCancelledFetcherFailsNoOne(t *testing.T) {
	_, rdb := redistest.Mini(t)
	hook := &stallFirst{d: 200 * time.Millisecond, started: make(chan struct{})}
	rdb.AddHook(hook)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.25))
	lim := Limit{Algorithm: FixedWindow, Rate: 600_000, Period: time.Minute}
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	var first error
	wg.Go(func() { _, first = l.Allow(short, 1, lim.For("hot")) })
	<-hook.started
	results := make([]Result, 8)
	errs := make([]error, 8)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = l.Allow(context.Background(), 1, lim.For("hot")) })
	}
	wg.Wait()
	if !errors.Is(first, context.DeadlineExceeded) {
		t.Errorf("the fetching caller with a 30ms deadline: %v, want DeadlineExceeded", first)
	}
	for i := range results {
		if errs[i] != nil || !results[i].Allowed {
			t.Errorf("waiting caller %d: %+v, %v; want admitted: another's deadline failed it", i, results[i], errs[i])
		}
	}
}

// stallAll is a redis.Hook that holds every script call for d, or until
// the call's deadline, as a Redis paused by DEBUG SLEEP holds a client
// whose socket deadline then fires.
type stallAll struct{ d time.Duration }

func (s stallAll) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s stallAll) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" || name == "fcall" {
			select {
			case <-time.After(s.d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}
func (s stallAll) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestStalledRedisKeepsEveryTimeout backs "with batching as without, every
// call returns within the Limiter's timeout plus a small constant, however
// many callers are queued": thousands of callers queued behind a Redis
// that stalls for 1.5s all return long before it answers, batched or not.
// The bound asserted, the 50ms timeout plus 700ms, is what a loaded
// 2-core machine needs to run 5000 goroutines; -v logs the slowest.
func TestStalledRedisKeepsEveryTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	callers := 5000
	if !redistest.Long() {
		callers = 1000
		redistest.Reduced(t, "1000 callers behind a stalled Redis")
	}
	for _, batching := range []int{128, 1} {
		t.Run(fmt.Sprintf("batching %d", batching), func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			l, err := New(rdb, WithLogger(nil), WithTimeout(timeout), WithBreaker(0, 0), WithBatching(batching))
			if err != nil {
				t.Fatal(err)
			}
			// A warm Limiter: a new one's first decisions may wait for its
			// first load too (see New), which is not what this measures.
			if _, err := l.Allow(context.Background(), 1, PerSecond(100).For("warm")); err != nil {
				t.Fatal(err)
			}
			rdb.AddHook(stallAll{d: 1500 * time.Millisecond})
			var slowest atomic.Int64
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					start := time.Now()
					_, _ = l.Allow(context.Background(), 1, PerSecond(100).For(fmt.Sprint("k", i%50)))
					if took := int64(time.Since(start)); took > slowest.Load() {
						slowest.Store(took)
					}
				})
			}
			wg.Wait()
			if got := time.Duration(slowest.Load()); got > timeout+700*time.Millisecond {
				t.Errorf("the slowest of %d callers took %v, want the %v timeout plus a little", callers, got, timeout)
			}
			t.Logf("%d callers, batching %d: the slowest returned after %v", callers, batching, time.Duration(slowest.Load()))
		})
	}
}

// TestLimitersLeaveNothingOnTheClient backs Close's "a client that outlives
// many Limiters keeps nothing of them": the client has one hook however
// many Limiters were made on it, and a Limiter closed, or dropped and
// collected, leaves no entry behind.
func TestLimitersLeaveNothingOnTheClient(t *testing.T) {
	_, rdb := redistest.Mini(t)
	ctx := context.Background()
	w := watchOf(rdb)
	for range 200 {
		l := opsNew(t, rdb, opsPatient)
		if _, err := l.Allow(ctx, 1, PerSecond(10).For("k")); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Allow(ctx, 1, PerSecond(10).For("k")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Allow after Close: %v, want ErrClosed", err)
		}
	}
	if watchOf(rdb) != w {
		t.Fatal("the client got a second watch")
	}
	if n := watched(w); n != 0 {
		t.Errorf("%d Limiters still registered after Close", n)
	}
	for range 200 {
		opsNew(t, rdb, opsPatient) // dropped at once
	}
	for deadline := time.Now().Add(10 * time.Second); watched(w) > 0 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := watched(w); n != 0 {
		t.Errorf("%d dropped Limiters still registered after GC", n)
	}
}

func watched(w *clientWatch) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.limiters)
}

// TestDenyCacheAnswersLargerCosts backs WithDenyCache's "a cached denial
// for cost n also answers any larger cost, with its own, longer wait", and
// that a request Redis admits makes the cached denial stale: a client
// cycling its cost gets no round trip, and no wait shorter than Redis'.
func TestDenyCacheAnswersLargerCosts(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	var count opsCounter
	rdb.AddHook(&count)
	prefix := opsPrefix(t)
	l := opsNew(t, rdb, WithPrefix(prefix), opsPatient, WithDenyCache(100))
	plain := opsNew(t, rdb, WithPrefix(prefix), opsPatient)
	limit := PerMinute(10)
	if r, err := l.Allow(ctx, 10, limit.For("k")); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	sent := time.Now()
	if r, err := l.Allow(ctx, 1, limit.For("k")); err != nil || r.Allowed || r.Cached {
		t.Fatalf("a denial from Redis: %+v, %v", r, err)
	}
	before := count.cmds.Load()
	for n := 1; n <= 10; n++ {
		r, err := l.Allow(ctx, n, limit.For("k"))
		if err != nil || r.Allowed || !r.Cached {
			t.Fatalf("AllowN(%d): %+v, %v; want a cached denial", n, r, err)
		}
		exact, _ := plain.Peek(ctx, limit.For("k")) // the wait for one
		// (The cached wait counts down on the real clock since the denial
		// was sent, miniredis' stands still.)
		if want := exact.RetryAfter + time.Duration(n-1)*6*time.Second; r.RetryAfter < want-time.Since(sent) {
			t.Errorf("AllowN(%d) cached wait %v, Redis' %v: early", n, r.RetryAfter, want)
		}
	}
	if calls := count.cmds.Load() - before; calls != 10 { // the plain Peeks
		t.Errorf("%d Redis calls, want only the 10 Peeks of the check", calls)
	}
}

// TestSlidingWindowRefundedLogStaysStrict backs docs/limits.md's (Limits table, sliding_window) "a log
// that refunds left with more than 1024 entries has each request join the
// newest entry ... every error is on the strict side": 1030 requests at
// distinct instants, each refunded, leave the log at its cap with nothing
// counted; then the window still admits exactly Rate, never more, and
// the log stays bounded.
func TestSlidingWindowRefundedLogStaysStrict(t *testing.T) {
	ctx := context.Background()
	mr, rdb, l := miniLimiter(t)
	lim := Limit{Algorithm: SlidingWindow, Rate: 100, Period: 10 * time.Second}
	at := func(d time.Duration) { redistest.SetTime(mr, redistest.Epoch.Add(d)) }
	for i := range 1030 {
		at(time.Duration(i) * time.Millisecond)
		r, err := l.Allow(ctx, 1, lim.For("k"))
		if err != nil || !r.Allowed {
			t.Fatalf("request %d: %+v, %v", i, r, err)
		}
		if err := l.Refund(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	log := stateKeys(nil, l.prefix, "k", &algorithms[SlidingWindow], 0)[0]
	if card, err := rdb.ZCard(ctx, log).Result(); err != nil || card > 1025 {
		t.Fatalf("the log holds %d entries (%v), want at most 1025", card, err)
	}
	// Spread over the rest of the window: Rate admitted, then refused.
	admitted := 0
	for i := range 150 {
		at(2*time.Second + time.Duration(i)*10*time.Millisecond)
		r, err := l.Allow(ctx, 1, lim.For("k"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted++
		} else if r.RetryAfter <= 0 {
			t.Fatalf("request %d refused without a wait: %+v", i, r)
		}
	}
	if admitted != lim.Rate {
		t.Errorf("%d admitted in one window after the refunds, want exactly %d", admitted, lim.Rate)
	}
	if card, err := rdb.ZCard(ctx, log).Result(); err != nil || card > 1025 {
		t.Errorf("the log holds %d entries (%v), want at most 1025", card, err)
	}
}

type ctxKey struct{}

// TestSharedDeadlines backs deadlines' "never shorter than the timeout, at
// most 1 ms longer", and that a context no one can cancel shares one with
// the calls of its ms: every bound context ends within [timeout, timeout +
// 1 ms] of its making, keeps the caller's values, reports its deadline as
// Err, ends a context derived from it, and a tight loop makes no more
// contexts than the ms it spans; a caller's context that can be cancelled
// shares it too (its cancellation: TestBoundCallerLeaves). A timeout
// above maxSharedTimeout keeps a timer per call.
func TestSharedDeadlines(t *testing.T) {
	const timeout = 20 * time.Millisecond
	var d deadlines
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	start := time.Now()
	seen := map[context.Context]bool{}
	var first context.Context
	for i := range 2000 {
		before := time.Now()
		ctx := d.bound(context.Background(), timeout)
		if i == 0 {
			first = ctx
		}
		seen[ctx] = true
		dl, ok := ctx.Deadline()
		if !ok || dl.Before(before.Add(timeout)) || dl.After(time.Now().Add(timeout+time.Millisecond)) {
			t.Fatalf("deadline %v after %v, want within [%v, %v]", dl.Sub(before), ok, timeout, timeout+time.Millisecond)
		}
	}
	if spanned := time.Since(start).Milliseconds() + 2; int64(len(seen)) > spanned {
		t.Errorf("%d contexts over %d ms, want at most one per ms", len(seen), spanned)
	}
	ctx := d.bound(parent, timeout)
	if ctx.Value(ctxKey{}) != "v" {
		t.Errorf("the caller's value is lost: %v", ctx.Value(ctxKey{}))
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	// Each ends when its timer fires: timers of different Ps may fire out
	// of order, so the first made is waited for too, not presumed ended.
	for _, c := range []context.Context{child, first} {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a bound context, or one derived from it, outlived its deadline by 5s")
		}
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(first.Err(), context.DeadlineExceeded) {
		t.Errorf("Err after the deadline: %v and %v, want DeadlineExceeded", ctx.Err(), first.Err())
	}
	// A timeout above maxSharedTimeout is not shared: a shared deadline
	// lives its whole timeout (calls hold it), so an hour's, one per ms,
	// would keep gigabytes. Each call has its own, ended by its cancel.
	_, rdb := redistest.Mini(t)
	long := opsNew(t, rdb, WithTimeout(time.Hour))
	c1, done1 := long.bound(context.Background())
	c2, done2 := long.bound(context.Background())
	done1()
	done2()
	if c1 == c2 || !errors.Is(c1.Err(), context.Canceled) {
		t.Errorf("under a 1h timeout: contexts shared %v, Err after cancel %v; want one each, ended", c1 == c2, c1.Err())
	}
	// Through the Limiter: a cancellable caller's context shares the
	// deadline too, keeps its values, and is found by caller.
	l := opsNew(t, rdb, WithTimeout(timeout))
	mine, stop := context.WithCancel(parent)
	defer stop()
	bctx, done := l.bound(mine)
	defer done()
	shared := l.deadlines.cur.Load().end
	if dl, _ := bctx.Deadline(); !dl.Equal(shared) || caller(bctx) != mine || bctx.Value(ctxKey{}) != "v" {
		t.Errorf("a cancellable caller's bound context: deadline %v (shared %v), caller %v, value %v", dl, shared, caller(bctx), bctx.Value(ctxKey{}))
	}
}
