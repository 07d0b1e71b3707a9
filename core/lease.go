package core

import (
	"context"
	"strings"
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
	// maxFetches bounds the lease calls one request makes: a denial that
	// is over by the time it arrives lets it fetch again, a few times.
	maxFetches = 3
)

// leases holds one Limiter's leases, by state key.
type leases struct {
	share float64
	life  time.Duration // leaseLife; tests lengthen it
	mu    sync.Mutex
	m     map[string]*lease
}

// lease is this instance's slice of one key's quota under one Limit. It
// leaves the table (dead) when a lease life passes without a request;
// a caller that still holds it then asks the table again.
type lease struct {
	ls   *leases
	pl   *plan
	tag  string
	keys []string // the state's key, owned by the lease

	mu       sync.Mutex
	dead     bool
	units    int64         // left to spend
	remote   int           // what Redis had left after granting them
	taken    Result        // the call that granted them: the receipt a give-back names
	until    time.Time     // the lease ends, at the latest when its window does
	whole    time.Time     // the quota is whole again, as Redis said
	denied   time.Time     // Redis had nothing left: deny locally before this
	ready    time.Time     // and report waits until this (see denyCache.get)
	deny     Result        // the denial Redis gave
	used     int64         // units spent since the last lease or expiry
	size     int64         // demand seen by the lease that expired last
	gen      uint64        // counts leases and expiries, so an old timer knows it is stale
	fetching chan struct{} // closed when the call in flight returns
	fetchErr error         // why the last call failed, for those who waited on it
}

func newLeases(share float64) *leases {
	return &leases{share: share, life: leaseLife, m: make(map[string]*lease)}
}

// capFor is the most one lease under pl may hold: a share of its capacity,
// 0 for an algorithm that cannot lease.
func (ls *leases) capFor(pl *plan) int64 {
	if pl.layers[0].row.leaseLeft == nil {
		return 0
	}
	return int64(float64(pl.capacity()) * ls.share)
}

// get returns the lease of keys[0] under pl's Limit; when there is none,
// it makes one if create and the table has room, else returns nil.
func (ls *leases) get(pl *plan, tag string, keys []string, create bool) *lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if e, ok := ls.m[keys[0]]; ok && e.pl.limits[0] == pl.limits[0] {
		return e
	}
	// A lease under another Limit is left to run out on its own: a key
	// keeps one state per algorithm whatever its Rate, and the new Limit
	// starts afresh.
	if !create || len(ls.m) >= maxLeases {
		return nil
	}
	// The strings may live in a buffer the caller reuses (fasthttp's):
	// the lease outlives the call.
	e := &lease{ls: ls, pl: pl, tag: strings.Clone(tag), keys: []string{strings.Clone(keys[0])}}
	ls.m[e.keys[0]] = e
	return e
}

// drop takes e out of the table. e.mu is held.
func (e *lease) drop() {
	e.dead = true
	e.ls.mu.Lock()
	if e.ls.m[e.keys[0]] == e {
		delete(e.ls.m, e.keys[0])
	}
	e.ls.mu.Unlock()
}

// forget drops the lease of stateKey: its units were counted in a state
// that a Reset deleted.
func (ls *leases) forget(stateKey string) {
	ls.mu.Lock()
	e := ls.m[stateKey]
	ls.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		e.units = 0
		e.drop()
		e.mu.Unlock()
	}
}

// refunded forgets the denial remembered for stateKey: a refund or a
// charge changed what the key holds. The lease's own units are unaffected.
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

// close gives back every lease's unused units, for Limiter.Close.
func (ls *leases) close(l *Limiter) {
	ls.mu.Lock()
	all := make([]*lease, 0, len(ls.m))
	for _, e := range ls.m {
		all = append(all, e)
	}
	ls.mu.Unlock()
	for _, e := range all {
		e.mu.Lock()
		units, taken := e.units, e.taken
		e.units = 0
		e.drop()
		e.mu.Unlock()
		if units > 0 {
			e.giveBack(l, units, taken)
		}
	}
}

// decide answers a request of n units from key's lease, taking a new lease
// from Redis when this one cannot answer. It reports false when it leaves
// the request to the caller, to ask Redis as without leases: the table is
// full, or n > 1 does not fit the lease (a lease is taken, and a denial
// remembered, for one unit, so a larger request gets its exact wait from
// Redis).
func (ls *leases) decide(ctx context.Context, l *Limiter, pl *plan, tag string, keys []string, n int) (Result, bool, error) {
	for {
		e := ls.get(pl, tag, keys, n == 1)
		if e == nil {
			return Result{}, false, nil
		}
		res, done, err := e.decide(ctx, l, n)
		if done {
			return res, true, err
		}
		if n > 1 {
			return Result{}, false, nil
		}
		// e was dropped meanwhile: take the table's.
	}
}

