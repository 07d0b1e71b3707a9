package core

import (
	"context"
	"fmt"
	"time"
)

// Wait is WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until a request of cost n is admitted (and, for LeakyBucket,
// its Delay has passed), or ctx ends, for workers and outbound API clients
// that must not exceed a shared limit, and returns the admitting Result
// (the receipt Refund and Settle take). It sleeps for the RetryAfter Redis
// returns instead of polling, and gives up at once, with an error, when
// ctx's deadline would pass before the wait ends, or when the request can
// never pass (an invalid cost, or one above the fallback's share while
// Redis is unavailable).
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	for {
		lim := limit
		if dl, ok := ctx.Deadline(); ok && limit.Algorithm == LeakyBucket {
			left := time.Until(dl)
			// A queued request leaves once the queue ahead has drained, and
			// waiting does not make that sooner than the deadline: give up
			// now rather than take a place that cannot be used.
			if p, err := l.one(ctx, key, limit, n, modePeek, Result{}); err == nil && p.Allowed && p.Delay > left {
				return Result{}, fmt.Errorf("core: delay of %v for %q would exceed the context deadline: %w", p.Delay, key, context.DeadlineExceeded)
			}
			if lim.MaxDelay == 0 || left < lim.MaxDelay {
				lim.MaxDelay = max(left, time.Microsecond)
			}
		}
		r, err := l.AllowN(ctx, key, lim, n)
		if err != nil {
			return Result{}, err
		}
		wait := r.RetryAfter
		if r.Allowed {
			wait = r.Delay
		}
		if wait > 0 {
			if dl, ok := ctx.Deadline(); ok && !r.Allowed && time.Until(dl) < wait {
				return Result{}, fmt.Errorf("core: wait of %v for %q would exceed the context deadline: %w", wait, key, context.DeadlineExceeded)
			}
			if err := sleep(ctx, wait); err != nil {
				if r.Allowed {
					return r, err // taken: the caller may give it back
				}
				return Result{}, err
			}
		}
		if r.Allowed {
			return r, nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
