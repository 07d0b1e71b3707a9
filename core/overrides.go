package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Overrides keeps per-key or per-tenant Limits in Redis, so an operator can
// change a limit at run time and every instance obeys it within MaxAge,
// without a deploy. Unlike Redisson's trySetRate (HSETNX), Set always
// replaces the stored Limit, so the stored value and the enforced one never
// drift apart.
//
// Each instance caches what it read (found, not found, or unreadable) for
// MaxAge, so an override costs at most one extra round trip per name per
// MaxAge, not per request, even while Redis is down; each read is bounded by
// DefaultTimeout when the client honours context deadlines
// (ContextTimeoutEnabled). An Overrides is safe for concurrent use.
type Overrides struct {
	rdb     redis.UniversalClient
	prefix  string
	maxAge  time.Duration
	maxKeys int

	mu    sync.Mutex
	cache map[string]cachedLimit
}

type cachedLimit struct {
	limit   Limit
	found   bool
	fetched time.Time
}

// DefaultOverridesMaxAge bounds how long an instance may enforce a Limit
// after an override changed it.
const DefaultOverridesMaxAge = time.Second

// NewOverrides returns Overrides stored under "<prefix>:override:{<name>}"
// (prefix as WithPrefix; "" means DefaultPrefix), cached for maxAge
// (<= 0 means DefaultOverridesMaxAge), remembering at most 10000 names.
func NewOverrides(rdb redis.UniversalClient, prefix string, maxAge time.Duration) *Overrides {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if maxAge <= 0 {
		maxAge = DefaultOverridesMaxAge
	}
	prefix = escapeBraces.Replace(prefix)
	return &Overrides{rdb: rdb, prefix: prefix + ":override", maxAge: maxAge, maxKeys: 10000,
		cache: make(map[string]cachedLimit)}
}

func (o *Overrides) key(name string) string {
	return o.prefix + ":{" + escapeTag(name) + "}"
}

// Set stores limit for name, replacing any earlier one, for ttl (a
// temporary raise, say), or until Delete when ttl is 0: an override is
// configuration an operator wrote, the one kind of key redlimit lets live
// without a TTL. Instances obey it within MaxAge; this one at once.
func (o *Overrides) Set(ctx context.Context, name string, limit Limit, ttl time.Duration) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	if ttl < 0 {
		return fmt.Errorf("core: overrides: ttl must be >= 0, got %v", ttl)
	}
	if err := o.rdb.Set(ctx, o.key(name), encodeLimit(limit), ttl).Err(); err != nil {
		return fmt.Errorf("core: overrides: %w", err)
	}
	o.remember(name, limit, true, time.Now())
	return nil
}

// Delete removes name's override; instances return to their default within
// MaxAge.
func (o *Overrides) Delete(ctx context.Context, name string) error {
	if err := o.rdb.Del(ctx, o.key(name)).Err(); err != nil {
		return fmt.Errorf("core: overrides: %w", err)
	}
	o.remember(name, Limit{}, false, time.Now())
	return nil
}

// Get returns name's override, from the cache when it is younger than
// MaxAge. found is false when there is none.
func (o *Overrides) Get(ctx context.Context, name string) (limit Limit, found bool, err error) {
	now := time.Now()
	o.mu.Lock()
	c, ok := o.cache[name]
	o.mu.Unlock()
	if ok && now.Sub(c.fetched) < o.maxAge {
		return c.limit, c.found, nil
	}
	rctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	v, err := o.rdb.Get(rctx, o.key(name)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		o.remember(name, Limit{}, false, now)
		return Limit{}, false, nil
	case err != nil:
		// Keep enforcing what was last known (or the default), and while
		// Redis fails do not ask again before MaxAge: an outage must not
		// cost a read a request. A caller that gave up proves nothing.
		if redisFault(ctx, err) {
			o.remember(name, c.limit, c.found, now)
		}
		return c.limit, c.found, fmt.Errorf("core: overrides: %w", err)
	}
	limit, err = decodeLimit(v)
	if err != nil {
		o.remember(name, c.limit, c.found, now)
		return c.limit, c.found, fmt.Errorf("core: overrides: %q: %w", name, err)
	}
	o.remember(name, limit, true, now)
	return limit, true, nil
}

// LimitFunc adapts o to Policy.LimitFunc: the override stored under the
// name key returns for the request, if any, else the Policy's Limit.
func (o *Overrides) LimitFunc(key KeyFunc) func(Request) (Limit, bool) {
	return func(r Request) (Limit, bool) {
		name, err := key(r)
		if err != nil || name == "" {
			return Limit{}, false
		}
		l, found, _ := o.Get(r.Context(), name)
		return l, found
	}
}

func (o *Overrides) remember(name string, l Limit, found bool, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.cache) >= o.maxKeys {
		clear(o.cache)
	}
	// The name may alias a buffer the framework reuses (fasthttp).
	o.cache[strings.Clone(name)] = cachedLimit{limit: l, found: found, fetched: now}
}

// encodeLimit writes "algorithm rate period burst maxdelay" (e.g.
// "token_bucket 100 1s 200 0s"), a format an operator can also SET by hand.
func encodeLimit(l Limit) string {
	return l.Algorithm.String() + " " + strconv.Itoa(l.Rate) + " " + l.Period.String() + " " +
		strconv.Itoa(l.Burst) + " " + l.MaxDelay.String()
}

func decodeLimit(s string) (Limit, error) {
	f := strings.Fields(s)
	if len(f) < 3 || len(f) > 5 {
		return Limit{}, fmt.Errorf("%w: want \"algorithm rate period [burst [maxdelay]]\", got %q", ErrInvalidLimit, s)
	}
	var l Limit
	var err error
	if l.Algorithm, err = ParseAlgorithm(f[0]); err != nil {
		return Limit{}, err
	}
	if l.Rate, err = strconv.Atoi(f[1]); err != nil {
		return Limit{}, fmt.Errorf("%w: rate %q: %v", ErrInvalidLimit, f[1], err)
	}
	if l.Period, err = time.ParseDuration(f[2]); err != nil {
		return Limit{}, fmt.Errorf("%w: period %q: %v", ErrInvalidLimit, f[2], err)
	}
	if len(f) > 3 {
		if l.Burst, err = strconv.Atoi(f[3]); err != nil {
			return Limit{}, fmt.Errorf("%w: burst %q: %v", ErrInvalidLimit, f[3], err)
		}
	}
	if len(f) > 4 {
		if l.MaxDelay, err = time.ParseDuration(f[4]); err != nil {
			return Limit{}, fmt.Errorf("%w: max delay %q: %v", ErrInvalidLimit, f[4], err)
		}
	}
	return l, l.Validate()
}
