package core

import (
	"context"
	"sync"
	"time"
)

// Leases (see WithLeases) let one instance take a slice of a hot key's
// quota from Redis in one call and spend it locally. Units are counted in
// Redis before they are spent, so the instances together never admit more
// than the limit; the price is units held unused in a lease, which no other
// instance can have until the lease ends.
//
// A lease is valid only inside the window its units were counted in
// (FixedWindow, SlidingWindowCounter): spent later in that window, a unit
// still counts where it was admitted, so the window's bound holds exactly.
// A token bucket or a log could not give that: a token taken at one
// instant and spent at a later one can join a burst the bucket would have
// refused.

const (
	// leaseLife is the longest a lease lasts within its window. A lease
	// that ends early hands its unused units back, so an instance whose
	// traffic stops holds nothing for long.
	leaseLife = 250 * time.Millisecond
	// maxLeases bounds the keys leased at once per Limiter; further keys
	// are decided in Redis, one call each, as without leases.
	maxLeases = 4096
)

// leases holds one Limiter's leases, by state key.
type leases struct {
	share float64
	mu    sync.Mutex
	m     map[string]*lease
}

// lease is this instance's slice of one key's quota under one Limit.
type lease struct {
	ls            *leases
	stateKey, key string
	limit         Limit

	mu       sync.Mutex
	units    int64         // left to spend
	remote   int           // what Redis had left after granting them
	until    time.Time     // the lease ends, at the latest when its window does
	end      time.Time     // its window ends
	denied   time.Time     // Redis had nothing left: deny locally before this
	ready    time.Time     // and report waits until this (see denyCache.get)
	deny     Result        // the denial Redis gave
	used     int64         // units spent from the current lease
	gen      uint64        // counts replies, so an old timer knows it is stale
	fetching chan struct{} // closed when the call in flight returns
}

func newLeases(share float64) *leases {
	return &leases{share: share, m: make(map[string]*lease)}
}

// capFor is the most one lease under pr may hold: a share of its capacity,
// 0 for an algorithm that cannot lease.
func (ls *leases) capFor(pr *prepared) int64 {
	if algorithms[pr.limit.Algorithm].leaseLeft == nil {
		return 0
	}
	return int64(float64(pr.p.capacity) * ls.share)
}

// get returns the lease of stateKey under limit, making it if there is
// room; nil when the table is full.
func (ls *leases) get(stateKey, key string, limit Limit) *lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if e, ok := ls.m[stateKey]; ok && e.limit == limit {
		return e
	}
	// A lease under another Limit is left to run out on its own: a key
	// keeps one state whatever its Limit, and the new Limit starts afresh.
	if len(ls.m) >= maxLeases {
		return nil
	}
	e := &lease{ls: ls, stateKey: stateKey, key: key, limit: limit}
	ls.m[stateKey] = e
	return e
}

// forget drops the lease of stateKey: its units were counted in a state
// that a Reset deleted.
func (ls *leases) forget(stateKey string) {
	ls.mu.Lock()
	e := ls.m[stateKey]
	delete(ls.m, stateKey)
	ls.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		e.units, e.denied, e.until = 0, time.Time{}, time.Time{}
		e.gen++
		e.mu.Unlock()
	}
}

// refunded forgets the denial remembered for stateKey: a Refund gave units
// back. The lease's own units are unaffected.
func (ls *leases) refunded(stateKey string) {
	ls.mu.Lock()
	e := ls.m[stateKey]
	ls.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		e.denied = time.Time{}
		e.mu.Unlock()
	}
}

