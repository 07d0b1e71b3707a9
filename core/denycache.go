package core

import (
	"slices"
	"sync"
	"time"
)

// denyCache remembers denials until their RetryAfter ends (see
// WithDenyCache).
type denyCache struct {
	max int
	mu  sync.Mutex
	m   map[string]*denial
}

func newDenyCache(maxKeys int) *denyCache {
	return &denyCache{max: maxKeys, m: make(map[string]*denial)}
}

type denial struct {
	limits   []Limit
	n        int
	until    time.Time // deny locally before this: sent + the longest RetryAfter
	received time.Time // report waits from this, so that they are never early
	res      []Result
}

// get answers, into out, a request for key that needs n units under pl
// with a denial cached for the same Limits: for the same n, or for a
// smaller one (a larger cost cannot fit where a smaller did not; under a
// single Limit it waits at least as long, see wait). It reports whether it
// answered.
func (c *denyCache) get(key string, pl *plan, n int, now time.Time, out []Result) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[key]
	if ok && !slices.Equal(d.limits, pl.limits) {
		// This call goes to Redis under other Limits, which may refill the
		// key's state (a key keeps one state per algorithm whatever its Rate): the
		// denial may no longer hold when the old Limits come back.
		delete(c.m, key)
		return false
	}
	if !ok || !now.Before(d.until) || n < d.n || n > d.n && len(d.res) > 1 {
		return false
	}
	// Redis measured its waits somewhere between sending and receiving:
	// deny only while that is surely not over (until), but report each
	// wait as ending no earlier than it might (from received), so
	// Retry-After is never early.
	gone := now.Sub(d.received)
	for i, r := range d.res {
		if !r.Allowed {
			r.RetryAfter = max(time.Microsecond, r.RetryAfter-gone)
			if n > d.n {
				r.RetryAfter = wait(pl.layers[0], r, n-d.n)
			}
			r.Cached = true
		}
		r.ResetAfter = max(r.RetryAfter, r.ResetAfter-gone)
		r.At = r.At.Add(gone) // Redis' clock now, if it dated the denial
		out[i] = r
	}
	return true
}

// wait is the wait for extra more units than a denial r was for: a token
// bucket's grows by the time extra tokens take to refill (rounded up to
// whole ticks); any other limit's is no longer than until the quota is
// whole.
func wait(ly layer, r Result, extra int) time.Duration {
	if ly.limit.Algorithm == TokenBucket {
		ticks := ceilDiv(int64(extra)*ly.p.period, ly.p.rate)
		return r.RetryAfter + time.Duration(ticks*ly.p.tick)*time.Microsecond
	}
	return max(r.RetryAfter, r.ResetAfter)
}

// put remembers a denial that Redis decided for a request of n units sent
// at sent whose reply arrived at received.
func (c *denyCache) put(key string, pl *plan, n int, sent, received time.Time, res []Result) {
	// The request passes only once every layer that denies it admits.
	var retry time.Duration
	for _, r := range res {
		if !r.Allowed {
			retry = max(retry, r.RetryAfter)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		// Evict one entry, preferring an expired one among the first few
		// that map order (random) offers: bounded work under a key spray.
		seen := 0
		var victim string
		for k, d := range c.m {
			victim = k
			if !received.Before(d.until) || seen == 8 {
				break
			}
			seen++
		}
		delete(c.m, victim)
	}
	c.m[key] = &denial{limits: pl.limits, n: n, until: sent.Add(retry), received: received, res: slices.Clone(res)}
}

func (c *denyCache) forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}
