package nethttplimit

// What a Transport does when the upstream answers 429 or 503 with a
// Retry-After: it charges the key in Redis, so that every instance
// pauses, or keeps the pause to itself when Redis cannot record it.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
)

// defaultPause is a 429's pause when its Retry-After is absent or tells
// no wait: the upstream refused, and sending at once would be refused
// again (a 429 without one left the quota at 99 of 100).
const defaultPause = time.Second

// pauseFor is how long resp asks the fleet to pause: its Retry-After, for
// a 429 or a 503, capped at maxPause; defaultPause for a 429 without one.
func (t *Transport) pauseFor(resp *http.Response) time.Duration {
	if t.maxPause < 0 || resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	d := retryAfter(resp.Header, t.now(), t.maxPause)
	if d == 0 && resp.StatusCode == http.StatusTooManyRequests {
		d = min(defaultPause, t.maxPause)
	}
	return d
}

// retryAfter reads a Retry-After header: delay-seconds, or an HTTP-date
// measured from now and from the Date header (the upstream's own clock),
// whichever leaves less: a clock behind the other shortens no pause, and
// an upstream whose Date is wrong (1970) cannot pause the fleet for longer
// than the date is ahead of ours. A value that is neither, or not ahead,
// is ignored (0); a delay beyond most, however large, is most.
func retryAfter(h http.Header, now time.Time, most time.Duration) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	secs, err := strconv.ParseUint(v, 10, 64)
	switch {
	case err == nil:
		if secs > uint64(most/time.Second) {
			return most
		}
		return min(time.Duration(secs)*time.Second, most)
	case errors.Is(err, strconv.ErrRange):
		return most // well formed, and too large for any clock
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := at.Sub(now)
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		d = min(d, at.Sub(date))
	}
	return min(max(d, 0), most)
}

// pause makes the next request on key, on every instance, wait at least d,
// or this Transport's alone when Redis cannot say so. It runs even if the
// caller has given up: the upstream asked the whole fleet.
func (t *Transport) pause(ctx context.Context, key string, d time.Duration) {
	ctx = context.WithoutCancel(ctx)
	t.pausing.Lock()
	defer t.pausing.Unlock()
	err := errors.New("a calendar window cannot be charged for less than its rest")
	if t.limit.Calendar == core.NoCalendar {
		err = t.charge(ctx, key, d)
	}
	if err != nil {
		kept := t.floors.set(key, t.now(), d)
		t.warn(fmt.Sprintf("the pause is this Transport's only (kept: %v)", kept), key, d, err)
	}
}

// maxCharges bounds the charges of one pause: a bucket needs one (two when
// rounding falls short), a window up to three.
const maxCharges = 4

// charge charges key until a Peek says its next request waits at least d.
func (t *Transport) charge(ctx context.Context, key string, d time.Duration) error {
	for i := 0; ; i++ {
		r, err := t.limiter.Peek(ctx, t.limit.For(key))
		if err != nil {
			return err
		}
		units := t.debt(r, d)
		if units == 0 {
			return nil
		}
		if i == maxCharges {
			return fmt.Errorf("the next request would still wait less than %v after %d charges", d, maxCharges)
		}
		if _, err := t.limiter.Settle(ctx, r, units); err != nil {
			return err
		}
	}
}

// debt is the charge that makes the next request on a key wait at least d,
// given r, a Peek of it; 0 when it already waits that long. A unit of debt
// makes the buckets wait Period/Rate longer; the windows refuse until the
// window in which the debt is paid off, Rate per Period. (In float64 ns:
// for extreme Limits, the products leave int64.)
func (t *Transport) debt(r core.Result, d time.Duration) int {
	per := float64(t.limit.Period) / float64(t.limit.Rate) // per unit
	var wait float64
	switch t.limit.Algorithm {
	case core.TokenBucket:
		wait = float64(r.RetryAfter)
		if r.Allowed {
			// The first token is there while the bucket lacks fewer than
			// Capacity-1 of being full: wait is <= 0, exactly.
			wait = float64(r.ResetAfter) - float64(t.limit.Capacity()-1)*per
		}
	case core.LeakyBucket:
		wait = float64(r.ResetAfter) // the queue ahead drains, then it leaves
	case core.SlidingWindow, core.SlidingWindowCounter, core.FixedWindow:
		switch {
		case r.Allowed:
			return max(r.Remaining, 1) // spend this window, then count whole ones
		case r.RetryAfter >= d:
			return 0
		}
		windows := math.Ceil(float64(d-r.RetryAfter) / float64(t.limit.Period))
		return units(windows * float64(t.limit.Rate))
	default:
		// Concurrency never gets here (NewTransport refuses it). An
		// algorithm core adds needs a case of its own: without one the
		// pause is lost, and TestTransportPauseByAlgorithm, which walks
		// every core.Algorithm, fails.
		return 0
	}
	if wait >= float64(d) {
		return 0
	}
	return units(math.Ceil((float64(d) - wait) / per))
}

// units is a charge of f units, within what Settle takes.
func units(f float64) int {
	const most = 1 << 40
	return int(min(max(f, 1), most))
}

// maxFloors bounds the keys a Transport pauses on its own.
const maxFloors = 1024

// floors are the pauses this Transport keeps on its own: key to the end of
// its pause, on the Transport's clock.
type floors struct {
	n     atomic.Int32 // len(until), read without the lock
	mu    sync.Mutex
	until map[string]time.Time
}

// set pauses key for d from now, unless it is paused longer already, and
// reports whether there was room to.
func (f *floors) set(key string, now time.Time, d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.until == nil {
		f.until = map[string]time.Time{}
	}
	if _, ok := f.until[key]; !ok && len(f.until) >= maxFloors {
		for k, end := range f.until {
			if !end.After(now) {
				delete(f.until, k)
			}
		}
		if len(f.until) >= maxFloors {
			return false
		}
	}
	if end := now.Add(d); end.After(f.until[key]) {
		f.until[key] = end
	}
	f.n.Store(int32(len(f.until)))
	return true
}

// left is how long key is still paused at now.
func (f *floors) left(key string, now time.Time) time.Duration {
	if f.n.Load() == 0 {
		return 0 // the common case, without the lock
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	end, ok := f.until[key]
	if !ok {
		return 0
	}
	if left := end.Sub(now); left > 0 {
		return left
	}
	delete(f.until, key)
	f.n.Store(int32(len(f.until)))
	return 0
}

// waitFloor waits out, or refuses for, a pause this Transport keeps on key.
func (t *Transport) waitFloor(ctx context.Context, key string) error {
	left := t.floors.left(key, t.now())
	if left <= 0 {
		return nil
	}
	r := core.Result{RetryAfter: left}
	if t.failFast {
		return &LimitError{Key: key, Result: r}
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < left {
		return &LimitError{Key: key, Result: r, err: fmt.Errorf("%w: %q is paused for %v", core.ErrWaitExceedsDeadline, key, left)}
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nethttplimit: Transport: %q: %w", key, ctx.Err())
	}
}
