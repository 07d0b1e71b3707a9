package core

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// stallEvery is a redis.Hook that holds every command for d, or until its
// deadline: a Redis that accepts and never answers in time.
type stallEvery struct{ d time.Duration }

func (s stallEvery) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s stallEvery) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		select {
		case <-time.After(s.d):
		case <-ctx.Done():
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}
func (s stallEvery) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// deadAddr is an address nothing listens on: a dial is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// classifyCase is one way a call can fail: the Limiter and arguments that
// make it fail, what its error must match, and whether it is Redis'.
type classifyCase struct {
	name  string
	setup func(t *testing.T) (*Limiter, context.Context)
	key   string
	limit func(Limit) Limit // nil: the entry point's own Limit
	n     int               // 0: the entry point's own cost
	is    error
	fault bool
}

func classifyCases() []classifyCase {
	healthy := func(t *testing.T) (*Limiter, context.Context) {
		_, _, l := miniLimiter(t)
		return l, context.Background()
	}
	badLimit := func(Limit) Limit { return Limit{Rate: -1, Period: time.Second} }
	return []classifyCase{
		{name: "empty key", setup: healthy, key: "", is: ErrEmptyKey},
		{name: "invalid cost", setup: healthy, key: "k", n: -1, is: ErrInvalidCost},
		{name: "invalid limit", setup: healthy, key: "k", limit: badLimit, is: ErrInvalidLimit},
		{name: "closed", key: "k", is: ErrClosed, setup: func(t *testing.T) (*Limiter, context.Context) {
			l, ctx := healthy(t)
			_ = l.Close()
			return l, ctx
		}},
		{name: "canceled", key: "k", is: context.Canceled, setup: func(t *testing.T) (*Limiter, context.Context) {
			l, _ := healthy(t)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return l, ctx
		}},
		{name: "connection refused", key: "k", is: ErrUnavailable, fault: true, setup: func(t *testing.T) (*Limiter, context.Context) {
			rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			return opsNew(t, rdb, WithLogger(nil), WithBreaker(0, 0)), context.Background()
		}},
		{name: "timeout", key: "k", is: context.DeadlineExceeded, fault: true, setup: func(t *testing.T) (*Limiter, context.Context) {
			_, rdb := redistest.Mini(t)
			rdb.AddHook(stallEvery{d: time.Second})
			return opsNew(t, rdb, WithLogger(nil), WithTimeout(20*time.Millisecond), WithBreaker(0, 0)), context.Background()
		}},
		{name: "error reply", key: "k", is: ErrUnavailable, fault: true, setup: func(t *testing.T) (*Limiter, context.Context) {
			mr, rdb := redistest.Mini(t)
			l := opsNew(t, rdb, WithLogger(nil), WithBreaker(0, 0), opsPatient)
			mr.SetError("MISCONF the disk is full")
			return l, context.Background()
		}},
		{name: "circuit open", key: "k", is: ErrUnavailable, fault: true, setup: func(t *testing.T) (*Limiter, context.Context) {
			rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			l := opsNew(t, rdb, WithLogger(nil), WithTimeout(0), WithBreaker(1, time.Hour))
			if _, err := l.Allow(context.Background(), 1, PerSecond(1).For("opens")); err == nil {
				t.Fatal("Allow on a dead address succeeded")
			}
			return l, context.Background()
		}},
	}
}

