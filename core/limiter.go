package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalidCost is returned for a cost n <= 0, for one above the
	// Limit's capacity, which could never be admitted, and for a Refund the
	// algorithm cannot make (SlidingWindow).
	ErrInvalidCost = errors.New("core: invalid cost")
	// ErrUnavailable is wrapped by the error of a call that did not reach
	// Redis because the circuit breaker is open (see WithBreaker).
	ErrUnavailable = errors.New("core: redis unavailable (circuit open)")
)

// Limiter decides, for a key and a Limit, whether a request may proceed.
// Every decision is an atomic Lua script in Redis, timed by Redis' own
// clock, so any number of Limiters on any number of hosts share one limit
// per key exactly. A Limiter is safe for concurrent use; make one per Redis
// client and share it.
type Limiter struct {
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	// detach runs Redis calls on their own goroutine, for clients that do not
	// honour context deadlines on the socket (ContextTimeoutEnabled unset),
	// so that the timeout still bounds the caller.
	detach   bool
	group    grouping
	breaker  breaker
	denied   *denyCache // nil unless WithDenyCache
	fallback *sketch    // nil unless WithLocalFallback
	batch    *batcher   // nil when batching is off
	leases   *leases    // nil unless WithLeases
	health   healthState
	prepared [8]atomic.Pointer[prepared]
}

// New returns a Limiter that keeps its state in rdb: a *redis.Client, a
// failover (Sentinel) client, a *redis.ClusterClient or a *redis.Ring. It
// returns an error for a nil client and for an invalid Option.
//
// Make rdb with ContextTimeoutEnabled: go-redis then stops at the Limiter's
// deadline on the socket itself; without it the Limiter still keeps its
// timeout, at the cost of a goroutine per call. Keep the Limiter's timeout
// below the client's ReadTimeout (3s by default), or set MaxRetries: -1:
// go-redis retries a command whose reply was lost, and a retried script
// counts its requests twice (it never admits one twice).
//
// New checks, in the background, whether the Redis may evict keys (see
// Ping), and logs a warning when it may.
func New(rdb redis.UniversalClient, opts ...Option) (*Limiter, error) {
	if isNil(rdb) {
		return nil, errors.New("core: New: nil redis client")
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	l := &Limiter{rdb: rdb, prefix: cfg.prefix, timeout: cfg.timeout, detach: !honoursDeadlines(rdb), group: groupingOf(rdb)}
	l.breaker = breaker{failures: cfg.breakerFailures, cooldown: cfg.breakerCooldown, span: 2 * cfg.timeout, log: cfg.log}
	l.breaker.healthy.Store(true)
	if c, ok := rdb.(interface{ ReloadState(context.Context) }); ok {
		// A Cluster client learns of a new master only from a MOVED reply
		// or its periodic reload (every minute by default), and a master
		// that died sends no MOVED: without this, its slots would fail for
		// up to a minute after a replica took over. ReloadState is
		// asynchronous; go-redis runs one reload at a time.
		l.breaker.onFault = func() { c.ReloadState(context.Background()) }
	}
	// Redis answering again may be another Redis (a failover): check it.
	l.breaker.onRecover = func() { l.health.trigger(l) }
	if cfg.denyKeys > 0 {
		l.denied = newDenyCache(cfg.denyKeys)
	}
	if f := cfg.fallback; f != nil {
		l.fallback = newSketch(f.instances, f.maxKeys)
	}
	if cfg.batch > 1 {
		l.batch = newBatcher(cfg.batch)
	}
	if cfg.leaseShare > 0 {
		l.leases = newLeases(cfg.leaseShare)
	}
	l.health.log = cfg.log
	l.health.watch(l)
	return l, nil
}

// isNil reports a nil client, including a typed nil pointer in the
// interface, which would otherwise panic on first use.
func isNil(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.decide(ctx, key, limit, 1, modeConsume)
}

// AllowN decides whether a request that costs n units may proceed now, and
// takes n if it may. A denial is a Result with Allowed false; the error is
// for invalid arguments and Redis failures (the timeout included), when the
// Result is zero.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return l.decide(ctx, key, limit, n, modeConsume)
}

