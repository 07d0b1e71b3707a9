package reliability

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// traffic is n goroutines calling Allow in a loop until halt, counting
// outcomes and remembering when each failing call started.
type traffic struct {
	admitted, denied, failed atomic.Int64
	slowest                  atomic.Int64 // ns

	mu       sync.Mutex
	failures []failure

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

type failure struct {
	start, end time.Time
	err        error
}

func startTraffic(lim *core.Limiter, goroutines int, limit core.Limit, key func(g, i int) string) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	for g := range goroutines {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				start := time.Now()
				res, err := lim.Allow(context.Background(), 1, limit.For(key(g, i)))
				took := time.Since(start)
				for {
					old := tr.slowest.Load()
					if int64(took) <= old || tr.slowest.CompareAndSwap(old, int64(took)) {
						break
					}
				}
				switch {
				case err != nil:
					tr.failed.Add(1)
					tr.mu.Lock()
					tr.failures = append(tr.failures, failure{start, start.Add(took), err})
					tr.mu.Unlock()
				case res.Allowed:
					tr.admitted.Add(1)
				default:
					tr.denied.Add(1)
				}
			}
		}()
	}
	return tr
}

func (tr *traffic) calls() int64  { return tr.admitted.Load() + tr.denied.Load() + tr.failed.Load() }
func (tr *traffic) served() int64 { return tr.admitted.Load() + tr.denied.Load() }

