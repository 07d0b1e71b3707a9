package core

import (
	"context"
	"fmt"
	"time"
)

// Wait blocks until a request of cost n is admitted under every Rule (and,
// for LeakyBucket, its Delay has passed), or ctx ends, and returns the
// admitting Result (the receipt Refund and Settle take). It sleeps for the
// RetryAfter Redis returns instead of polling.
//
// It gives up at once, taking nothing, when ctx's deadline would pass
// before the request could proceed: the error then matches
// ErrWaitExceedsDeadline, and the Result is the denial. It also gives up
// at once when the request can never pass. Every other error comes with a
// zero Result, except when ctx ends during a LeakyBucket Delay (see
// docs/limits.md#waiting).
func (l *Limiter) Wait(ctx context.Context, n int, rules ...Rule) (res Result, err error) {
	start, slept := l.observing(), time.Duration(0) // its Latency is without its sleeps
	defer func() { l.observed(ctx, verbWait, rules, later(start, slept), &res, &err) }()
	queues := false
	for _, r := range rules {
		queues = queues || r.Limit.queues()
	}
	key := ""
	if len(rules) > 0 {
		key = rules[0].Key
	}
	for {
		ask := rules
		if queues {
			var denied Result
			if ask, denied, err = l.forDeadline(ctx, n, rules, key); err != nil {
				return denied, err
			}
		}
		r, err := l.decideRules(ctx, n, modeConsume, ask) // (Allow, but observed once, as the Wait)
		if err != nil {
			return Result{}, err
		}
		wait := r.RetryAfter
		if r.Allowed {
			wait = r.Delay
		}
		if wait > 0 {
			if dl, ok := ctx.Deadline(); ok && !r.Allowed {
				if left := time.Until(dl); left < wait {
					if queues {
						// Admitted later, the request would still leave
						// only once the queue ahead has drained, which is
						// what ResetAfter measures for a denial; the
						// deadline may also have lowered MaxDelay.
						r.RetryAfter = max(r.RetryAfter, r.ResetAfter)
					}
					return r, tooLate(key, r.RetryAfter, left)
				}
			}
			if err := sleep(ctx, wait); err != nil {
				if r.Allowed {
					return r, err // taken: the caller may give it back
				}
				return Result{}, err
			}
			slept += wait
		}
		if r.Allowed {
			return r, nil
		}
	}
}

// forDeadline is rules with each queue's MaxDelay cut to ctx's deadline.
// A queued request leaves once the queue ahead has drained, and waiting
// does not make that sooner than the deadline: it gives up now, with the
// denial, rather than take a place that cannot be used.
func (l *Limiter) forDeadline(ctx context.Context, n int, rules []Rule, key string) ([]Rule, Result, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return rules, Result{}, nil
	}
	left := time.Until(dl)
	if p, err := l.decideRules(ctx, n, modePeek, rules); err == nil && p.Allowed && p.Delay > left {
		denied := Result{Remaining: p.Remaining, RetryAfter: p.Delay, ResetAfter: p.ResetAfter, At: p.At}
		return nil, denied, tooLate(key, p.Delay, left)
	}
	ask := make([]Rule, len(rules))
	for i, r := range rules {
		if r.Limit.queues() && (r.Limit.MaxDelay == 0 || left < r.Limit.MaxDelay) {
			r.Limit.MaxDelay = max(left, time.Microsecond)
		}
		ask[i] = r
	}
	return ask, Result{}, nil
}

// tooLate is the error of a wait that would outlast the deadline.
func tooLate(key string, wait, left time.Duration) error {
	return fmt.Errorf("%w: %q would wait %v, the deadline is in %v", ErrWaitExceedsDeadline, key, wait, max(left, 0))
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
