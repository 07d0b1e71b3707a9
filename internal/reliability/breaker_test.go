package reliability

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// outages are the ways Redis goes away and comes back: killed and started
// again on the same port (its data lost), or paused and continued.
var outages = []struct {
	name     string
	down, up func(*redistest.Server)
}{
	{"kill -9, restart", (*redistest.Server).Kill, (*redistest.Server).Restart},
	{"SIGSTOP, SIGCONT", (*redistest.Server).Pause, (*redistest.Server).Resume},
}

// circuitOpen reports the error of a call the open circuit kept from
// Redis: a Redis fault (every one matches core.ErrUnavailable) that says
// so.
func circuitOpen(err error) bool {
	return errors.Is(err, core.ErrUnavailable) && strings.Contains(err.Error(), "circuit open")
}

// TestBreakerOpensProbesAndRecovers: after N consecutive failures the
// Limiter fails fast with its circuit open and sends nothing to Redis; after
// the cool-down exactly one call probes; when Redis is back, the same
// Limiter limits exactly again. The logger hears of each change of state
// once, however many requests there were.
func TestBreakerOpensProbesAndRecovers(t *testing.T) {
	for _, o := range outages {
		t.Run(o.name, func(t *testing.T) {
			s := redistest.StartServer(t)
			rdb := s.Client(t, nil)
			var sent counter
			rdb.AddHook(&sent)
			logs := &logRecorder{}
			const failures, cooldown = 3, 300 * time.Millisecond
			lim := newLimiter(t, rdb, core.WithTimeout(50*time.Millisecond), core.WithBreaker(failures, cooldown),
				core.WithLogger(slog.New(logs)))
			ctx := context.Background()
			limit := core.Limit{Algorithm: core.SlidingWindow, Rate: 5, Period: time.Minute}
			if _, err := lim.Allow(ctx, 1, limit.For("warm")); err != nil {
				t.Fatalf("Allow on a healthy Redis: %v", err)
			}

			o.down(s)
			for i := range failures {
				start := time.Now()
				_, err := lim.Allow(ctx, 1, limit.For("k"))
				if !errors.Is(err, core.ErrUnavailable) || circuitOpen(err) {
					t.Fatalf("failure %d of %d: err = %v, want a Redis error (the circuit is still closed)", i+1, failures, err)
				}
				if took := time.Since(start); took > latencyBound {
					t.Errorf("failure %d took %v, want < %v", i+1, took, latencyBound)
				}
			}
			opened := time.Now()

			before := sent.cmds.Load()
			const calls = 200
			took := make([]time.Duration, calls)
			for i := range calls {
				start := time.Now()
				_, err := lim.Allow(ctx, 1, limit.For(fmt.Sprint("k", i)))
				took[i] = time.Since(start)
				if !circuitOpen(err) {
					t.Fatalf("call %d with the circuit open: err = %v, want the open circuit's", i, err)
				}
			}
			if got := sent.cmds.Load() - before; got != 0 {
				t.Errorf("%d calls with the circuit open sent %d commands to Redis, want 0", calls, got)
			}
			slices.Sort(took)
			median, worst := took[calls/2], took[calls-1]
			t.Logf("circuit open: %d calls failed fast, median %v, slowest %v", calls, median, worst)
			// The median says "fast" on any machine; the slowest may have
			// been descheduled, but never waits for Redis.
			if median > time.Millisecond || worst > latencyBound {
				t.Errorf("with the circuit open: median %v, slowest %v; want < 1ms and < %v", median, worst, latencyBound)
			}

			// After the cool-down one call probes Redis (still down), and
			// the circuit opens again.
			// (Decisions only: the probe's new connection may start the
			// Limiter's background health check, an INFO.)
			before = sent.decisions.Load()
			var probeErr error
			var probed time.Time
			eventually(t, cooldown+2*time.Second, "a call probes Redis after the cool-down", func() bool {
				start := time.Now()
				_, err := lim.Allow(ctx, 1, limit.For("k"))
				if circuitOpen(err) {
					return false
				}
				probeErr, probed = err, start
				return true
			})
			if probeErr == nil {
				t.Fatalf("the probe succeeded while Redis is down")
			}
			if early := opened.Add(cooldown).Sub(probed); early > 5*time.Millisecond {
				t.Errorf("probe sent %v before the cool-down ended", early)
			}
			if got := sent.decisions.Load() - before; got != 1 {
				t.Errorf("the probe made %d decision calls, want 1", got)
			}
			if _, err := lim.Allow(ctx, 1, limit.For("k")); !circuitOpen(err) {
				t.Errorf("after a failed probe: err = %v, want the open circuit's (open again)", err)
			}

			// Redis comes back: the same Limiter resumes within a cool-down.
			o.up(s)
			back := time.Now()
			eventually(t, cooldown+3*time.Second, "Allow succeeds after Redis is back", func() bool {
				_, err := lim.Allow(ctx, 1, limit.For("probe"))
				return err == nil
			})
			recovered := time.Since(back)
			t.Logf("exact limiting resumed %v after Redis was back (cool-down %v)", recovered, cooldown)
			if recovered > cooldown+latencyBound {
				t.Errorf("recovery took %v, want < cool-down %v + %v", recovered, cooldown, latencyBound)
			}
			admitted := 0
			for i := range 2 * limit.Rate {
				res, err := lim.Allow(ctx, 1, limit.For("fresh"))
				if err != nil {
					t.Fatalf("call %d after recovery: %v", i, err)
				}
				if res.Fallback || res.Cached {
					t.Errorf("call %d after recovery: %+v, want a Redis decision", i, res)
				}
				if res.Allowed {
					admitted++
				}
			}
			if admitted != limit.Rate {
				t.Errorf("after recovery %d of %d admitted, want exactly %d", admitted, 2*limit.Rate, limit.Rate)
			}

			// One record per change of state: failing, open, answering again
			// (and, on a server without FUNCTION, the one that says so), and
			// the one line a second that says who decided without Redis
			// (core's degraded log, TestDegradedLoggedOncePerSecond).
			got := slices.DeleteFunc(logs.records(), func(r string) bool { return strings.Contains(r, "refused FUNCTION") })
			want := []string{"WARN failed", "WARN did not decide", "WARN circuit open", "INFO answers again"}
			ok := len(got) == len(want)
			for i := 0; ok && i < len(want); i++ {
				level, text, _ := strings.Cut(want[i], " ")
				ok = strings.HasPrefix(got[i], level+" ") && strings.Contains(got[i], text)
			}
			if !ok {
				t.Errorf("log records over %d requests:\n%s\nwant 4, one per change of state and one for the degraded decisions, like %q",
					calls+failures+10, strings.Join(got, "\n"), want)
			}
		})
	}
}

