package core

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Overrides keeps per-tenant or per-key Limits in Redis, so an operator can
// change a limit at run time and every instance obeys it within maxAge,
// without a deploy. Set always replaces the stored Limit, so the stored
// value and the enforced one never drift apart. A stored Limit is its text
// form ("500/s", "100/min burst=200"), so an operator can also SET one by
// hand.
//
// Each instance caches what it read for maxAge, so an override costs at
// most one extra round trip per name per maxAge, not per request (see
// docs/limits.md#overrides-cache). An Overrides is safe for concurrent use.
type Overrides struct {
	rdb     redis.UniversalClient
	prefix  string
	maxAge  time.Duration
	timeout time.Duration // of one read: overridesTimeout (tests set their own)

	mu      sync.Mutex
	max     int
	cache   map[string]*list.Element // of *cachedLimit
	lru     list.List                // most recently used first
	reading map[string]*overrideRead // names being read
}

// overrideRead is one read of a name, which its callers wait for.
type overrideRead struct {
	done  chan struct{}
	limit Limit
	found bool
	err   error
}

type cachedLimit struct {
	name    string
	limit   Limit
	found   bool
	fetched time.Time
}

const (
	overridesTimeout = 50 * time.Millisecond
	overridesMaxKeys = 10000
)

// NewOverrides returns Overrides stored under "<prefix>:override:{<name>}"
// ("" means "ratelimit", the Limiter's default), cached for maxAge (0 means
// 1s). It returns an error for a nil client or a negative maxAge.
func NewOverrides(rdb redis.UniversalClient, prefix string, maxAge time.Duration) (*Overrides, error) {
	switch {
	case isNil(rdb):
		return nil, errors.New("core: NewOverrides: nil redis client")
	case maxAge < 0:
		return nil, fmt.Errorf("core: NewOverrides: negative maxAge %v", maxAge)
	case prefix == "":
		prefix = "ratelimit"
	}
	if maxAge == 0 {
		maxAge = time.Second
	}
	return &Overrides{rdb: rdb, prefix: overridesPrefix(prefix), maxAge: maxAge, timeout: overridesTimeout,
		max: overridesMaxKeys, cache: make(map[string]*list.Element), reading: make(map[string]*overrideRead)}, nil
}

// overridesPrefix starts the key of every override under prefix.
func overridesPrefix(prefix string) string { return escapeBraces.Replace(prefix) + ":override" }

func (o *Overrides) key(name string) string {
	return o.prefix + ":{" + escapeTag(name) + "}"
}

// Set stores limit for name, replacing any earlier one. It lasts for ttl
// (a temporary raise, say; at least 1ms, Redis' resolution), or until
// Delete when ttl is 0: an override is configuration an operator wrote,
// the one kind of key redlimit lets live without a TTL. Instances obey it
// within maxAge; this one at once.
func (o *Overrides) Set(ctx context.Context, name string, limit Limit, ttl time.Duration) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	if ttl < 0 || ttl > 0 && ttl < time.Millisecond {
		// Redis keeps a TTL in ms: below one, go-redis sends 1ms, and the
		// override is gone before anyone reads it.
		return fmt.Errorf("core: overrides: ttl must be 0 (until Delete) or at least 1ms, got %v", ttl)
	}
	if err := o.rdb.Set(ctx, o.key(name), limit.String(), ttl).Err(); err != nil {
		return fmt.Errorf("core: overrides: %w", err)
	}
	o.remember(name, limit, true, time.Now())
	return nil
}

// Delete removes name's override; instances return to their default within
// maxAge.
func (o *Overrides) Delete(ctx context.Context, name string) error {
	if err := o.rdb.Del(ctx, o.key(name)).Err(); err != nil {
		return fmt.Errorf("core: overrides: %w", err)
	}
	o.remember(name, Limit{}, false, time.Now())
	return nil
}

// Get returns name's override, from the cache when it is younger than
// maxAge. found is false when there is none. When Redis fails, Get returns
// what it last knew (or not found) with the error, and does not ask again
// before maxAge.
func (o *Overrides) Get(ctx context.Context, name string) (limit Limit, found bool, err error) {
	o.mu.Lock()
	c, ok := o.cachedLocked(name)
	if ok && time.Since(c.fetched) < o.maxAge {
		o.mu.Unlock()
		return c.limit, c.found, nil
	}
	rd := o.reading[name]
	if rd == nil {
		rd = &overrideRead{done: make(chan struct{})}
		name = strings.Clone(name) // it may alias a buffer the framework reuses (fasthttp)
		o.reading[name] = rd
		go o.read(context.WithoutCancel(ctx), name, c, rd)
	}
	o.mu.Unlock()
	select {
	case <-rd.done:
		return rd.limit, rd.found, rd.err
	case <-ctx.Done():
		return c.limit, c.found, fmt.Errorf("core: overrides: %w", ctx.Err())
	}
}

// read asks Redis for name's override, caches what it learns and answers
// rd's callers; last is what was known before.
func (o *Overrides) read(ctx context.Context, name string, last cachedLimit, rd *overrideRead) {
	now := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rd.limit, rd.found = last.limit, last.found
	v, err := o.rdb.Get(ctx, o.key(name)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		rd.limit, rd.found = Limit{}, false
	case err != nil:
		// Keep enforcing what was last known (or the default), and while
		// Redis fails do not ask again before maxAge: an outage must not
		// cost a read a request.
		rd.err = fmt.Errorf("core: overrides: %w", err)
	default:
		var limit Limit
		if err := limit.UnmarshalText([]byte(v)); err != nil {
			rd.err = fmt.Errorf("core: overrides: %q: %w", name, err)
		} else {
			rd.limit, rd.found = limit, true
		}
	}
	o.mu.Lock()
	o.rememberLocked(name, rd.limit, rd.found, now)
	delete(o.reading, name)
	o.mu.Unlock()
	close(rd.done)
}

func (o *Overrides) cachedLocked(name string) (cachedLimit, bool) {
	e, ok := o.cache[name]
	if !ok {
		return cachedLimit{}, false
	}
	o.lru.MoveToFront(e)
	return *e.Value.(*cachedLimit), true
}

func (o *Overrides) remember(name string, l Limit, found bool, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rememberLocked(strings.Clone(name), l, found, now)
}

// rememberLocked caches what is known of name as of now, unless the cache
// learned something later (a Set during a read). When the cache is full it
// drops the name used least recently: a spray of new names then pushes out
// only names nobody asks for, never all of them at once.
func (o *Overrides) rememberLocked(name string, l Limit, found bool, now time.Time) {
	if e, ok := o.cache[name]; ok {
		c := e.Value.(*cachedLimit)
		if c.fetched.After(now) {
			return
		}
		*c = cachedLimit{name: c.name, limit: l, found: found, fetched: now}
		o.lru.MoveToFront(e)
		return
	}
	if o.lru.Len() >= o.max {
		old := o.lru.Remove(o.lru.Back()).(*cachedLimit)
		delete(o.cache, old.name)
	}
	o.cache[name] = o.lru.PushFront(&cachedLimit{name: name, limit: l, found: found, fetched: now})
}
