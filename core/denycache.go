package core

import (
	"sync"
	"time"
)

// WithDenyCache remembers, on this instance, each key that Redis denied,
// until its RetryAfter has passed, and denies further requests for it
// locally, with the same headers and without a round trip. Under abusive
// traffic on a few keys this takes most of the load off Redis.
//
// It never denies what Redis would admit: the remembered wait is counted
// from before the request was sent, it applies only to the same Limit and to
// costs at least as large, and Reset, or a call for the key under another
// Limit, forgets it. A Reset or another Limit used by another instance is
// not seen, nor a denial under one Limit whose reply arrives after a call
// under another: the key stays denied here until its RetryAfter ends. At
// most maxKeys keys are remembered. Default: off.
func WithDenyCache(maxKeys int) Option {
	return func(l *Limiter) {
		if maxKeys > 0 {
			l.denied = &denyCache{max: maxKeys, m: make(map[string]denial)}
		}
	}
}

type denyCache struct {
	max int
	mu  sync.Mutex
	m   map[string]denial
}

type denial struct {
	limit Limit
	n     int
	until time.Time // deny locally before this: sent + RetryAfter
	ready time.Time // report waits until this: received + RetryAfter
	res   Result
}

// get returns a cached denial of key for a request of cost n under limit.
func (c *denyCache) get(key string, limit Limit, n int, now time.Time) (Result, bool) {
	c.mu.Lock()
	d, ok := c.m[key]
	if ok && d.limit != limit {
		// This call goes to Redis under another Limit, which may refill the
		// key's one state (see Policy.LimitFunc): the denial may no longer
		// hold when the old Limit comes back.
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || n < d.n || !now.Before(d.until) {
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
