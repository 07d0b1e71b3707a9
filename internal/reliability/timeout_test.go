package reliability

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// defaultTimeout is the Limiter's timeout without WithTimeout.
const defaultTimeout = 100 * time.Millisecond

// latencyBound is what a decision may cost when Redis does not answer: the
// Limiter's timeout (100 ms by default) plus a generous margin for a loaded
// 2-core CI machine under -race.
const latencyBound = 500 * time.Millisecond

// waitUnresponsive polls PING until the server stops answering within
// 20 ms, so a test knows a DEBUG SLEEP it sent has begun.
func waitUnresponsive(t *testing.T, s *redistest.Server) {
	t.Helper()
	probe := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	eventually(t, 2*time.Second, "redis stops answering PING", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return probe.Ping(ctx).Err() != nil
	})
}

// TestSlowRedisBoundsEachDecision: a Redis that does not answer (busy in
// DEBUG SLEEP, or a stopped process) costs each decision at most the
// Limiter's timeout, whether or not the client honours context deadlines on
// the socket (without ContextTimeoutEnabled the Limiter detaches the call).
func TestSlowRedisBoundsEachDecision(t *testing.T) {
	for _, fault := range []string{"DEBUG SLEEP 1", "SIGSTOP"} {
		for _, ctxTimeout := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", fault, ctxTimeout), func(t *testing.T) {
				s := redistest.StartServer(t)
				rdb := s.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = ctxTimeout })
				// The breaker is off so that every call really goes to Redis
				// and waits; the timeout is the default.
				lim := newLimiter(t, rdb, core.WithBreaker(0, 0))
				ctx := context.Background()
				limit := core.PerMinute(100)
				if _, err := lim.Allow(ctx, 1, limit.For("k")); err != nil {
					t.Fatalf("Allow on a healthy Redis: %v", err)
				}

				var slept chan error
				switch fault {
				case "DEBUG SLEEP 1":
					admin := s.Admin(t)
					slept = make(chan error, 1)
					go func() { slept <- admin.Do(context.Background(), "DEBUG", "SLEEP", "1").Err() }()
					waitUnresponsive(t, s)
				case "SIGSTOP":
					s.Pause()
				}

				var worst time.Duration
				for i := range 5 {
					start := time.Now()
					res, err := lim.Allow(ctx, 1, limit.For("k"))
					took := time.Since(start)
					worst = max(worst, took)
					if err == nil {
						t.Errorf("call %d while Redis is stuck: %+v, nil error; want a timeout", i, res)
					} else if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("call %d: error %v, want one wrapping context.DeadlineExceeded", i, err)
					}
					if took > latencyBound {
						t.Errorf("call %d took %v, want < %v (timeout %v)", i, took, latencyBound, defaultTimeout)
					}
				}
				t.Logf("%s: 5 calls failed, the slowest after %v (timeout %v)", fault, worst, defaultTimeout)

				switch fault {
				case "DEBUG SLEEP 1":
					select {
					case err := <-slept:
						t.Fatalf("DEBUG SLEEP ended (%v) before the calls did: the test did not test a stuck Redis", err)
					default:
					}
					if err := <-slept; err != nil {
						t.Fatalf("DEBUG SLEEP 1: %v", err)
					}
				case "SIGSTOP":
					s.Resume()
				}
				// Recovery needs nothing but Redis answering again.
				eventually(t, 5*time.Second, "Allow succeeds again", func() bool {
					_, err := lim.Allow(ctx, 1, limit.For("k"))
					return err == nil
				})
			})
		}
	}
}

// TestCallerDeadlineShorterThanTimeout: the caller's own deadline bounds the
// decision too.
func TestCallerDeadlineShorterThanTimeout(t *testing.T) {
	s := redistest.StartServer(t)
	lim := newLimiter(t, s.Client(t, nil), core.WithTimeout(time.Second), core.WithBreaker(0, 0))
	s.Pause()
	defer s.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := lim.Allow(ctx, 1, core.PerMinute(10).For("k"))
	if took := time.Since(start); took > latencyBound {
		t.Errorf("Allow with a 30ms caller deadline took %v, want < %v", took, latencyBound)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Allow: %v, want context.DeadlineExceeded", err)
	}
}
