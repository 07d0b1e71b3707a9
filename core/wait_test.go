package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// The Wait tests run on a miniredis whose clock follows the wall clock and
// on the real Redis of REDIS_URL: Wait sleeps on the wall clock, so its
// Redis must see time pass.

func TestWaitAllowedReturnsAtOnce(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t) // frozen clock: nothing refills
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
	limit := PerHour(5)
	start := time.Now()
	for i := range 5 {
		if _, err := l.Wait(ctx, 1, limit.For("k")); err != nil {
			t.Fatalf("Wait %d: %v", i+1, err)
		}
	}
	// A wrong sleep would last minutes (one token per 12 minutes).
	if got, want := time.Since(start), 5*time.Second; got >= want {
		t.Errorf("5 admitted Waits took %v, want < %v", got, want)
	}
	if r, err := l.Peek(ctx, limit.For("k")); err != nil || r.Remaining != 0 {
		t.Errorf("Peek after 5 Waits = %+v, %v; want Remaining 0", r, err)
	}
}

// TestWaitSleepsRetryAfter: with a token bucket of 1 per 200ms, the second
// Wait sleeps out the RetryAfter Redis gave and is then admitted, asking
// Redis about twice rather than polling.
func TestWaitSleepsRetryAfter(t *testing.T) {
	for _, be := range opsBackends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.open(t)
			var count opsCounter
			rdb.AddHook(&count)
			l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
			limit := Limit{Rate: 1, Period: 200 * time.Millisecond}
			start := time.Now()
			if _, err := l.Wait(ctx, 1, limit.For("k")); err != nil {
				t.Fatal(err)
			}
			// A wrong sleep would be a whole 200ms RetryAfter.
			if got := time.Since(start); got >= 190*time.Millisecond {
				t.Errorf("first Wait took %v, want it at once", got)
			}
			before := count.cmds.Load()
			start = time.Now()
			if _, err := l.Wait(ctx, 1, limit.For("k")); err != nil {
				t.Fatal(err)
			}
			waited := time.Since(start)
			if waited < 150*time.Millisecond || waited >= time.Second {
				t.Errorf("second Wait returned after %v, want 150ms <= wait < 1s", waited)
			}
			if got := count.cmds.Load() - before; got > 3 {
				t.Errorf("second Wait sent %d commands, want <= 3 (it sleeps RetryAfter, it does not poll)", got)
			}
			if got, want := count.admitted.Load(), int64(2); got != want {
				t.Errorf("admissions %d, want %d", got, want)
			}
			t.Logf("second Wait: %v, %d commands", waited.Round(time.Millisecond), count.cmds.Load()-before)
		})
	}
}

// TestWaitCanceledMidWait: a Wait sleeping out an hour returns the
// context's error within 100ms of the cancellation.
func TestWaitCanceledMidWait(t *testing.T) {
	for _, be := range opsBackends() {
		t.Run(be.name, func(t *testing.T) {
			rdb := be.open(t)
			l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
			limit := PerHour(1)
			if _, err := l.Wait(context.Background(), 1, limit.For("k")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			canceled := make(chan time.Time, 1)
			time.AfterFunc(50*time.Millisecond, func() {
				canceled <- time.Now()
				cancel()
			})
			_, err := l.Wait(ctx, 1, limit.For("k"))
			returned := time.Now()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait = %v, want context.Canceled", err)
			}
			at := <-canceled
			if late := returned.Sub(at); late >= 100*time.Millisecond {
				t.Errorf("Wait returned %v after the cancellation, want < 100ms", late)
			}
		})
	}
}

