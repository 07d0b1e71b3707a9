package core

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

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
	log      func() *slog.Logger
	// onFault runs after each Redis failure: a Cluster client reloads its
	// slot map there (see New). onRecover runs when Redis answers after a
	// failure was logged.
	onFault, onRecover func()

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
	recovered := false
	defer func() {
		if recovered && b.onRecover != nil {
			b.onRecover()
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.healthy.Store(b.streak == 0 && b.openUntil.IsZero()) }()
	b.probing = false
	if err != nil && !fault {
		// Neither a success nor a Redis failure: it says nothing either way.
		return
	}
	if err == nil {
		if b.warned {
			recovered = true
			if log := b.log(); log != nil {
				log.Info("redlimit: redis answers again; exact limiting resumed")
			}
		}
		b.streak, b.openUntil, b.warned = 0, time.Time{}, false
		return
	}
	if b.streak == 0 {
		b.since = now
	}
	b.streak++
	log := b.log()
	if !b.warned && (b.warnedAt.IsZero() || now.Sub(b.warnedAt) >= failLogEvery) {
		if log != nil {
			log.Warn("redlimit: redis call failed", "err", err)
		}
		b.warned, b.warnedAt = true, now
	}
	if b.failures > 0 && b.streak >= b.failures && now.Sub(b.since) >= b.span {
		if b.openUntil.IsZero() {
			if log != nil {
				log.Warn("redlimit: circuit open: not calling redis during cool-down",
					"failures", b.streak, "cooldown", b.cooldown)
			}
			b.warned = true // so that the recovery is logged too
		}
		b.openUntil = now.Add(b.cooldown)
	}
}
