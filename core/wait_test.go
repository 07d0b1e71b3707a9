package core

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
		if _, err := l.Wait(ctx, "k", limit); err != nil {
			t.Fatalf("Wait %d: %v", i+1, err)
		}
	}
	// A wrong sleep would last minutes (one token per 12 minutes).
	if got, want := time.Since(start), 5*time.Second; got >= want {
		t.Errorf("5 admitted Waits took %v, want < %v", got, want)
	}
	if r, err := l.Peek(ctx, "k", limit); err != nil || r.Remaining != 0 {
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
			if _, err := l.Wait(ctx, "k", limit); err != nil {
				t.Fatal(err)
			}
			// A wrong sleep would be a whole 200ms RetryAfter.
			if got := time.Since(start); got >= 190*time.Millisecond {
				t.Errorf("first Wait took %v, want it at once", got)
			}
			before := count.cmds.Load()
			start = time.Now()
			if _, err := l.Wait(ctx, "k", limit); err != nil {
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
			if _, err := l.Wait(context.Background(), "k", limit); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			canceled := make(chan time.Time, 1)
			time.AfterFunc(50*time.Millisecond, func() {
				canceled <- time.Now()
				cancel()
			})
			_, err := l.Wait(ctx, "k", limit)
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
					if _, err := l.Wait(context.Background(), "worker", tt.limit); err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
					defer cancel()
					start := time.Now()
					_, err := l.Wait(ctx, "worker", tt.limit)
					if got := time.Since(start); got >= 100*time.Millisecond {
						t.Errorf("Wait took %v, want it to give up at once", got)
					}
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("Wait = %v, want an error wrapping context.DeadlineExceeded", err)
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
					r, err := l.AllowN(context.Background(), "q", limit, 4)
					if err != nil || !r.Allowed {
						t.Fatalf("queueing 4: %+v, %v", r, err)
					}
					admitted := count.admitted.Load()
					ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
					defer cancel()
					start := time.Now()
					_, err = l.Wait(ctx, "q", limit)
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
			if _, err := l.WaitN(ctx, tt.key, tt.limit, tt.n); !errors.Is(err, tt.wantErr) {
				t.Errorf("WaitN = %v, want %v", err, tt.wantErr)
			}
		})
	}
}
