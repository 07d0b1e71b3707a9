package grpclimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// countedClient is a client whose calls go through
// UnaryClientInterceptor(l, key, limit) to a server that counts the calls
// it serves.
func countedClient(t *testing.T, l *core.Limiter, key string, limit core.Limit) (healthpb.HealthClient, *atomic.Int32) {
	t.Helper()
	var served atomic.Int32
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		served.Add(1)
		return handler(ctx, req)
	}
	s := serve(t, nil, grpc.ChainUnaryInterceptor(count))
	return s.client(peerA, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(l, key, limit))), &served
}

// callWithin makes one call with a deadline d away.
func callWithin(c healthpb.HealthClient, d time.Duration) answer {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return answerOf(err, nil, nil)
}

// TestClientWaitTooLongForDeadline: a call whose wait would outlast its
// deadline is refused at once with ResourceExhausted and a RetryInfo of
// the whole wait it would have had, to the microsecond, and is never
// made. Redis' clock stands still, so each wait is exact.
func TestClientWaitTooLongForDeadline(t *testing.T) {
	tests := []struct {
		name      string
		limit     core.Limit
		taken     int // units taken before the call
		wantRetry time.Duration
	}{
		{"2 per minute, spent: the next unit in 30s", core.PerMinute(2), 2, 30 * time.Second},
		{"2 per second, spent: 500ms, not rounded to 1s", core.PerSecond(2), 2, 500 * time.Millisecond},
		// 4 units queued ahead at 5 per second: the call would leave after
		// 800ms, whenever it joined the queue.
		{"leaky bucket, 800ms queued ahead", core.Limit{Algorithm: core.LeakyBucket, Rate: 5, Period: time.Second, Burst: 10}, 4, 800 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newMini(t, timeout)
			if r, err := b.limiter.Allow(context.Background(), tt.taken, tt.limit.For("upstream")); err != nil || !r.Allowed {
				t.Fatalf("taking %d: %+v, %v", tt.taken, r, err)
			}
			c, served := countedClient(t, b.limiter, "upstream", tt.limit)
			deadline := tt.wantRetry / 2
			start := time.Now()
			a := callWithin(c, deadline)
			if took := time.Since(start); took >= deadline {
				t.Errorf("the refusal took %v, want it before the %v deadline", took, deadline)
			}
			if a.code != codes.ResourceExhausted || a.retry != tt.wantRetry {
				t.Errorf("got %v, want ResourceExhausted with RetryInfo %v", a, tt.wantRetry)
			}
			if n := served.Load(); n != 0 {
				t.Errorf("the upstream served %d calls, want 0", n)
			}
		})
	}
}

// TestClientRedisTimeout: a Redis slower than the Limiter's timeout is
// Unavailable, as on a server (it is not the caller's deadline), without a
// RetryInfo (there is no wait to tell), not the ResourceExhausted of a
// quota; and the call is not made.
func TestClientRedisTimeout(t *testing.T) {
	_, rdb := redistest.Mini(t)
	rdb.AddHook(stallScripts{})
	l, err := core.New(rdb, core.WithTimeout(20*time.Millisecond), core.WithLogger(nil), core.WithLocalFallback(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	c, served := countedClient(t, l, "upstream", core.PerSecond(10))
	if a := callWithin(c, 10*time.Second); a.code != codes.Unavailable || a.retry != -1 {
		t.Errorf("with Redis stalled: %v, want Unavailable without RetryInfo", a)
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the upstream served %d calls, want 0", n)
	}
}

// stallScripts is a redis.Hook under which every decision (a script or
// function call) hangs until its context ends, as on a Redis too slow for
// the Limiter's timeout.
type stallScripts struct{}

func (stallScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (stallScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "evalsha", "eval", "fcall":
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (stallScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
