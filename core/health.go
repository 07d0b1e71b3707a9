package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Health is what a Limiter learned about its Redis on its last check (see
// Ping).
type Health struct {
	// Checked is when Redis was last asked; zero before the first check.
	Checked time.Time
	// Err is why the last check failed: Redis did not answer, or did not
	// let INFO be read. The fields below then keep what an earlier check
	// found.
	Err error
	// MayEvict reports that a Redis node has a maxmemory and a
	// maxmemory-policy other than noeviction, so it may evict the Limiter's
	// keys under memory pressure. Every key the Limiter writes has a TTL,
	// so the volatile-* policies evict them first. An evicted key is a
	// fresh quota: run the Limiter on a Redis of its own, or with
	// maxmemory-policy noeviction (on every Cluster node).
	MayEvict bool
	// MaxMemory and MaxMemoryPolicy are the settings of the node that may
	// evict (of the first node when none may): bytes, and the policy's name.
	MaxMemory       int64
	MaxMemoryPolicy string
	// EvictedKeys is evicted_keys summed over the nodes: how many keys Redis
	// has evicted since it started, the Limiter's and any others.
	EvictedKeys int64
}

// Ping asks Redis now whether it answers and whether it may evict the
// Limiter's keys (INFO memory, on every master of a Cluster), records the
// answer for Health, and logs a warning when the risk appears. Call it at
// start-up, or from a health check. It takes at most a second, or the
// Limiter's timeout if that is longer, unless ctx ends first.
//
// The error says Redis did not answer: it wraps ErrUnavailable, unless
// ctx ended first. A Redis that answers but refuses INFO is no error:
// Health.Err then says why the risk is unknown. See
// docs/limits.md#eviction-checks.
func (l *Limiter) Ping(ctx context.Context) (Health, error) {
	pctx, cancel := context.WithTimeout(ctx, max(l.timeout, time.Second))
	defer cancel()
	h := Health{Checked: time.Now()}
	var mu sync.Mutex
	err := l.eachNode(pctx, func(ctx context.Context, c redis.Cmdable) error {
		mem, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		stats, err := c.Info(ctx, "stats").Result()
		if err != nil {
			return err
		}
		maxMemory, _ := strconv.ParseInt(infoField(mem, "maxmemory"), 10, 64)
		policy := infoField(mem, "maxmemory_policy")
		evicted, _ := strconv.ParseInt(infoField(stats, "evicted_keys"), 10, 64)
		mayEvict := maxMemory > 0 && policy != "noeviction"
		mu.Lock()
		defer mu.Unlock()
		if h.MaxMemoryPolicy == "" || mayEvict && !h.MayEvict {
			h.MaxMemory, h.MaxMemoryPolicy = maxMemory, policy
		}
		h.MayEvict = h.MayEvict || mayEvict
		h.EvictedKeys += evicted
		return nil
	})
	var refused redis.Error
	answered := errors.As(err, &refused)
	if err != nil {
		if !answered {
			err = classified(ctx, err)
		}
		h.Err = fmt.Errorf("core: ping: %w", err)
	}
	h = l.health.update(h)
	if answered {
		return h, nil
	}
	return h, h.Err
}

// Health returns what the last check of Redis found, without asking it.
// Checks run at New, when the client makes a connection (a restart or a
// failover), when Redis answers again after failing, at most once a minute
// while decisions are made, and on Ping.
func (l *Limiter) Health() Health {
	l.health.mu.Lock()
	defer l.health.mu.Unlock()
	return l.health.last
}

// eachNode runs f on every master (a Cluster) or shard (a Ring), or on the
// client itself.
func (l *Limiter) eachNode(ctx context.Context, f func(context.Context, redis.Cmdable) error) error {
	each := func(ctx context.Context, c *redis.Client) error { return f(ctx, c) }
	switch c := l.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, each)
	case *redis.Ring:
		return c.ForEachShard(ctx, each)
	}
	return f(ctx, l.rdb)
}

// infoField returns a field of an INFO reply ("name:value" lines).
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// healthState runs the checks of one Limiter and logs what changes.
type healthState struct {
	log     func() *slog.Logger
	running atomic.Bool
	next    atomic.Int64 // unix ns before which tick does not check

	mu      sync.Mutex
	last    Health
	failed  bool      // the last check failed, and it was logged
	warned  time.Time // when evictions were last logged
	started time.Time // when the last check started
}

// healthEvery is how often decisions let the Limiter look at Redis again:
// enough to see evictions as they happen, without a call per decision.
const healthEvery = time.Minute

// start schedules the periodic check and runs the first now.
func (h *healthState) start(l *Limiter) {
	h.next.Store(time.Now().Add(healthEvery).UnixNano())
	h.trigger(l)
}

// tick checks Redis in the background when a minute has passed.
func (h *healthState) tick(l *Limiter, now time.Time) {
	next := h.next.Load()
	if now.UnixNano() < next || !h.next.CompareAndSwap(next, now.Add(healthEvery).UnixNano()) {
		return
	}
	h.trigger(l)
}

// trigger starts a check in the background, unless one is running or one
// started less than a second ago (a pool opening many connections).
func (h *healthState) trigger(l *Limiter) {
	if !h.running.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	recent := time.Since(h.started) < time.Second
	if !recent {
		h.started = time.Now()
	}
	h.mu.Unlock()
	if recent {
		h.running.Store(false)
		return
	}
	go func() {
		defer h.running.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = l.Ping(ctx)
	}()
}

// update records a check and logs what changed: a Redis that may evict
// (once per change), keys evicted since the last check (at most once a
// minute), a check that fails (once per change, at Debug level).
func (h *healthState) update(now Health) Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.last
	if now.Checked.Before(prev.Checked) {
		// A check that started earlier finished later: what is newer stays.
		return prev
	}
	log := h.log()
	if now.Err != nil {
		if !h.failed && log != nil {
			// Debug: a Redis that does not answer is reported by the
			// decisions that fail; one that hides INFO is rare.
			log.Debug("redlimit: cannot tell whether redis may evict rate-limit keys", "err", now.Err)
		}
		h.failed = true
		now.MayEvict, now.MaxMemory, now.MaxMemoryPolicy, now.EvictedKeys = prev.MayEvict, prev.MaxMemory, prev.MaxMemoryPolicy, prev.EvictedKeys
		h.last = now
		return now
	}
	h.failed = false
	switch {
	case log == nil:
	case now.MayEvict && (!prev.MayEvict || prev.Checked.IsZero()):
		log.Warn("redlimit: redis may evict rate-limit keys, and an evicted key is a fresh quota: "+
			"give the limiter a Redis of its own, or maxmemory-policy noeviction",
			"maxmemory", now.MaxMemory, "maxmemory_policy", now.MaxMemoryPolicy)
	case !now.MayEvict && prev.MayEvict:
		log.Info("redlimit: redis no longer evicts keys", "maxmemory_policy", now.MaxMemoryPolicy)
	}
	if grew := now.EvictedKeys - prev.EvictedKeys; now.MayEvict && !prev.Checked.IsZero() && grew > 0 &&
		now.Checked.Sub(h.warned) >= healthEvery && log != nil {
		log.Warn("redlimit: redis evicted keys; rate-limit keys among them start afresh", "evicted", grew)
		h.warned = now.Checked
	}
	h.last = now
	return now
}