// TestWaitDeadlineNearerThanRetryAfter: Wait gives up at once, with an
// error wrapping context.DeadlineExceeded, when the deadline would pass
// before the wait ends.
func TestWaitDeadlineNearerThanRetryAfter(t *testing.T) {
	tests := []struct {
		name     string
		limit    Limit
		deadline time.Duration
	}{
		{"retry after an hour, deadline 500ms", PerHour(1), 500 * time.Millisecond},
		{"retry after 1s, deadline 300ms", PerSecond(1), 300 * time.Millisecond},
		{"sliding window, retry after a minute, deadline 1s", Limit{Algorithm: SlidingWindow, Rate: 1, Period: time.Minute}, time.Second},
		{"fixed window, retry after an hour, deadline 1s", Limit{Algorithm: FixedWindow, Rate: 1, Period: time.Hour}, time.Second},
	}
	for _, be := range opsBackends() {
		t.Run(be.name, func(t *testing.T) {
			rdb := be.open(t)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
					first, err := l.Wait(context.Background(), 1, tt.limit.For("worker"))
					if err != nil {
						t.Fatal(err)
					}
					if first.ResetAfter < 2*tt.deadline {
						// An aligned window ends within the deadline (its last
						// second of the hour, on Redis' clock): the wait would
						// fit. The next window is taken instead.
						time.Sleep(first.ResetAfter)
						if err := l.Reset(context.Background(), "worker"); err != nil {
							t.Fatal(err)
						}
						if _, err := l.Wait(context.Background(), 1, tt.limit.For("worker")); err != nil {
							t.Fatal(err)
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
					defer cancel()
					start := time.Now()
					r, err := l.Wait(ctx, 1, tt.limit.For("worker"))
					if got := time.Since(start); got >= 100*time.Millisecond {
						t.Errorf("Wait took %v, want it to give up at once", got)
					}
					if !errors.Is(err, ErrWaitExceedsDeadline) || !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("Wait = %v, want an error matching ErrWaitExceedsDeadline and context.DeadlineExceeded", err)
					}
					if r.Allowed || r.RetryAfter <= tt.deadline {
						t.Errorf("Wait's Result = %+v, want the denial, with a RetryAfter beyond the %v deadline", r, tt.deadline)
					}
					if !strings.Contains(err.Error(), `"worker"`) {
						t.Errorf("error %q does not name the key", err)
					}
				})
			}
		})
	}
}

// TestWaitLeakyBucketDeadline: a LeakyBucket Wait never takes a place in
// the queue that its deadline cannot wait for. The queue ahead holds 4
// units of a 10 per second bucket, so a new request would leave after
// 400ms; with a deadline shorter than that, at no moment before the
// deadline can the request be admitted and still leave before it.
func TestWaitLeakyBucketDeadline(t *testing.T) {
	// 5 per second: 4 queued units make the next request wait 800ms, so a
	// stall of up to 300ms on a busy machine cannot change the cases.
	limit := Limit{Algorithm: LeakyBucket, Rate: 5, Period: time.Second, Burst: 10}
	tests := []struct {
		name      string
		deadline  time.Duration
		wantErr   error
		wantAdmit int64
		minWait   time.Duration
		maxWait   time.Duration
	}{
		{"deadline 300ms, far before the 800ms delay", 300 * time.Millisecond, context.DeadlineExceeded, 0, 0, 100 * time.Millisecond},
		{"deadline 500ms, before the 800ms delay", 500 * time.Millisecond, context.DeadlineExceeded, 0, 0, 100 * time.Millisecond},
		{"deadline 2s, after the 800ms delay", 2 * time.Second, nil, 1, 700 * time.Millisecond, 2 * time.Second},
	}
	for _, be := range opsBackends() {
		t.Run(be.name, func(t *testing.T) {
			rdb := be.open(t)
			var count opsCounter
			rdb.AddHook(&count)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
					r, err := l.Allow(context.Background(), 4, limit.For("q"))
					if err != nil || !r.Allowed {
						t.Fatalf("queueing 4: %+v, %v", r, err)
					}
					admitted := count.admitted.Load()
					ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
					defer cancel()
					start := time.Now()
					_, err = l.Wait(ctx, 1, limit.For("q"))
					waited := time.Since(start)
					if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
						t.Errorf("Wait = %v, want %v", err, tt.wantErr)
					}
					if got := count.admitted.Load() - admitted; got != tt.wantAdmit {
						t.Errorf("Wait took %d places in the queue, want %d", got, tt.wantAdmit)
					}
					if waited < tt.minWait || waited >= tt.maxWait {
						t.Errorf("Wait returned after %v, want %v <= wait < %v", waited, tt.minWait, tt.maxWait)
					}
				})
			}
		})
	}
}