// AllowAtMost takes as many units as fit now, up to n, and reports how many
// in Result.Granted: for batch workers that take what they may. n may
// exceed the Limit's capacity. It is denied, taking nothing, only when not
// even one unit fits; RetryAfter is then the wait for one.
func (l *Limiter) AllowAtMost(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return l.decide(ctx, key, limit, n, modeAtMost)
}

// Peek reports what Allow would decide now, without taking anything:
// Remaining is what is left before the request, RetryAfter the wait for one
// unit.
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.decide(ctx, key, limit, 1, modePeek)
}

// Refund gives back n units that a request took but did not use (it
// failed, or took less than it reserved), where the algorithm can take
// them back: TokenBucket refills them (never beyond its capacity),
// LeakyBucket dequeues them, FixedWindow and SlidingWindowCounter count
// them out of the current window (SlidingWindowCounter then out of the
// previous one). SlidingWindow cannot, since its log is exact, and returns
// ErrInvalidCost. A refund never makes the quota larger than whole.
func (l *Limiter) Refund(ctx context.Context, key string, limit Limit, n int) error {
	_, err := l.decide(ctx, key, limit, n, modeRefund)
	return err
}

// Reset forgets key's state under every algorithm and layer, so its quota
// is whole again.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	tag := escapeTag(key)
	keys := make([]string, 0, maxLayers*(len(algorithms)+1))
	for layer := range maxLayers {
		for a := range algorithms {
			keys = stateKeys(keys, l.prefix, tag, Algorithm(a), layer)
		}
	}
	l.forget(tag)
	_, err := l.do(ctx, func(ctx context.Context) (any, error) {
		return nil, l.rdb.Del(ctx, keys...).Err()
	})
	// A denial that was in flight during the DEL may have cached itself.
	l.forget(tag)
	return err
}

// forget drops the denials and leases this instance holds for tag.
func (l *Limiter) forget(tag string) {
	var buf [2]string
	for a := range algorithms {
		k := stateKeys(buf[:0], l.prefix, tag, Algorithm(a), 0)[0]
		if l.denied != nil {
			l.denied.forget(k)
		}
		if l.leases != nil {
			l.leases.forget(k)
		}
	}
}

// prepared is a validated Limit with the script arguments of its most
// common call (one request of n = 1, consumed) built once, so the hot path
// neither validates nor boxes integers again.
type prepared struct {
	limit Limit
	p     params
	args  []any // the Limit's ARGV; read-only, shared by concurrent calls
	one   []any // args, then one request: 1, n = 1, modeConsume
}

func (l *Limiter) prepare(limit Limit) (*prepared, error) {
	h := (uint64(limit.Rate)*0x9E3779B97F4A7C15 ^ uint64(limit.Period)>>10 ^ uint64(limit.Burst)<<7 ^ uint64(limit.Algorithm)) * 0x9E3779B97F4A7C15
	slot := &l.prepared[h>>61]
	if pr := slot.Load(); pr != nil && pr.limit == limit {
		return pr, nil
	}
	p, err := limit.params()
	if err != nil {
		return nil, err
	}
	args := algorithms[limit.Algorithm].args(p)
	pr := &prepared{limit: limit, p: p, args: args, one: append(args[:len(args):len(args)], 1, 1, modeConsume)}
	slot.Store(pr)
	return pr, nil
}

// keyBufs recycles the KEYS slice of a one-state script call: go-redis
// copies it into the command, so it is free again once Run returns.
var keyBufs = sync.Pool{New: func() any { return new([2]string) }}

