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

// Errors returned by Limiter. A denial is not an error: it is a Result with
// Allowed false.
var (
	// ErrNoClient is returned by every call of a Limiter made with a nil client.
	ErrNoClient = errors.New("core: nil redis client")
	// ErrInvalidCost is returned for n <= 0, and for n above the Limit's
	// capacity, which could never be admitted.
	ErrInvalidCost = errors.New("core: invalid cost")
	// ErrBadReply is returned when Redis answers with something the scripts
	// never send (a proxy in the way, or a script of another version).
	ErrBadReply = errors.New("core: unexpected reply from redis")
)

// DefaultTimeout bounds one decision unless WithTimeout says otherwise. A
// healthy Redis answers in well under a millisecond; the bound is what a
// request pays when Redis is slow or gone.
const DefaultTimeout = 50 * time.Millisecond

// DefaultPrefix starts every key the Limiter writes.
const DefaultPrefix = "ratelimit"

// Result is the outcome of one decision. A worked example, for a token bucket
// of Rate 10 per second (Burst 10) that has just admitted its 10th request in
// one instant: Allowed true, Limit 10, Remaining 0, RetryAfter 0, ResetAfter
// 1s (the bucket is full again in one second). The 11th request in that
// instant gets Allowed false, Remaining 0, RetryAfter 100ms (one token takes
// a tenth of a second to refill), ResetAfter 1s.
type Result struct {
	// Allowed reports whether the request may proceed (after Delay).
	Allowed bool
	// Limit is the quota's capacity: Limit.Capacity().
	Limit int
	// Remaining is how many units could still be admitted right now, after
	// this request. 0 <= Remaining <= Limit.
	Remaining int
	// RetryAfter is 0 when Allowed, else the exact wait until the same cost
	// could be admitted, assuming no other traffic.
	RetryAfter time.Duration
	// ResetAfter is how long until the quota is whole again (Remaining ==
	// Limit), assuming no other traffic.
	ResetAfter time.Duration
	// Delay is how long an admitted LeakyBucket request must wait before it
	// proceeds, so that requests leave at an even pace. 0 otherwise.
	Delay time.Duration
	// Cached reports a denial answered by the local deny cache (see
	// WithDenyCache) without asking Redis.
	Cached bool
	// Fallback reports a decision made by the in-process fallback limiter
	// (see WithLocalFallback) because Redis could not answer.
	Fallback bool
}

// Limiter decides, for a key and a Limit, whether a request may proceed.
// Every decision is one atomic Lua script in Redis, timed by Redis' own
// clock, so any number of Limiters on any number of hosts share one limit
// per key exactly. A Limiter is safe for concurrent use.
type Limiter struct {
	rdb redis.UniversalClient
	// run is where scripts run: rdb, or its AutoPipeliner.
	run          redis.Scripter
	autoPipeline bool
	prefix       string
	timeout      time.Duration
	// detach runs Redis calls on their own goroutine, for clients that do not
	// honour context deadlines on the socket (ContextTimeoutEnabled unset),
	// so that the timeout still bounds the caller.
	detach   bool
	breaker  breaker
	denied   *denyCache    // nil unless WithDenyCache
	fallback *localLimiter // nil unless WithLocalFallback
	prepared [8]atomic.Pointer[prepared]
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithPrefix sets the prefix of every Redis key ("<prefix>:{<key>}:<alg>").
// Braces in it are escaped so they cannot become the hash tag.
// Default: DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(l *Limiter) { l.prefix = escapeBraces.Replace(prefix) }
}

// WithTimeout bounds each decision, on top of the caller's context; d <= 0
// leaves only the caller's context. Default: DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.timeout = d }
}

// WithAutoPipeline sends decisions through go-redis' automatic pipelining
// (the client's AutoPipeline), which batches the scripts of concurrent
// callers into few round trips: with hundreds of concurrent callers it
// raised decisions per second 1.2-1.8x in BENCHMARKS.md, and with few it
// loses, so it is off by default.
// Queued commands ignore context deadlines in go-redis, so the Limiter then
// waits for each reply on its own goroutine to keep its timeout. A batch
// that loses its connection is retried whole, so a decision may be counted
// twice (never admitted twice). Only *redis.Client and *redis.ClusterClient
// have an AutoPipeline; other clients ignore this option. Default: off.
func WithAutoPipeline() Option {
	return func(l *Limiter) { l.autoPipeline = true }
}