// decide answers a request of n units from key's lease, taking a new lease
// from Redis when this one cannot answer. It reports false when it leaves
// the request to the caller, to ask Redis as without leases: the table is
// full, or n > 1 does not fit the lease (a lease is taken, and a denial
// remembered, for one unit, so a larger request gets its exact wait from
// Redis).
func (ls *leases) decide(ctx context.Context, l *Limiter, pr *prepared, tag string, keys []string, key string, n int) (Result, bool, error) {
	e := ls.get(keys[0], key, pr.limit)
	if e == nil {
		return Result{}, false, nil
	}
	for {
		e.mu.Lock()
		now := time.Now()
		if now.Before(e.until) && e.units >= int64(n) {
			e.units -= int64(n)
			e.used += int64(n)
			res := Result{Allowed: true, Granted: n, Remaining: e.remote + int(e.units), ResetAfter: e.end.Sub(now), Leased: true}
			e.mu.Unlock()
			return res, true, nil
		}
		if n > 1 {
			e.mu.Unlock()
			return Result{}, false, nil
		}
		if now.Before(e.denied) {
			res := e.deny
			res.RetryAfter = e.ready.Sub(now)
			res.ResetAfter = max(res.RetryAfter, res.ResetAfter-now.Sub(e.denied.Add(-e.deny.RetryAfter)))
			res.Leased = true
			e.mu.Unlock()
			return res, true, nil
		}
		if wait := e.fetching; wait != nil {
			e.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return Result{}, true, l.wrap(ctx, ctx.Err())
			}
		}
		// Ask for twice what the lease that ran out served, at least one
		// unit, at most the cap.
		size := min(max(2*e.used, 1), ls.capFor(pr))
		e.fetching = make(chan struct{})
		e.mu.Unlock()

		sent := time.Now()
		res, err := l.ask(ctx, pr, tag, keys, int(size), modeAtMost, sent)

		e.mu.Lock()
		close(e.fetching)
		e.fetching = nil
		if err == nil {
			e.start(l, pr, res, sent, time.Now())
		}
		e.mu.Unlock()
		if err != nil {
			return Result{}, true, err
		}
	}
}

// start records the reply of a lease call sent at sent and received at
// received: a lease of res.Granted units, or a denial. e.mu is held.
func (e *lease) start(l *Limiter, pr *prepared, res Result, sent, received time.Time) {
	e.gen++
	e.used = 0
	at := received
	if res.Allowed {
		// Units counted in Redis at some instant after sent: their window
		// ends no earlier than sent + what Redis said was left of it.
		end := sent.Add(algorithms[pr.limit.Algorithm].leaseLeft(res, pr.p))
		if e.units > 0 && received.Before(e.until) && e.end.Before(end) {
			end = e.end // units still held end with their own window
		} else {
			e.units = 0
		}
		e.units += int64(res.Granted)
		e.remote, e.end = res.Remaining, end
		e.until = sent.Add(leaseLife)
		if end.Before(e.until) {
			e.until = end
		}
		e.denied = time.Time{}
		at = e.until
	} else {
		// Deny locally while Redis surely would (until sent + RetryAfter),
		// and report the wait as ending no earlier than it might.
		e.units, e.until = 0, time.Time{}
		e.denied, e.ready, e.deny = sent.Add(res.RetryAfter), received.Add(res.RetryAfter), res
		at = e.denied
	}
	gen := e.gen
	time.AfterFunc(at.Sub(received), func() { e.expire(l, gen) })
}

// expire ends the lease or denial of reply gen, unless a later reply
// replaced it: the units it did not spend go back to Redis, unless its
// window is about to end (they end with it, and a late refund could count
// in the next window), and the key leaves the table until its next request.
func (e *lease) expire(l *Limiter, gen uint64) {
	e.mu.Lock()
	if e.gen != gen || e.fetching != nil {
		e.mu.Unlock()
		return
	}
	units := e.units
	e.units = 0
	e.mu.Unlock()
	e.ls.mu.Lock()
	if e.ls.m[e.stateKey] == e {
		delete(e.ls.m, e.stateKey)
	}
	e.ls.mu.Unlock()
	if units > 0 && time.Until(e.end) > 2*max(l.timeout, 10*time.Millisecond) {
		_, _ = l.decide(context.Background(), e.key, e.limit, int(units), modeRefund)
	}
}