// TestLocalFallbackWhileRedisIsDown: with WithLocalFallback(instances,
// maxKeys), a dead Redis gives decisions marked Fallback that admit this
// instance's share (capacity/instances) and then deny; a key rotation flood
// never gives a key a fresh share; and exact Redis decisions return with
// Redis.
func TestLocalFallbackWhileRedisIsDown(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t, nil)
	const instances, maxKeys = 4, 100
	const cooldown = 200 * time.Millisecond
	mk := func() *core.Limiter {
		return newLimiter(t, rdb, core.WithLocalFallback(instances, maxKeys), core.WithBreaker(3, cooldown))
	}
	lim := mk()
	ctx := context.Background()
	// 40 per hour: the local share is 10, and it does not refill during
	// the test.
	limit := core.Limit{Rate: 40, Period: time.Hour}
	share := limit.Rate / instances
	if res, err := lim.Allow(ctx, 1, limit.For("k")); err != nil || res.Fallback {
		t.Fatalf("Allow on a healthy Redis: %+v, %v; want a Redis decision", res, err)
	}

	s.Kill()
	drain := func(lim *core.Limiter, key string, calls int) (admitted int) {
		t.Helper()
		for i := range calls {
			start := time.Now()
			res, err := lim.Allow(ctx, 1, limit.For(key))
			if took := time.Since(start); took > latencyBound {
				t.Errorf("%s call %d took %v with Redis down, want < %v", key, i, took, latencyBound)
			}
			if err != nil {
				t.Fatalf("%s call %d with Redis down: %v, want a fallback decision", key, i, err)
			}
			if !res.Fallback {
				t.Fatalf("%s call %d: %+v, want Fallback true", key, i, res)
			}
			if res.Allowed {
				admitted++
			}
		}
		return admitted
	}
	if got := drain(lim, "fresh", 3*share); got != share {
		t.Errorf("fallback admitted %d of %d, want %d (capacity %d / %d instances)", got, 3*share, share, limit.Rate, instances)
	}

	// Memory is bounded, and the limit holds whatever the number of keys:
	// a key that used its share stays denied through a flood of others
	// (an LRU of maxKeys buckets forgot it and gave it a fresh share).
	flood := mk()
	if got := drain(flood, "a", share+1); got != share {
		t.Fatalf("key a: %d admitted, want %d", got, share)
	}
	for i := range 20_000 {
		drain(flood, fmt.Sprint("flood", i), 1)
	}
	if got := drain(flood, "a", 1); got != 0 {
		t.Errorf("key a after 20000 other keys: admitted again, want still denied")
	}

	s.Restart()
	eventually(t, cooldown+3*time.Second, "Redis decisions after Redis is back", func() bool {
		res, err := lim.Allow(ctx, 1, limit.For("probe"))
		return err == nil && !res.Fallback
	})
	admitted := 0
	for i := range limit.Rate + 5 {
		res, err := lim.Allow(ctx, 1, limit.For("after"))
		if err != nil || res.Fallback {
			t.Fatalf("call %d after recovery: %+v, %v; want a Redis decision", i, res, err)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != limit.Rate {
		t.Errorf("after recovery %d admitted, want exactly %d (the whole limit, not the local share)", admitted, limit.Rate)
	}
}
