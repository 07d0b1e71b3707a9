package core

import (
	"container/list"
	"sync"
	"time"
)

// WithLocalFallback decides in process while Redis cannot answer (errors,
// timeouts, open circuit), instead of returning the error: each key gets a
// token bucket holding this instance's share of the Limit, 1/instances of
// its capacity and rate, so that instances together stay near the limit.
// At most maxKeys keys are tracked (least recently used are dropped), so
// memory stays bounded under any key cardinality. Results carry
// Fallback: true. Default: off (the error is returned, and the Policy's
// FailPolicy applies).
func WithLocalFallback(instances, maxKeys int) Option {
	return func(l *Limiter) {
		if instances > 0 && maxKeys > 0 {
			l.fallback = &localLimiter{instances: instances, max: maxKeys,
				lru: list.New(), m: make(map[string]*list.Element)}
		}
	}
}

type localLimiter struct {
	instances int
	max       int

	mu  sync.Mutex
	lru *list.List // of *localBucket, most recent first
	m   map[string]*list.Element
}

type localBucket struct {
	key    string
	limit  Limit
	tokens float64
	last   time.Time
}

func (f *localLimiter) allow(key string, limit Limit, n int, now time.Time) Result {
	capacity := max(1, float64(limit.Capacity())/float64(f.instances))
	perSecond := float64(limit.Rate) / float64(f.instances) / limit.Period.Seconds()

	f.mu.Lock()
	defer f.mu.Unlock()
	var b *localBucket
	if e, ok := f.m[key]; ok {
		f.lru.MoveToFront(e)
		b = e.Value.(*localBucket)
		if b.limit != limit {
			b.limit, b.tokens = limit, min(b.tokens, capacity)
		}
	} else {
		if f.lru.Len() >= f.max {
			old := f.lru.Remove(f.lru.Back()).(*localBucket)
			delete(f.m, old.key)
		}
		b = &localBucket{key: key, limit: limit, tokens: capacity, last: now}
		f.m[key] = f.lru.PushFront(b)
	}
	b.tokens = min(capacity, b.tokens+now.Sub(b.last).Seconds()*perSecond)
	b.last = now

	r := Result{Limit: limit.Capacity(), Fallback: true}
	cost := float64(n)
	if b.tokens >= cost {
		b.tokens -= cost
		r.Allowed = true
	} else {
		r.RetryAfter = secondsToDuration((cost - b.tokens) / perSecond)
	}
	r.Remaining = min(r.Limit, int(b.tokens))
	r.ResetAfter = secondsToDuration((capacity - b.tokens) / perSecond)
	return r
}

func (f *localLimiter) forget(key string) {
	f.mu.Lock()
	if e, ok := f.m[key]; ok {
		f.lru.Remove(e)
		delete(f.m, key)
	}
	f.mu.Unlock()
}

// secondsToDuration rounds up, so a wait is never reported short.
func secondsToDuration(s float64) time.Duration {
	d := time.Duration(s * float64(time.Second))
	if float64(d) < s*float64(time.Second) {
		d++
	}
	return d
}
