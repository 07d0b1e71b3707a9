package core

import (
	"sync"
	"time"
)

// denyCache remembers denials until their RetryAfter ends (see
// WithDenyCache).
type denyCache struct {
	max int
	mu  sync.Mutex
	m   map[string]denial
}

func newDenyCache(maxKeys int) *denyCache {
	return &denyCache{max: maxKeys, m: make(map[string]denial)}
}

type denial struct {
	limit Limit
	n     int
	until time.Time // deny locally before this: sent + RetryAfter
	ready time.Time // report waits until this: received + RetryAfter
	res   Result
}

// get returns a cached denial of key for a request that needs n units
// under limit.
func (c *denyCache) get(key string, limit Limit, n int, now time.Time) (Result, bool) {
	c.mu.Lock()
	d, ok := c.m[key]
	if ok && d.limit != limit {
		// This call goes to Redis under another Limit, which may refill the
		// key's one state (a key keeps one state whatever its Limit): the
		// denial may no longer hold when the old Limit comes back.
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	// Only the same cost: a larger one waits longer, and the wait
	// remembered would make its Retry-After early.
	if !ok || n != d.n || !now.Before(d.until) {
		return Result{}, false
	}
	// Redis measured its waits somewhere between sending and receiving:
	// deny only while that is surely not over (until), but report the wait
	// as ending no earlier than it might (ready), so Retry-After is never
	// early.
	r := d.res
	r.Cached = true
	elapsed := d.ready.Sub(now) - d.res.RetryAfter // <= 0
	r.RetryAfter = d.ready.Sub(now)
	r.ResetAfter = max(r.RetryAfter, d.res.ResetAfter+elapsed)
	return r, true
}

// put remembers a denial that Redis decided for a request sent at sent
// whose reply arrived at received.
func (c *denyCache) put(key string, limit Limit, n int, sent, received time.Time, r Result) {
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
	c.m[key] = denial{limit: limit, n: n, until: sent.Add(r.RetryAfter), ready: received.Add(r.RetryAfter), res: r}
}

func (c *denyCache) forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}