// classifyEntries are the Limiter's calls, each with the Limit it uses
// unless the case replaces it, and whether it takes a cost and a Limit
// (else the cases about them do not apply).
var classifyEntries = []struct {
	name          string
	limit         Limit
	costs, limits bool
	call          func(ctx context.Context, l *Limiter, key string, lim Limit, n int) error
}{
	{"AllowN", PerSecond(10), true, true, func(ctx context.Context, l *Limiter, key string, lim Limit, n int) error {
		_, err := l.Allow(ctx, n, lim.For(key))
		return err
	}},
	{"AllowAtMost", PerSecond(10), true, true, func(ctx context.Context, l *Limiter, key string, lim Limit, n int) error {
		_, err := l.AllowAtMost(ctx, n, lim.For(key))
		return err
	}},
	{"Peek", with(PerSecond(10), SlidingWindow), false, true, func(ctx context.Context, l *Limiter, key string, lim Limit, _ int) error {
		_, err := l.Peek(ctx, lim.For(key))
		return err
	}},
	{"Refund", PerSecond(10), false, true, func(ctx context.Context, l *Limiter, key string, lim Limit, _ int) error {
		return l.Refund(ctx, receiptFor(l, lim.For(key), 1, 0))
	}},
	{"Renew", InFlight(3), false, true, func(ctx context.Context, l *Limiter, key string, lim Limit, _ int) error {
		_, err := l.Renew(ctx, receiptFor(l, lim.For(key), 1, 0))
		return err
	}},
	{"Allow of two Rules", with(PerMinute(10), FixedWindow), true, true, func(ctx context.Context, l *Limiter, key string, lim Limit, n int) error {
		_, err := l.Allow(ctx, n, lim.For(key), PerHour(100).For(key))
		return err
	}},
	{"WaitN", with(PerSecond(10), LeakyBucket), true, true, func(ctx context.Context, l *Limiter, key string, lim Limit, n int) error {
		ctx, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		_, err := l.Wait(ctx, n, lim.For(key))
		return err
	}},
	{"Reset", Limit{}, false, false, func(ctx context.Context, l *Limiter, key string, _ Limit, _ int) error {
		return l.Reset(ctx, key)
	}},
}

// TestErrorsClassifiedOnce walks the ways a call fails through every entry
// point: the error matches ErrUnavailable exactly when it is Redis' (and
// still matches its cause), redisFault agrees, and the breaker counts
// exactly those.
// Guards: "errors.Is(err, ErrUnavailable) is the one test of a Redis
// fault ... No other error matches it" (ErrUnavailable's godoc); fails
// without classified (a refused connection, a timeout and an error reply
// matched nothing), and without errNotConcurrency wrapping ErrInvalidLimit
// (Renew of a rate Limit was a Redis fault).
func TestErrorsClassifiedOnce(t *testing.T) {
	for _, c := range classifyCases() {
		for _, e := range classifyEntries {
			if c.n != 0 && !e.costs || c.limit != nil && !e.limits {
				continue
			}
			if c.key == "" && (e.name == "Refund" || e.name == "Renew") {
				continue // they take a receipt, whose key is its decision's
			}
			t.Run(c.name+"/"+e.name, func(t *testing.T) {
				l, ctx := c.setup(t)
				lim, n := e.limit, 1
				if c.limit != nil {
					lim = c.limit(lim)
				}
				if c.n != 0 {
					n = c.n
				}
				streak := l.breaker.streak
				err := e.call(ctx, l, c.key, lim, n)
				if err == nil {
					t.Fatalf("no error, want one matching %v", c.is)
				}
				if !errors.Is(err, c.is) {
					t.Errorf("%v does not match %v", err, c.is)
				}
				if got := errors.Is(err, ErrUnavailable); got != c.fault {
					t.Errorf("%v: matches ErrUnavailable %v, want %v", err, got, c.fault)
				}
				if got := redisFault(ctx, err); got != c.fault {
					t.Errorf("%v: redisFault %v, want %v", err, got, c.fault)
				}
				if !c.fault && l.breaker.streak != streak {
					t.Errorf("%v: the breaker counted it (streak %d to %d), want it ignored", err, streak, l.breaker.streak)
				}
			})
		}
	}
}

// TestRenewOfARateLimitIsTheCallers: a Renew of a rate Limit is an invalid
// Limit, not a Redis fault.
func TestRenewOfARateLimitIsTheCallers(t *testing.T) {
	_, _, l := miniLimiter(t)
	ctx := context.Background()
	_, err := l.Renew(ctx, receiptFor(l, PerSecond(1).For("k"), 1, 0))
	if !errors.Is(err, ErrInvalidLimit) || redisFault(ctx, err) {
		t.Errorf("Renew of a rate Limit: %v, redisFault %v; want ErrInvalidLimit, not a Redis fault", err, redisFault(ctx, err))
	}
}

// TestPingUnavailable: Ping's error for a Redis that does not answer
// matches ErrUnavailable, as a decision's does.
func TestPingUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	l := opsNew(t, rdb, WithLogger(nil))
	if _, err := l.Ping(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Ping of a dead address: %v, want ErrUnavailable", err)
	}
}
