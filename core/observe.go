package core

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/internal/observe"
)

// Observation is one call of a Limiter's methods, as Observe reports it.
type Observation struct {
	// Verb names the method: "allow", "allow_at_most", "peek", "wait",
	// "refund", "settle" or "renew".
	Verb string
	// Name is the caller's: a nethttplimit Transport's Name; "" for a
	// call made directly.
	Name string
	// Rules are the Rules the method was called with.
	Rules []Rule
	// Result and Err are what it returned (for Refund, the receipt).
	Result Result
	Err    error
	// Latency is how long it took, without the sleeps of a Wait.
	Latency time.Duration
}

// The verbs of an Observation.
const (
	verbAllow  = "allow"
	verbAtMost = "allow_at_most"
	verbPeek   = "peek"
	verbWait   = "wait"
	verbRefund = "refund"
	verbSettle = "settle"
	verbRenew  = "renew"
)

// Observe calls f after each call of the Limiter's methods returns. That
// is Allow, AllowAtMost, Peek, Wait, Refund, Settle and Renew, with the
// call's context, until stop is called (a call then in flight may still be
// told); prommetrics and otelmetrics use it
// (WithLimiter). The calls of an httplimit Policy are left out: the Policy
// tells its own Observers. f runs on the caller's goroutine: it must be
// fast and safe for concurrent use.
func (l *Limiter) Observe(f func(ctx context.Context, o Observation)) (stop func()) {
	ob := &observer{f: f}
	l.observers.mu.Lock()
	defer l.observers.mu.Unlock()
	l.observers.list.Store(appendCopy(l.observers.list.Load(), ob))
	return func() {
		l.observers.mu.Lock()
		defer l.observers.mu.Unlock()
		var kept []*observer
		if old := l.observers.list.Load(); old != nil {
			for _, o := range *old {
				if o != ob {
					kept = append(kept, o)
				}
			}
		}
		if len(kept) == 0 {
			l.observers.list.Store(nil)
			return
		}
		l.observers.list.Store(&kept)
	}
}

// observer is one f of Observe, by pointer, so that stop finds its own.
type observer struct {
	f func(context.Context, Observation)
}

// observers are a Limiter's, copied on write: calls read them, Observe
// and stop write them.
type observers struct {
	mu   sync.Mutex
	list atomic.Pointer[[]*observer]
}

func appendCopy(old *[]*observer, o *observer) *[]*observer {
	var list []*observer
	if old != nil {
		list = append(list, *old...)
	}
	list = append(list, o)
	return &list
}

func init() {
	observe.Algorithms = len(algorithms)
	observe.Observed = func(limiter any) bool {
		l, ok := limiter.(*Limiter)
		return ok && l.observers.list.Load() != nil
	}
	observe.Logger = func(limiter any) *slog.Logger {
		if l, ok := limiter.(*Limiter); ok {
			return l.log()
		}
		return nil
	}
}

// observing is the start of a call, for observed: the zero Time when the
// Limiter has no observers, so that an unobserved call reads no clock.
func (l *Limiter) observing() time.Time {
	if l.observers.list.Load() == nil {
		return time.Time{}
	}
	return time.Now()
}

// later is start moved d later; the zero Time (unobserved) stays zero.
func later(start time.Time, d time.Duration) time.Time {
	if start.IsZero() {
		return start
	}
	return start.Add(d)
}

// observed tells the observers of a call that began at start (see
// observing) and returned *res and *err. Each method defers it.
func (l *Limiter) observed(ctx context.Context, verb string, rules []Rule, start time.Time, res *Result, err *error) {
	if start.IsZero() {
		return
	}
	list := l.observers.list.Load()
	name, byPolicy := observe.Of(ctx)
	if list == nil || byPolicy {
		return
	}
	// A copy: rules, a variadic argument, then stays on its caller's
	// stack when nobody observes.
	o := Observation{Verb: verb, Name: name, Rules: append([]Rule(nil), rules...), Result: *res, Err: *err, Latency: time.Since(start)}
	for _, ob := range *list {
		ob.f(ctx, o)
	}
}