func (l *Limiter) decide(ctx context.Context, key string, limit Limit, n, mode int) (Result, error) {
	if key == "" {
		return Result{}, ErrEmptyKey
	}
	pr, err := l.prepare(limit)
	if err != nil {
		return Result{}, err
	}
	if mode == modeAtMost && n > 0 {
		n = int(min(int64(n), pr.p.capacity)) // more never fits
	}
	if n <= 0 || int64(n) > pr.p.capacity {
		return Result{}, fmt.Errorf("%w: n = %d, want 1 <= n <= %d (the %s capacity)", ErrInvalidCost, n, pr.p.capacity, limit.Algorithm)
	}
	if mode == modeRefund && !algorithms[limit.Algorithm].refund {
		return Result{}, fmt.Errorf("%w: %s cannot give units back", ErrInvalidCost, limit.Algorithm)
	}
	buf := keyBufs.Get().(*[2]string)
	defer func() {
		*buf = [2]string{}
		keyBufs.Put(buf)
	}()
	tag := escapeTag(key)
	keys := stateKeys(buf[:0], l.prefix, tag, limit.Algorithm, 0)
	sent := time.Now()
	takes := mode == modeConsume || mode == modeAtMost
	need := n // the units a denial says did not fit
	if mode == modeAtMost {
		need = 1
	}
	var res Result
	leased := false
	if l.leases != nil && mode == modeConsume && l.leases.capFor(pr) >= 2 {
		res, leased, err = l.leases.decide(ctx, l, pr, tag, keys, n)
	} else if mode == modeRefund && l.leases != nil {
		l.leases.refunded(keys[0])
	}
	if !leased {
		if l.denied != nil {
			if takes {
				if res, ok := l.denied.get(keys[0], limit, need, sent); ok {
					return res, nil
				}
			} else if mode == modeRefund {
				l.denied.forget(keys[0])
			}
		}
		res, err = l.ask(ctx, pr, tag, keys, n, mode, sent)
	}
	if err != nil {
		if l.fallback != nil && takes && redisFault(ctx, err) {
			return l.fallback.allow(keys[0], limit, n, mode == modeAtMost, time.Now())
		}
		return Result{}, err
	}
	if leased {
		return res, nil
	}
	if mode == modePeek {
		res.Granted = 0
	}
	if l.denied != nil && takes && !res.Allowed {
		l.denied.put(keys[0], limit, need, sent, time.Now(), res)
	}
	return res, nil
}

// ask makes one decision in Redis, through the circuit breaker, within
// the Limiter's timeout.
func (l *Limiter) ask(ctx context.Context, pr *prepared, tag string, keys []string, n, mode int, sent time.Time) (Result, error) {
	if !l.breaker.allow(sent) {
		return Result{}, ErrUnavailable
	}
	bctx, cancel := l.bound(ctx)
	res, err := l.run(bctx, pr, tag, keys, n, mode)
	cancel()
	l.breaker.record(ctx, err, time.Now())
	l.health.tick(l, sent)
	return res, err
}

// run makes one decision in Redis: in a batch with concurrent callers of
// the same group when batching is on and another call of the group is in
// flight, else on its own.
func (l *Limiter) run(ctx context.Context, pr *prepared, tag string, keys []string, n, mode int) (Result, error) {
	if l.batch != nil {
		return l.batch.decide(ctx, l, pr, l.group.of(tag), keys, n, mode)
	}
	return l.runOne(ctx, pr, keys, n, mode)
}

// runOne makes one decision in its own script call.
func (l *Limiter) runOne(ctx context.Context, pr *prepared, keys []string, n, mode int) (Result, error) {
	args := pr.one
	if n != 1 || mode != modeConsume {
		args = append(pr.args[:len(pr.args):len(pr.args)], 1, n, mode)
	}
	v, err := l.eval(ctx, batchScripts[pr.limit.Algorithm], keys, args)
	if err != nil {
		return Result{}, err
	}
	var out [1]Result
	vals, _ := v.([]any)
	if err := parseResults(vals, out[:]); err != nil {
		return Result{}, err
	}
	return out[0], nil
}