// waitServed waits until n more calls have been answered by Redis.
func (tr *traffic) waitServed(t *testing.T, n int64, what string) {
	t.Helper()
	target := tr.served() + n
	deadline := time.Now().Add(10 * time.Second)
	for tr.served() < target {
		if time.Now().After(deadline) {
			var last error
			tr.mu.Lock()
			if len(tr.failures) > 0 {
				last = tr.failures[len(tr.failures)-1].err
			}
			tr.mu.Unlock()
			t.Fatalf("not within 10s: %d more decisions %s (%d failures, the last: %v)", n, what, tr.failed.Load(), last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// halt stops the goroutines and waits for them; it may be called again.
func (tr *traffic) halt() {
	tr.stopOnce.Do(func() { close(tr.stop) })
	tr.wg.Wait()
}

// failuresAfter returns the failures of calls started at or after t0.
func (tr *traffic) failuresAfter(t0 time.Time) []failure {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []failure
	for _, f := range tr.failures {
		if !f.start.Before(t0) {
			out = append(out, f)
		}
	}
	return out
}

// exactly checks that Rate+extra calls on a fresh key admit exactly Rate.
func exactly(t *testing.T, lim *core.Limiter, key string, limit core.Limit) {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range limit.Rate/4 + 1 {
				res, err := lim.Allow(context.Background(), 1, limit.For(key))
				if err != nil {
					t.Errorf("Allow(%q): %v", key, err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != int64(limit.Rate) {
		t.Errorf("%d goroutines on a fresh key: %d admitted, want exactly %d", 8, got, limit.Rate)
	}
}

// TestRedisRestartMidTraffic: Redis is killed (-9) under traffic from 8
// goroutines and started again on the same port. Calls fail only during
// the outage; the same Limiter then limits exactly again.
func TestRedisRestartMidTraffic(t *testing.T) {
	s := redistest.StartServer(t)
	const cooldown = 100 * time.Millisecond
	// Above the old default 50 ms, which a call on a busy CI machine can
	// outlast while Redis is up (this test tells the outage's failures
	// from none), and below latencyBound; a killed Redis refuses
	// connections at once whatever the timeout.
	lim := newLimiter(t, s.Client(t, nil), core.WithBreaker(5, cooldown), core.WithTimeout(250*time.Millisecond))
	unlimited := core.Limit{Algorithm: core.SlidingWindowCounter, Rate: 1_000_000, Period: time.Minute}
	tr := startTraffic(lim, 8, unlimited, func(g, i int) string { return fmt.Sprint("g", g, ":", i%50) })
	defer tr.halt()

	tr.waitServed(t, 500, "before the kill")
	if n := tr.failed.Load(); n != 0 {
		t.Fatalf("%d failures before the kill: %v", n, tr.failuresAfter(time.Time{})[0].err)
	}
	killed := time.Now()
	s.Kill()
	eventually(t, 5*time.Second, "calls fail while Redis is down", func() bool { return tr.failed.Load() > 0 })
	s.Restart()
	restarted := time.Now()
	served := tr.served()
	eventually(t, cooldown+5*time.Second, "decisions resume after the restart", func() bool { return tr.served() > served })
	recovered := time.Now()
	tr.waitServed(t, 1000, "after the restart")
	tr.halt()

	failures := tr.failuresAfter(time.Time{})
	var last time.Time
	for _, f := range failures {
		// A call under way when Redis died fails too; one that ended
		// before the kill had nothing to do with it.
		if f.end.Before(killed) {
			t.Errorf("a call that ended %v before the kill failed: %v", killed.Sub(f.end), f.err)
		}
		last = f.start
	}
	// Once one decision is served again, the breaker is closed and the
	// pool has fresh connections: allow a short grace for calls that were
	// already under way on a dead connection.
	if late := tr.failuresAfter(recovered.Add(200 * time.Millisecond)); len(late) > 0 {
		t.Errorf("%d calls started more than 200ms after recovery failed, e.g. %v", len(late), late[0].err)
	}
	if slowest := time.Duration(tr.slowest.Load()); slowest > latencyBound {
		t.Errorf("slowest call took %v, want < %v", slowest, latencyBound)
	}
	t.Logf("kill -9: %d calls failed (last started %v after the kill); down %v; served again %v after the restart; %d served in all",
		len(failures), last.Sub(killed).Round(time.Millisecond), restarted.Sub(killed).Round(time.Millisecond),
		recovered.Sub(restarted).Round(time.Millisecond), tr.served())

	exact := newLimiter(t, s.Client(t, nil), core.WithTimeout(patient))
	exactly(t, exact, "after-restart", core.Limit{Algorithm: core.SlidingWindow, Rate: 40, Period: time.Minute})
}

// TestScriptFlushMidRun: SCRIPT FLUSH under traffic is invisible: go-redis
// falls back from EVALSHA to EVAL, no call fails, and the limit stays exact.
// Each flush is a FUNCTION FLUSH too: the Limiter decides by FCALL of its
// library once that is loaded (in the background, so at some point of the
// run), and a SCRIPT FLUSH alone would then go unseen; without the library
// it answers with the scripts, which the SCRIPT FLUSH took away.
func TestScriptFlushMidRun(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t, nil)
	var sent counter
	rdb.AddHook(&sent)
	admin := s.Admin(t)
	// Any failure would be the flush's: no timeout can get in the way.
	lim := newLimiter(t, rdb, core.WithTimeout(patient))
	limit := core.Limit{Algorithm: core.SlidingWindow, Rate: 300, Period: time.Minute}
	tr := startTraffic(lim, 8, limit, func(int, int) string { return "hot" })
	defer tr.halt()

	const flushes = 5
	for range flushes {
		tr.waitServed(t, 100, "between flushes")
		if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		if err := admin.FunctionFlush(context.Background()).Err(); err != nil && !refusesFunctions(err) {
			t.Fatalf("FUNCTION FLUSH: %v", err)
		}
	}
	tr.waitServed(t, 100, "after the last flush")
	tr.halt()

	if n := tr.failed.Load(); n != 0 {
		t.Errorf("%d calls failed across %d SCRIPT FLUSHes, want 0; first: %v", n, flushes, tr.failuresAfter(time.Time{})[0].err)
	}
	if got := sent.evals.Load(); got < flushes {
		t.Errorf("%d EVAL fallbacks, want >= %d (one per flush at least): the flushes were not seen", got, flushes)
	}
	if got := tr.admitted.Load(); got != int64(limit.Rate) {
		t.Errorf("%d decisions (%d denied): %d admitted, want exactly %d", tr.served(), tr.denied.Load(), got, limit.Rate)
	}
	if n := unitsHeld(t, admin, "hot", limit); n != int64(limit.Rate) {
		t.Errorf("the window holds %d units, want %d", n, limit.Rate)
	}
	t.Logf("%d SCRIPT FLUSHes, %d EVAL fallbacks, %d decisions, 0 failures", flushes, sent.evals.Load(), tr.served())
}

// TestPoolExhaustion: 50 goroutines share a pool of 2 connections; while
// Redis stalls (DEBUG SLEEP 0.3) both connections are stuck and the others
// wait for one. Every call still returns within the timeout (a pool
// timeout or a deadline), decisions never over-admit, and the failures stop
// when Redis answers again.
func TestPoolExhaustion(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t, func(o *redis.Options) {
		o.PoolSize = 2
		o.PoolTimeout = 20 * time.Millisecond
	})
	admin := s.Admin(t)
	// The breaker is off: the pool, not the breaker, is under test.
	lim := newLimiter(t, rdb, core.WithTimeout(50*time.Millisecond), core.WithBreaker(0, 0))
	limit := core.Limit{Algorithm: core.SlidingWindow, Rate: 2000, Period: time.Minute}
	tr := startTraffic(lim, 50, limit, func(int, int) string { return "hot" })
	defer tr.halt()

	tr.waitServed(t, 200, "before the stall")
	if err := admin.Do(context.Background(), "DEBUG", "SLEEP", "0.3").Err(); err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	woke := time.Now()
	tr.waitServed(t, 2500, "after the stall")
	tr.halt()

	failures := tr.failuresAfter(time.Time{})
	var poolTimeouts, deadlines, other int
	for _, f := range failures {
		switch {
		case errors.Is(f.err, redis.ErrPoolTimeout):
			poolTimeouts++
		case isTimeout(f.err):
			deadlines++
		default:
			other++
			if other == 1 {
				t.Errorf("a call failed with %v, want a timeout", f.err)
			}
		}
	}
	t.Logf("pool of 2, 50 goroutines, Redis stalled 300ms: %d calls, %d failed (%d pool timeouts, %d deadlines, %d other), slowest %v",
		tr.calls(), len(failures), poolTimeouts, deadlines, other, time.Duration(tr.slowest.Load()))
	if len(failures) == 0 {
		t.Errorf("no call failed while both connections were stuck for 300ms: the pool was never exhausted")
	}
	if slowest := time.Duration(tr.slowest.Load()); slowest > latencyBound {
		t.Errorf("slowest call took %v, want < %v", slowest, latencyBound)
	}
	hist := map[int]int{}
	for _, f := range failures {
		hist[int(f.start.Sub(woke)/(50*time.Millisecond))]++
	}
	t.Logf("failures by 50ms bucket relative to Redis waking up: %v", hist)
	// A call that timed out may still have been counted by Redis: what
	// callers saw admitted <= what Redis holds <= the limit.
	held := unitsHeld(t, admin, "hot", limit)
	if got := tr.admitted.Load(); got > held || held > int64(limit.Rate) {
		t.Errorf("admitted %d, Redis holds %d, limit %d: want admitted <= held <= limit", got, held, limit.Rate)
	}
	if tr.calls() > 2*int64(limit.Rate) && held != int64(limit.Rate) {
		t.Errorf("after %d calls Redis holds %d, want the whole limit %d", tr.calls(), held, limit.Rate)
	}

	// The pool recovers: as many callers as connections get no failures.
	// (With 50 callers on 2 connections, queueing alone can exceed a 50ms
	// timeout on a busy machine: that is the exhaustion, not a leftover.)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if _, err := lim.Allow(context.Background(), 1, limit.For("after")); err != nil {
					t.Errorf("call %d after the stall: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// unitsHeld is how many units of limit Redis holds for key, read with a
// Peek on a patient Limiter of its own: the sliding window's log groups
// requests into weighted entries, so no ZCARD counts them.
func unitsHeld(t *testing.T, rdb *redis.Client, key string, limit core.Limit) int64 {
	t.Helper()
	res, err := newLimiter(t, rdb, core.WithTimeout(patient)).Peek(context.Background(), limit.For(key))
	if err != nil {
		t.Fatalf("Peek %q: %v", key, err)
	}
	return int64(limit.Capacity() - res.Remaining)
}

// refusesFunctions reports the answer of a server without FUNCTION (before
// Redis 7), where the scripts are all there is to flush.
func refusesFunctions(err error) bool {
	return strings.Contains(err.Error(), "unknown command") && strings.Contains(strings.ToLower(err.Error()), "function")
}
