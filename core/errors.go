package core

import (
	"context"
	"errors"
	"fmt"
)

// The errors a Limiter returns, matched with errors.Is.
var (
	// ErrInvalidCost is returned for a cost that can never be taken. That
	// is a cost n <= 0, one above the Limit's capacity, a request a Limit
	// cannot take (AllowAtMost of a Concurrency, say), a Settle of used <
	// 0, and a Refund or Settle of a Result taken on another key,
	// Algorithm or layer.
	ErrInvalidCost = errors.New("core: invalid cost")
	// ErrInvalidLimit is wrapped by every error about a Limit that cannot
	// be enforced or parsed; the message names the field.
	ErrInvalidLimit = errors.New("core: invalid limit")
	// ErrEmptyKey is returned for an empty key: it almost always means the
	// key function found nothing, and sharing one limit among all such
	// callers would be a surprise.
	ErrEmptyKey = errors.New("core: empty key")
	// ErrUnavailable is wrapped by the error of every call that Redis
	// failed. That is no answer within the Limiter's timeout, a refused
	// connection, an error (a failover's READONLY, OOM under noeviction),
	// a reply the Limiter cannot read, or an open circuit breaker. The
	// error's text is the fault's own, and it still matches what it wraps.
	// errors.Is(err, ErrUnavailable) is the one test of a Redis fault, for
	// a fail policy and a count of Redis errors; what it does not match is
	// in docs/limits.md#redis-faults.
	ErrUnavailable = errors.New("core: redis unavailable")
	// ErrCircuitOpen is wrapped by the error of a call the open circuit
	// kept from Redis (see WithBreaker); it matches ErrUnavailable too, so
	// a fail policy needs no case for it. Metrics count the breaker's
	// decisions apart with it.
	ErrCircuitOpen = fmt.Errorf("%w (circuit open)", ErrUnavailable)
	// ErrClosed is returned by every call of a Limiter after Close. It is
	// the caller's mistake, not a Redis fault (it does not match
	// ErrUnavailable), so a fail policy does not apply: httplimit refuses
	// the request (503), and grpclimit's call fails with codes.Unavailable,
	// even when failing open.
	ErrClosed = errors.New("core: limiter closed")
	// ErrWaitExceedsDeadline is wrapped by the error of a Wait that gave
	// up at once, with the denying Result (whose RetryAfter says how long
	// it would have waited), because the request could not proceed before
	// its context's deadline. It wraps context.DeadlineExceeded, so code
	// written for the deadline keeps working, while errors.Is(err,
	// ErrWaitExceedsDeadline) tells this refusal from a Redis slower than
	// the Limiter's timeout (which matches context.DeadlineExceeded only).
	ErrWaitExceedsDeadline error = waitExceedsDeadline{}
)

// waitExceedsDeadline is a type of its own, not errors.New, so that it
// can unwrap to context.DeadlineExceeded: errors.As then finds the
// deadline's net.Error (Timeout() true) as it did before the sentinel.
type waitExceedsDeadline struct{}

func (waitExceedsDeadline) Error() string { return "core: wait would exceed the context deadline" }

func (waitExceedsDeadline) Unwrap() error { return context.DeadlineExceeded }