// New returns a Limiter that keeps its state in rdb: a *redis.Client, a
// failover (Sentinel) client, a *redis.ClusterClient or a *redis.Ring.
//
// go-redis only honours context deadlines on the socket when the client is
// made with ContextTimeoutEnabled; without it, the Limiter waits for Redis on
// a separate goroutine so that its timeout still holds, at the cost of a
// goroutine per call. Set ContextTimeoutEnabled for the fast path.
func New(rdb redis.UniversalClient, opts ...Option) *Limiter {
	l := &Limiter{rdb: rdb, prefix: DefaultPrefix, timeout: DefaultTimeout,
		breaker: breaker{failures: DefaultBreakerFailures, cooldown: DefaultBreakerCooldown}}
	for _, opt := range opts {
		opt(l)
	}
	l.breaker.span = 2 * l.timeout
	l.breaker.healthy.Store(true)
	if isNil(rdb) {
		l.rdb = nil // every call returns ErrNoClient
		return l
	}
	if c, ok := rdb.(interface{ ReloadState(context.Context) }); ok {
		// A Cluster client learns of a new master only from a MOVED reply
		// or its periodic reload (every minute by default), and a master
		// that died sends no MOVED: without this, its slots would fail for
		// up to a minute after a replica took over. ReloadState is
		// asynchronous; go-redis runs one reload at a time, and waits
		// 200 ms after one that succeeded.
		l.breaker.onFault = func() { c.ReloadState(context.Background()) }
	}
	l.run = rdb
	l.detach = !honoursDeadlines(rdb)
	if l.autoPipeline {
		if ap := autoPipeliner(rdb); ap != nil {
			l.run, l.detach = ap, true
		}
	}
	return l
}

func autoPipeliner(rdb redis.UniversalClient) *redis.AutoPipeliner {
	var ap *redis.AutoPipeliner
	var err error
	switch c := rdb.(type) {
	case *redis.Client:
		ap, err = c.AutoPipeline()
	case *redis.ClusterClient:
		ap, err = c.AutoPipeline()
	}
	if err != nil {
		return nil
	}
	return ap
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
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN decides whether a request that costs n units may proceed now, and
// consumes n if it may. It makes one round trip to Redis. A denial is a
// Result with Allowed false; the error is for invalid arguments and Redis
// failures (including the timeout), when the Result is zero.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return l.decide(ctx, key, limit, n, false)
}

// Peek reports what Allow would decide now, without consuming anything:
// Remaining is what is left before the request, RetryAfter the wait for one.
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.decide(ctx, key, limit, 1, true)
}

// Reset forgets key's state for limit's algorithm, so its quota is whole.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	if err := l.check(key, limit); err != nil {
		return err
	}
	return l.del(ctx, []string{redisKey(l.prefix, key, limit.Algorithm)})
}

// del deletes keys (all in one hash slot) and forgets them locally.
func (l *Limiter) del(ctx context.Context, keys []string) error {
	if l.rdb == nil {
		return ErrNoClient
	}
	for _, k := range keys {
		if l.denied != nil {
			l.denied.forget(k)
		}
		if l.fallback != nil {
			l.fallback.forget(k)
		}
	}
	_, err := l.do(ctx, func(ctx context.Context) (any, error) {
		return nil, l.rdb.Del(ctx, keys...).Err()
	})
	// A denial that was in flight during the DEL may have cached itself.
	for _, k := range keys {
		if l.denied != nil {
			l.denied.forget(k)
		}
	}
	return err
}

func (l *Limiter) check(key string, limit Limit) error {
	if l.rdb == nil {
		return ErrNoClient
	}
	if key == "" {
		return ErrEmptyKey
	}
	return limit.Validate()
}

