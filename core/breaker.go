package core

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrUnavailable is wrapped by the error of a call that did not reach Redis
// because the circuit breaker is open: Redis failed repeatedly and the
// Limiter is waiting out a cool-down before it tries again.
var ErrUnavailable = errors.New("core: redis unavailable (circuit open)")

// Default circuit breaker settings: see WithBreaker.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = 500 * time.Millisecond
)

// WithBreaker sets the circuit breaker: after failures consecutive Redis
// failures (errors or timeouts) spread over at least twice the Limiter's
// timeout, calls fail at once with ErrUnavailable for cooldown; then one
// call probes Redis, and its success closes the circuit. The time span keeps
// a burst of concurrent timeouts during a brief hiccup (a Cluster failover
// takes tens of milliseconds) from opening the circuit for a whole cooldown.
// So a dead Redis costs requests nothing after the first few, and exact
// limiting resumes within cooldown of Redis coming back, with no restart.
// failures <= 0 disables the breaker. Default: DefaultBreakerFailures,
// DefaultBreakerCooldown.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return func(l *Limiter) { l.breaker.failures, l.breaker.cooldown = failures, cooldown }
}

// WithLogger logs Redis becoming unavailable, the circuit opening, and Redis
// answering again: once per change of state, never per request, and a
// failure at most once per 10 s when failures and successes alternate (a
// Cluster with one master down). Default: no logging.
func WithLogger(log *slog.Logger) Option {
	return func(l *Limiter) { l.breaker.log = log }
}

// failLogEvery is the least time between two "redis call failed" records.
// A Cluster with one dead master fails only the calls for that master's
// slots, so failure and success alternate per request; without a bound the
// log would follow them.
const failLogEvery = 10 * time.Second

// breaker tracks Redis health for one Limiter.
type breaker struct {
	failures int
	cooldown time.Duration
	span     time.Duration // the least time a streak must cover to open
	log      *slog.Logger
	// onFault runs after each Redis failure: a Cluster client reloads its
	// slot map there (see New).
	onFault func()

	// healthy is true while the last call succeeded and the circuit is
	// closed: the common case then costs one atomic load, not a lock.
	healthy atomic.Bool

	mu        sync.Mutex
	streak    int       // consecutive failures; > 0: the last call failed
	since     time.Time // when the streak began
	openUntil time.Time // zero when closed
	probing   bool      // a probe is in flight while open
	warned    bool      // a failure was logged and no recovery since
	warnedAt  time.Time // when a failure was last logged
}

// allow reports whether a call may go to Redis now. While the circuit is
// open it admits one probe per cool-down.
func (b *breaker) allow(now time.Time) bool {
	if b.failures <= 0 || b.healthy.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() {
		return true
	}
	if now.Before(b.openUntil) || b.probing {
		return false
	}
	b.probing = true
	return true
}

// record notes the outcome of a call that went to Redis. Failures of the
// caller's own making (its context ended) say nothing about Redis.
func (b *breaker) record(ctx context.Context, err error, now time.Time) {
	fault := err != nil && redisFault(ctx, err)
	if b.healthy.Load() && !fault {
		return
	}
	if fault && b.onFault != nil {
		// Deferred first, so it runs after the unlock: the hook is the
		// client's, and may take time.
		defer b.onFault()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.healthy.Store(b.streak == 0 && b.openUntil.IsZero()) }()
	b.probing = false
	if err != nil && !fault {
		// Neither a success nor a Redis failure: it says nothing either way.
		return
	}
	if err == nil {
		if b.warned && b.log != nil {
			b.log.Info("redlimit: redis answers again; exact limiting resumed")
		}
		b.streak, b.openUntil, b.warned = 0, time.Time{}, false
		return
	}
	if b.streak == 0 {
		b.since = now
	}
	b.streak++
	if !b.warned && b.log != nil && (b.warnedAt.IsZero() || now.Sub(b.warnedAt) >= failLogEvery) {
		b.log.Warn("redlimit: redis call failed", "err", err)
		b.warned, b.warnedAt = true, now
	}
	if b.failures > 0 && b.streak >= b.failures && now.Sub(b.since) >= b.span {
		if b.openUntil.IsZero() && b.log != nil {
			b.log.Warn("redlimit: circuit open: not calling redis during cool-down",
				"failures", b.streak, "cooldown", b.cooldown)
			b.warned = true // so that the recovery is logged too
		}
		b.openUntil = now.Add(b.cooldown)
	}
}

// redisFault reports whether err means Redis failed (rather than the call
// being wrong, or the caller giving up).
func redisFault(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, ErrInvalidCost), errors.Is(err, ErrInvalidLimit),
		errors.Is(err, ErrEmptyKey), errors.Is(err, ErrNoClient):
		return false
	case ctx.Err() != nil:
		// The caller's context ended, not our timeout.
		return false
	}
	return true
}
