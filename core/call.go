package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// eval runs a script. The caller has bounded ctx (see bound).
func (l *Limiter) eval(ctx context.Context, s *redis.Script, keys []string, args []any) (any, error) {
	if !l.detach {
		v, err := s.Run(ctx, l.rdb, keys, args...).Result()
		return v, l.wrap(ctx, err)
	}
	// The call may outlive the caller, whose KEYS buffer is recycled.
	keys = append([]string(nil), keys...)
	return l.detached(ctx, func(ctx context.Context) (any, error) {
		return s.Run(ctx, l.rdb, keys, args...).Result()
	})
}

// do runs a rare command (DEL, a layered script) within the timeout.
func (l *Limiter) do(ctx context.Context, f func(context.Context) (any, error)) (any, error) {
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if !l.detach {
		v, err := f(ctx)
		return v, l.wrap(ctx, err)
	}
	return l.detached(ctx, f)
}

func nop() {}

// bound applies the Limiter's timeout, unless the caller's own deadline
// comes first (then a timer would be wasted).
func (l *Limiter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, nop
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= l.timeout {
		return ctx, nop
	}
	return context.WithTimeout(ctx, l.timeout)
}

type reply struct {
	v   any
	err error
}

// detached waits for f on its own goroutine, for clients that would not
// stop at ctx's deadline themselves.
func (l *Limiter) detached(ctx context.Context, f func(context.Context) (any, error)) (any, error) {
	ch := make(chan reply, 1)
	go func() {
		v, err := f(ctx)
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, l.wrap(ctx, r.err)
	case <-ctx.Done():
		return nil, l.wrap(ctx, ctx.Err())
	}
}

func (l *Limiter) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		// go-redis reports a deadline on the socket as an i/o timeout.
		return fmt.Errorf("core: redis: %w (%v)", ctxErr, err)
	}
	return fmt.Errorf("core: redis: %w", err)
}

// redisFault reports whether err means Redis failed (rather than the call
// being wrong, or the caller giving up).
func redisFault(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, ErrInvalidCost), errors.Is(err, ErrInvalidLimit), errors.Is(err, ErrEmptyKey):
		return false
	case ctx.Err() != nil:
		// The caller's context ended, not our timeout.
		return false
	}
	return true
}