func (l *Limiter) decide(ctx context.Context, key string, limit Limit, n int, peek bool) (Result, error) {
	if l.rdb == nil {
		return Result{}, ErrNoClient
	}
	if key == "" {
		return Result{}, ErrEmptyKey
	}
	pr, err := l.prepare(limit)
	if err != nil {
		return Result{}, err
	}
	if n <= 0 || int64(n) > pr.p.capacity {
		return Result{}, fmt.Errorf("%w: n = %d, want 1 <= n <= %d (the %s capacity)", ErrInvalidCost, n, pr.p.capacity, limit.Algorithm)
	}
	rkey := redisKey(l.prefix, key, limit.Algorithm)
	sent := time.Now()
	if l.denied != nil && !peek {
		if res, ok := l.denied.get(rkey, limit, n, sent); ok {
			return res, nil
		}
	}
	var res Result
	if l.breaker.allow(sent) {
		args := pr.args
		if n != 1 || peek {
			args = scriptArgs(limit.Algorithm, pr.p, n, peek)
		}
		var v any
		v, err = l.eval(ctx, scripts[limit.Algorithm], rkey, args)
		if err == nil {
			res, err = parseReply(v, int(pr.p.capacity))
		}
		l.breaker.record(ctx, err, time.Now())
	} else {
		err = ErrUnavailable
	}
	if err != nil {
		if l.fallback != nil && !peek && redisFault(ctx, err) {
			return l.fallback.allow(rkey, limit, n, time.Now()), nil
		}
		return Result{}, err
	}
	if l.denied != nil && !res.Allowed && !peek {
		l.denied.put(rkey, limit, n, sent, time.Now(), res)
	}
	return res, nil
}

// prepared is a validated Limit with the script arguments of its most
// common call (n = 1, not a peek) built once, so the hot path neither
// validates nor boxes integers again.
type prepared struct {
	limit Limit
	p     params
	args  []any // read-only: shared by concurrent calls
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
	pr := &prepared{limit: limit, p: p, args: scriptArgs(limit.Algorithm, p, 1, false)}
	slot.Store(pr)
	return pr, nil
}

// keySlices recycles the one-element KEYS slice of a script call: go-redis
// copies it into the command, so it is free again once Run returns.
var keySlices = sync.Pool{New: func() any { return new([1]string) }}

// eval runs a script on one key within the Limiter's timeout.
func (l *Limiter) eval(ctx context.Context, s *redis.Script, key string, args []any) (any, error) {
	ctx, cancel := l.bound(ctx)
	defer cancel()
	keys := keySlices.Get().(*[1]string)
	keys[0] = key
	if !l.detach {
		v, err := s.Run(ctx, l.run, keys[:], args...).Result()
		keys[0] = ""
		keySlices.Put(keys)
		return v, l.wrap(ctx, err)
	}
	return l.detached(ctx, func(ctx context.Context) (any, error) {
		defer func() {
			keys[0] = ""
			keySlices.Put(keys)
		}()
		return s.Run(ctx, l.run, keys[:], args...).Result()
	})
}

// do runs a rare command (DEL, a layered script) within the timeout.
func (l *Limiter) do(ctx context.Context, f func(context.Context) (any, error)) (any, error) {
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if !l.detach {
		v, err := f(ctx)
		return v, l.wrap(ctx, err)
	}
	return l.detached(ctx, f)
}

func nop() {}

// bound applies the Limiter's timeout, unless the caller's own deadline
// comes first (then a timer would be wasted).
func (l *Limiter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, nop
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= l.timeout {
		return ctx, nop
	}
	return context.WithTimeout(ctx, l.timeout)
}

type reply struct {
	v   any
	err error
}

// detached waits for f on its own goroutine, for clients that would not
// stop at ctx's deadline themselves.
func (l *Limiter) detached(ctx context.Context, f func(context.Context) (any, error)) (any, error) {
	ch := make(chan reply, 1)
	go func() {
		v, err := f(ctx)
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, l.wrap(ctx, r.err)
	case <-ctx.Done():
		return nil, l.wrap(ctx, ctx.Err())
	}
}

func (l *Limiter) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		// go-redis reports a deadline on the socket as an i/o timeout.
		return fmt.Errorf("core: redis: %w (%v)", ctxErr, err)
	}
	return fmt.Errorf("core: redis: %w", err)
}
