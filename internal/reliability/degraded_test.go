package reliability

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/observe"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttplimit"
)

// TestTimedOutDecisionKeepsTheLimit is issue 34's finding 2: with the
// default settings (then a 50 ms timeout, FailOpen), a key Redis has refused, then
// Redis stopped (SIGSTOP): every request timed out and was served with no
// limit (50 of 50 here). Now the local fallback decides, and it knows that
// Redis refused the key: 0 of 50 are served.
func TestTimedOutDecisionKeepsTheLimit(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	l, err := core.New(rdb, core.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := httplimit.New(httplimit.Config{Limiter: l, Limit: core.PerMinute(5)})
	if err != nil {
		t.Fatal(err)
	}
	h := nethttplimit.New(p)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func(calls int) (served int) {
		for range calls {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if w.Code == http.StatusOK {
				served++
			}
		}
		return served
	}
	if got := serve(8); got != 5 {
		t.Fatalf("Redis up: %d of 8 served, want 5", got)
	}
	s.Pause()
	defer s.Resume()
	if got := serve(50); got != 0 {
		t.Errorf("Redis stopped after refusing the key: %d of 50 served, want 0", got)
	}
}

// TestFreshInstanceDecidedByFallback backs "a freshly started instance
// never serves a request because Redis has not answered it yet"
// (docs/operations.md): a Limiter made with default settings while its
// Redis hangs (SIGSTOP: connections are accepted, nothing is answered)
// decides its first requests in process, as one of the 64 instances it
// assumes before Redis has counted the fleet. PerMinute(10) is then one
// unit per 6.4 minutes: 1 of 20 admitted, each a decision of the fallback,
// never an error for the fail policy to serve unlimited.
func TestFreshInstanceDecidedByFallback(t *testing.T) {
	s := redistest.StartServer(t)
	s.Pause()
	defer s.Resume()
	rdb := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ContextTimeoutEnabled = true })
	l, err := core.New(rdb, core.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	admitted := 0
	for i := range 20 {
		r, err := l.Allow(context.Background(), 1, core.PerMinute(10).For("fresh"))
		if err != nil || !r.Fallback {
			t.Fatalf("request %d to a fresh Limiter, Redis hanging: %+v, %v; want a decision of the fallback", i+1, r, err)
		}
		if r.Allowed {
			admitted++
		} else if r.RetryAfter < 6*time.Minute {
			t.Errorf("request %d refused with RetryAfter %v, want 6.4 minutes (a 64th of 10 a minute)", i+1, r.RetryAfter)
		}
	}
	if admitted != 1 {
		t.Errorf("%d of 20 admitted, want 1: the share of one of 64 assumed instances", admitted)
	}
}

// TestDegradedSweep backs the bounds of docs/limits.md ("The local
// fallback") against real faults: instances x rates x algorithms x fault
// (down: killed; paused: SIGSTOP, every call times out; slow: CLIENT PAUSE
// beyond the timeout; dropped: every connection reset once a decision's
// script has reached Redis, before its answer, the worst instant of a
// failover or a cut link: Redis takes the units, and the fallback decides
// the request as if it had not). Each instance is a Limiter with default settings
// but n (WithLocalFallback(n, 1024)); 16 goroutines per instance ask for
// fresh keys, 4 x max(Rate, n) requests each, while the fault lasts. The
// fleet admits at most max(Rate, n) per key (an hour's Period: nothing
// refills during the test), and at least one per instance: counts only,
// never timings.
func TestDegradedSweep(t *testing.T) {
	algorithms := core.Algorithm(observe.Algorithms)
	for _, fault := range []string{"down", "paused", "slow", "dropped"} {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d instances", fault, n), func(t *testing.T) {
				s := redistest.StartServer(t)
				addr := s.Addr()
				var proxy *linkProxy
				if fault == "dropped" {
					proxy = startProxy(t, addr)
					addr = proxy.Addr()
				}
				var fleet []*core.Limiter
				for range n {
					rdb := s.Client(t, func(o *redis.Options) { o.Addr = addr; o.MaxRetries = -1; o.ContextTimeoutEnabled = true })
					l, err := core.New(rdb, core.WithLogger(nil), core.WithLocalFallback(n, 1024))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = l.Close() })
					fleet = append(fleet, l)
				}
				heal := injure(t, s, proxy, fault)
				defer heal()
				for _, rate := range []int{1, 2*n + 1} {
					for a := range algorithms {
						limit := core.Limit{Algorithm: a, Rate: rate, Period: time.Hour}
						key := fmt.Sprintf("%s-%d-%d-%v", fault, n, rate, a)
						got := admitted(t, fleet, limit.For(key), 4*max(rate, n))
						if bound := max(limit.Capacity(), n); got > bound || got < 1 {
							t.Errorf("%v, %d instances, %s: %d admitted, want 1 to max(Rate, n) = %d", limit, n, fault, got, bound)
						}
					}
				}
				if fault == "dropped" && heal() == 0 {
					t.Errorf("no decision reached Redis before its connection was reset: the fault was not at its worst instant")
				}
			})
		}
	}
}

// injure starts the fault on s (behind proxy, for "dropped") and returns
// what ends it, which reports how many decisions reached Redis and lost
// their answer.
func injure(t *testing.T, s *redistest.Server, proxy *linkProxy, fault string) (heal func() int) {
	switch fault {
	case "down":
		s.Kill()
		return func() int { return 0 }
	case "paused":
		s.Pause()
		return func() int { s.Resume(); return 0 }
	case "dropped":
		var resets atomic.Int64
		reset := func(b []byte) bool {
			low := strings.ToLower(string(b))
			if strings.Contains(low, "fcall") || strings.Contains(low, "evalsha") {
				resets.Add(1)
				return true
			}
			return false
		}
		proxy.reset.Store(&reset)
		return func() int { proxy.reset.Store(nil); return int(resets.Load()) }
	}
	admin := s.Admin(t)
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 60000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	return func() int { _ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); return 0 }
}

// admitted sends calls requests of rule to each instance of fleet from
// 16 goroutines each, and counts the admissions.
func admitted(t *testing.T, fleet []*core.Limiter, rule core.Rule, calls int) int {
	var got atomic.Int64
	var wg sync.WaitGroup
	for _, l := range fleet {
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < calls; i += 16 {
					r, err := l.Allow(context.Background(), 1, rule)
					if err != nil {
						t.Errorf("%v: %v, want a decision of the fallback", rule.Limit, err)
						return
					}
					if r.Allowed {
						got.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	return int(got.Load())
}