// decide is leases.decide on e; it reports false when e is dead or, for
// n > 1, cannot answer.
func (e *lease) decide(ctx context.Context, l *Limiter, n int) (Result, bool, error) {
	e.mu.Lock()
	for fetches := 0; ; {
		if e.dead {
			e.mu.Unlock()
			return Result{}, false, nil
		}
		now := time.Now()
		if now.Before(e.until) && e.units >= int64(n) {
			e.units -= int64(n)
			e.used += int64(n)
			res := Result{Allowed: true, Granted: n, Remaining: e.remote + int(e.units),
				ResetAfter: max(0, e.whole.Sub(now)), Leased: true, stamp: e.taken.stamp, pos: e.taken.pos}
			e.mu.Unlock()
			return res, true, nil
		}
		if n > 1 {
			e.mu.Unlock()
			return Result{}, false, nil
		}
		if now.Before(e.denied) {
			res := e.deny
			res.RetryAfter = max(time.Microsecond, e.ready.Sub(now))
			res.ResetAfter = max(res.RetryAfter, res.ResetAfter+res.RetryAfter-e.deny.RetryAfter)
			res.Leased = true
			e.mu.Unlock()
			return res, true, nil
		}
		wait := e.fetching
		if wait == nil {
			if fetches == maxFetches {
				e.mu.Unlock()
				return Result{}, false, nil // let Redis answer this one as without leases
			}
			fetches++
			wait = e.fetch(l)
		}
		e.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			// Only this caller gives up: the fetch goes on for the others.
			return Result{}, true, l.wrap(ctx, ctx.Err())
		}
		e.mu.Lock()
		if err := e.fetchErr; err != nil && e.fetching == nil {
			// The call this request waited on failed: so does this
			// request, at once (the fallback, if any, decides it).
			e.mu.Unlock()
			return Result{}, true, err
		}
	}
}

// fetch starts a call for a new lease, and returns what closes when it
// returns. The lease is over (its life, or its units): units it still
// holds go back to Redis, and the next asks for twice the demand seen.
// The call runs on its own goroutine under the Limiter's own timeout, so
// that the caller who started it may give up without failing the others
// who wait for it. e.mu is held.
func (e *lease) fetch(l *Limiter) chan struct{} {
	stale, taken := e.units, e.taken
	e.units = 0
	size := min(max(2*e.used, e.size, 1), e.ls.capFor(e.pl))
	done := make(chan struct{})
	e.fetching, e.fetchErr = done, nil
	go func() {
		if stale > 0 {
			e.giveBack(l, stale, taken)
		}
		sent := time.Now()
		var out [1]Result
		rq := &request{key: e.tag, pl: e.pl, n: int(size), mode: modeAtMost}
		err := l.ask(context.Background(), rq, e.tag, e.keys, sent, out[:])
		e.mu.Lock()
		defer e.mu.Unlock()
		close(done)
		e.fetching, e.fetchErr = nil, err
		if err != nil {
			if e.until.IsZero() && e.denied.IsZero() {
				e.drop() // no timer would ever take it out
			}
			return
		}
		e.start(l, out[0], sent, time.Now())
	}()
	return done
}

// start records the reply of a lease call sent at sent and received at
// received: a lease of res.Granted units, or a denial. e.mu is held.
func (e *lease) start(l *Limiter, res Result, sent, received time.Time) {
	e.gen++
	e.used, e.size = 0, 0
	var at time.Time
	if res.Allowed {
		// Units counted in Redis at some instant after sent: their window
		// ends no earlier than sent + what Redis said was left of it
		// (algorithm.leaseLeft: a fixed window's, less its ms rounding).
		e.units, e.remote, e.taken = int64(res.Granted), res.Remaining, res
		e.end(sent, res)
		e.whole = received.Add(res.ResetAfter)
		e.denied = time.Time{}
		at = e.until
	} else {
		// Deny locally while Redis surely would (until sent + RetryAfter),
		// and report the wait as ending no earlier than it might.
		e.units, e.until = 0, time.Time{}
		e.denied, e.ready, e.deny = sent.Add(res.RetryAfter), received.Add(res.RetryAfter), res
		at = e.denied
	}
	e.expireAt(l, max(0, at.Sub(received)))
}

// end sets until: a lease life after sent, or the end of its window.
func (e *lease) end(sent time.Time, res Result) {
	e.until = sent.Add(e.ls.life)
	if end := sent.Add(e.pl.layers[0].row.leaseLeft(res, e.pl.layers[0].p)); end.Before(e.until) {
		e.until = end
	}
}

// expireAt runs expire for the current lease after d. e.mu is held.
func (e *lease) expireAt(l *Limiter, d time.Duration) {
	gen := e.gen
	time.AfterFunc(d, func() { e.expire(l, gen) })
}

// expire ends the lease or denial gen, unless a later one replaced it: the
// units it did not spend go back to Redis. A key that saw requests keeps
// its entry, and what they asked sizes its next lease; one that saw none
// for a lease life leaves the table.
func (e *lease) expire(l *Limiter, gen uint64) {
	e.mu.Lock()
	if e.gen != gen || e.fetching != nil || e.dead {
		e.mu.Unlock()
		return
	}
	units, taken := e.units, e.taken
	e.units, e.until = 0, time.Time{}
	if e.used > 0 && !l.closed.Load() {
		e.size, e.used = 2*e.used, 0
		e.gen++
		e.expireAt(l, e.ls.life)
	} else {
		e.drop()
	}
	e.mu.Unlock()
	if units > 0 {
		e.giveBack(l, units, taken)
	}
}

// giveBack returns units of the lease taken granted to Redis. Redis counts
// them out only of the window they were counted in: units of a window
// that has ended by the time the refund arrives left with it.
func (e *lease) giveBack(l *Limiter, units int64, taken Result) {
	ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, 50*time.Millisecond))
	defer cancel()
	var out [1]Result
	rq := &request{key: e.tag, pl: e.pl, n: int(units), mode: modeRefund, taken: taken.stamp, pos: [maxRules]int64{taken.pos}}
	_ = l.ask(ctx, rq, e.tag, e.keys, time.Now(), out[:])
}
