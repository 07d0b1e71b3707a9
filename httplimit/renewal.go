package httplimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/observe"
)

// ErrPermitLost is the cause (context.Cause) of a handler's cancelled
// context when its request's InFlight permit is lost. The permit lapsed
// and the key is full, or, failing closed, Redis could not renew it before
// its lease ran out. The
// request no longer counts against Config.InFlight, so it should stop:
// else more than InFlight requests of its key would run at once.
var ErrPermitLost = errors.New("httplimit: InFlight permit lost")

// renewal keeps a request's InFlight permit while its handler runs longer
// than half the permit's lease. A renewal that fails is tried again soon,
// a fraction of the lease left, so one fault shorter than that costs
// nothing; a permit that lapsed meanwhile is taken again when the key has
// room (core.Limiter.Renew). Where it cannot be kept the handler's context
// is cancelled with ErrPermitLost before the permit lapses in Redis, so
// that the key's requests in flight never outnumber its permits.
type renewal struct {
	p     *Policy
	taken core.Result // the permit's alone
	lease time.Duration

	mu      sync.Mutex
	timer   *time.Timer // the next renewal
	lapse   *time.Timer // gives the permit up, margin before it lapses
	held    time.Time   // the permit surely holds until then
	lastErr error       // of the last renewal, if it failed
	lost    error       // why the permit was lost, once it was
	cancels []context.CancelCauseFunc
	stopped bool
	busy    sync.WaitGroup // a renewal in flight
}

// newRenewal starts renewing d's permit, taken no earlier than start.
func newRenewal(d *Decision, start time.Time) *renewal {
	p := d.policy
	r := &renewal{p: p, taken: d.permit(), lease: p.inflight.Period}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Redis counted the permit's lease from an instant after start.
	r.held = start.Add(r.lease)
	r.timer = time.AfterFunc(time.Until(r.held.Add(-r.lease/2)), r.renew)
	r.lapse = time.AfterFunc(time.Until(r.held.Add(-r.margin())), r.lapsed)
	return r
}

// margin is how long before its lease ends a permit that could not be
// renewed is given up: the time its handler has to stop before another
// request may take its place.
func (r *renewal) margin() time.Duration { return min(r.lease/8, 250*time.Millisecond) }

// renew renews the permit once, and schedules the next renewal: half a
// lease after this one when it succeeded, sooner when it failed.
func (r *renewal) renew() {
	r.mu.Lock()
	if r.stopped {
		// A renewal after the permit was given back would take it again.
		r.mu.Unlock()
		return
	}
	r.busy.Add(1)
	defer r.busy.Done()
	r.mu.Unlock()
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), r.lease/2)
	res, err := r.p.limiter.Renew(ctx, r.taken)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	now := time.Now()
	next := r.lease / 8 // after a loss, or past the lease: retake when there is room
	switch {
	case err == nil && res.Allowed:
		r.held, r.lastErr = sent.Add(r.lease), nil
		r.lapse.Reset(r.held.Sub(now) - r.margin())
		next = r.held.Sub(now) - r.lease/2
	case err == nil:
		r.lose(fmt.Errorf("%w: it lapsed and the key is full", ErrPermitLost))
	default:
		r.lastErr = err
		if left := r.held.Sub(now) - r.margin(); left > 0 {
			// A quarter of what is left, so that several tries fit in it
			// however short the fault.
			next = max(left/4, r.lease/64, time.Millisecond)
		}
	}
	r.timer.Reset(max(0, next))
}

// lapsed runs when the permit's lease, less the margin, has passed: unless
// a renewal kept it meanwhile, it is given up when the Policy fails
// closed. Failing open the request runs on without it, as one decided
// while Redis failed would, until a renewal takes it again or finds the
// key full.
func (r *renewal) lapsed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || r.lost != nil || time.Until(r.held) > r.margin() {
		return
	}
	why := r.lastErr
	if why == nil {
		why = errors.New("no renewal answered")
	}
	if r.p.failClosed {
		r.lose(fmt.Errorf("%w: not renewed within its %v lease: %w", ErrPermitLost, r.lease, why))
		return
	}
	r.p.losses.log(r.p, "redlimit: InFlight permit not renewed within its lease; the request runs on without it (failing open)", why)
}

// lose gives the permit up for cause: the handler's context is cancelled,
// unless the Policy is a dry run. r.mu is held.
func (r *renewal) lose(cause error) {
	if r.lost != nil {
		return
	}
	r.lost = cause
	if !r.p.dryRun {
		for _, cancel := range r.cancels {
			cancel(cause)
		}
	}
	r.p.losses.log(r.p, "redlimit: InFlight permit lost; the request's context is cancelled", cause)
}

// attach returns ctx, cancelled when the permit is lost.
func (r *renewal) attach(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancels = append(r.cancels, cancel)
	if r.lost != nil && !r.p.dryRun {
		cancel(r.lost)
	}
	return ctx
}

// stop ends the renewals once the handler has returned, and releases the
// contexts attach made. It waits for a renewal in flight, so that the
// permit is given back after it, never before.
func (r *renewal) stop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.stopped = true
	r.timer.Stop()
	r.lapse.Stop()
	cancels := r.cancels
	r.mu.Unlock()
	r.busy.Wait()
	for _, cancel := range cancels {
		cancel(nil)
	}
}

// lossLog logs lost permits, at most once a second per Policy, with how
// many were lost since the last record: an outage may take the permits of
// every request in flight at once.
type lossLog struct {
	mu  sync.Mutex
	at  time.Time
	n   int
	all int
}

func (l *lossLog) log(p *Policy, msg string, err error) {
	l.mu.Lock()
	l.n++
	l.all++
	now := time.Now()
	if !l.at.IsZero() && now.Sub(l.at) < time.Second {
		l.mu.Unlock()
		return
	}
	n, all := l.n, l.all
	l.at, l.n = now, 0
	l.mu.Unlock()
	if log := observe.Logger(p.limiter); log != nil {
		log.Warn(msg, "policy", p.name, "err", err, "since_last_record", n, "total", all)
	}
}