func TestWaitInvalid(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
	tests := []struct {
		name    string
		key     string
		limit   Limit
		n       int
		wantErr error
	}{
		{"invalid limit", "k", Limit{Rate: 0, Period: time.Second}, 1, ErrInvalidLimit},
		{"cost above capacity", "k", PerSecond(3), 4, ErrInvalidCost},
		{"zero cost", "k", PerSecond(3), 0, ErrInvalidCost},
		{"empty key", "", PerSecond(3), 1, ErrEmptyKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := l.Wait(ctx, tt.n, tt.limit.For(tt.key)); !errors.Is(err, tt.wantErr) {
				t.Errorf("WaitN = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// TestWaitExceedsDeadlineSentinel: a wait too long for the deadline is
// told apart from every other error by ErrWaitExceedsDeadline, still
// matches context.DeadlineExceeded (and its net.Error), and comes with the
// denial, whose RetryAfter is the whole wait the request would have had.
// Redis' clock stands still, so every wait is exact and Wait gives up
// without sleeping.
func TestWaitExceedsDeadlineSentinel(t *testing.T) {
	leaky := func(burst int) Limit {
		return Limit{Algorithm: LeakyBucket, Rate: 5, Period: time.Second, Burst: burst}
	}
	tests := []struct {
		name      string
		limit     Limit
		queued    int // units taken before the Wait
		wantRetry time.Duration
	}{
		{"token bucket: the next token", PerHour(1), 1, time.Hour},
		{"fixed window: the next window", Limit{Algorithm: FixedWindow, Rate: 2, Period: time.Minute}, 2, 55*time.Second + time.Millisecond}, // (from its expiry, see TestAllowSteps)
		// The queue ahead drains in 800ms, and a peek says so before a
		// place is taken.
		{"leaky bucket: a delay past the deadline", leaky(10), 4, 800 * time.Millisecond},
		// The queue is full: the request would be admitted in 200ms and
		// leave 600ms later, when the queue ahead has drained.
		{"leaky bucket: a full queue", leaky(4), 4, 800 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr, rdb := redistest.Mini(t)
			// Epoch is 03:04:05: the fixed window of a minute ends in 55s.
			redistest.SetTime(mr, redistest.Epoch)
			l := opsNew(t, rdb, opsPatient)
			if r, err := l.Allow(context.Background(), tt.queued, tt.limit.For("worker")); err != nil || !r.Allowed {
				t.Fatalf("taking %d: %+v, %v", tt.queued, r, err)
			}
			before, err := l.Peek(context.Background(), tt.limit.For("worker"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			r, err := l.Wait(ctx, 1, tt.limit.For("worker"))
			if !errors.Is(err, ErrWaitExceedsDeadline) {
				t.Fatalf("Wait = %v, want an error matching ErrWaitExceedsDeadline", err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Wait = %v, which does not match context.DeadlineExceeded", err)
			}
			var ne interface{ Timeout() bool }
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("Wait = %v: errors.As finds no net.Error with Timeout() true, as it did for context.DeadlineExceeded", err)
			}
			if got, want := r, (Result{RetryAfter: tt.wantRetry}); got.Allowed || got.Granted != 0 || got.RetryAfter != want.RetryAfter {
				t.Errorf("Wait's Result = %+v, want a denial with RetryAfter %v", got, want.RetryAfter)
			}
			if after, err := l.Peek(context.Background(), tt.limit.For("worker")); err != nil || !opsSame(after, before) {
				t.Errorf("Peek after the refusal = %+v, %v; before it %+v: the Wait took something", after, err, before)
			}
		})
	}
	if timeout := fmt.Errorf("core: redis: %w", context.DeadlineExceeded); errors.Is(timeout, ErrWaitExceedsDeadline) {
		t.Error("a wrapped context.DeadlineExceeded matches ErrWaitExceedsDeadline: a Redis timeout would look like a refusal")
	}
}

// TestWaitRedisTimeoutIsNotTheSentinel: a Redis slower than the Limiter's
// timeout fails the Wait with context.DeadlineExceeded, as before, but not
// with ErrWaitExceedsDeadline, and with a zero Result.
func TestWaitRedisTimeoutIsNotTheSentinel(t *testing.T) {
	_, rdb := redistest.Mini(t)
	rdb.AddHook(stallScripts{})
	l := opsNew(t, rdb, WithTimeout(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := l.Wait(ctx, 1, PerSecond(1).For("worker"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a stalled Redis = %v, want context.DeadlineExceeded", err)
	}
	if errors.Is(err, ErrWaitExceedsDeadline) {
		t.Errorf("Wait on a stalled Redis = %v, which matches ErrWaitExceedsDeadline", err)
	}
	if !opsSame(r, Result{}) {
		t.Errorf("Wait on a stalled Redis returned %+v, want the zero Result", r)
	}
}

// stallScripts is a redis.Hook under which every decision (a script or
// function call) hangs until its context ends, as on a Redis too slow for
// the Limiter's timeout. Each call is told on arrived, if it is set.
type stallScripts struct{ arrived chan struct{} }

func (stallScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s stallScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "evalsha", "eval", "fcall":
			if s.arrived != nil {
				s.arrived <- struct{}{}
			}
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
