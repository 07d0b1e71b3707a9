package core

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limiter decides, for a key and a Limit, whether a request may proceed.
// Every decision is an atomic Lua function or script in Redis, timed by
// Redis' own clock, so any number of Limiters on any number of hosts share
// one limit per key exactly. A Limiter is safe for concurrent use; make one
// per Redis client and share it.
//
// Changing the Limit of a key takes effect on its next call. Lowering it
// below what the key has spent refuses the key, with the wait the new
// Limit gives, until enough has been refilled or has left the window;
// raising it hands out nothing extra. The buckets carry their level over;
// the windows their count. Each algorithm keeps its own state, so moving a
// key to another algorithm starts it with a whole quota under the new one.
type Limiter struct {
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	// detach runs Redis calls on their own goroutine, for clients that do not
	// honour context deadlines on the socket (ContextTimeoutEnabled unset),
	// so that the timeout still bounds the caller.
	detach    bool
	deadlines deadlines // the timeout's contexts, one per ms
	group     grouping
	log       func() *slog.Logger
	breaker   breaker
	denied    *denyCache   // nil unless WithDenyCache
	fallback  *sketch      // nil after WithLocalFallback(0, 0)
	fleet     *fleetMember // counts n for fallback; nil when n is fixed
	batch     *batcher     // nil when batching is off
	leases    *leases      // nil unless WithLeases
	health    healthState
	funcs     functions
	plans     plans
	clock     func() time.Time // clock.With (withClock)
	acks      replicaAcks      // WithReplicaAcks
	observers observers        // see Observe
	degraded  degradedLog
	echoes    echoes // Resets announced, not yet heard back (resets.go)
	closed    atomic.Bool
	stop      func() // undoes what New registered on the client
}

// New returns a Limiter that keeps its state in rdb: a *redis.Client, a
// failover (Sentinel) client, a *redis.ClusterClient or a *redis.Ring. It
// returns an error for a nil client and for an invalid Option.
//
// Make rdb with ContextTimeoutEnabled, so go-redis stops at the Limiter's
// deadline on the socket itself. New loads the Limiter's functions into
// Redis in the background and checks whether the Redis may evict keys (see
// Ping); a first call waits for that load, within limits. Close the
// Limiter when done with it if the client lives on. Retries, the script
// fallback and the first load's wait are in docs/limits.md#new-limiters.
func New(rdb redis.UniversalClient, opts ...Option) (*Limiter, error) {
	if isNil(rdb) {
		return nil, errors.New("core: New: nil redis client")
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := errors.Join(append(cfg.errs, cfg.acks.check(cfg.timeout))...); err != nil {
		return nil, err
	}
	l := &Limiter{rdb: rdb, prefix: cfg.prefix, timeout: cfg.timeout, detach: !honoursDeadlines(rdb),
		group: groupingOf(rdb), log: cfg.log, clock: cfg.clock, acks: cfg.acks}
	l.plans.stagger = cfg.stagger
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
	// Redis answering again may be another Redis (a failover, a restart
	// that lost the functions): check it.
	l.breaker.onRecover = func() { l.reconnected() }
	if cfg.denyKeys > 0 {
		l.denied = newDenyCache(cfg.denyKeys)
	}
	if f := cfg.fallback; f != nil {
		n := f.instances
		if n == 0 {
			n = assumedFleet // until the fleet is counted
		}
		l.fallback = newSketch(n, f.maxKeys)
	}
	if cfg.batch > 1 {
		l.batch = newBatcher(cfg.batch, cfg.inflight)
	}
	if cfg.leaseShare > 0 {
		l.leases = newLeases(cfg.leaseShare)
	}
	l.health.log = cfg.log
	l.funcs.prepare(l.timeout)
	l.stop = listenResets(l, watchClient(l))
	l.funcs.load(l)
	l.health.start(l)
	if cfg.fallback != nil && cfg.fallback.instances == 0 {
		l.fleet = joinFleet(l)
	}
	return l, nil
}

// reconnected runs when the client made a connection, or Redis answered
// again after failing: it may be another server.
func (l *Limiter) reconnected() {
	l.health.trigger(l)
	l.funcs.load(l)
}

// Close detaches the Limiter from its client. It stops its background
// checks, drops its leases (their unused units are given back) and removes
// what New registered on the client, so a client that outlives many
// Limiters keeps nothing of them. Calls made after Close return ErrClosed;
// the client itself stays open. A Limiter that is not closed leaves
// nothing behind either once it is garbage collected.
//
// Close a server's Limiter after the server has drained: a request decided
// after Close is refused, whatever the fail policy (see
// docs/limits.md#closing-a-limiter).
func (l *Limiter) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.stop()
	if l.fleet != nil {
		l.fleet.leave(l.rdb, l.timeout)
	}
	if l.leases != nil {
		l.leases.close(l)
	}
	return nil
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

// Reset forgets key's state under every algorithm and layer, so its quota
// is whole again. Units handed out before the Reset and refunded after it
// may be given back to the fresh state: the quota is then at most whole.
// Concurrency permits are not quota but requests still in flight: Reset
// keeps them, so a Reset never lets more than Rate run at once; each goes
// when its request gives it back or lapses. Every Limiter under the same
// prefix forgets the denials and leases it keeps of key as Redis delivers
// the Reset's message (WithDenyCache, WithLeases).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if l.closed.Load() {
		return ErrClosed
	}
	tag := escapeTag(key)
	keys := make([]string, 0, maxRules*(len(algorithms)+3))
	for layer := range maxRules {
		for a := range algorithms {
			if !algorithms[a].ids { // permits of requests in flight stay
				keys = stateKeys(keys, l.prefix, tag, &algorithms[a], layer)
			}
		}
		keys = stateKeys(keys, l.prefix, tag, &calendarWindow, layer)
		keys = stateKeys(keys, l.prefix, tag, &staggeredWindow, layer)
	}
	l.forget(tag)
	_, err := l.do(ctx, func(ctx context.Context) (any, error) {
		return nil, l.rdb.Del(ctx, keys...).Err()
	})
	// A denial that was in flight during the DEL may have cached itself.
	l.forget(tag)
	if err == nil {
		err = l.announceReset(ctx, tag) // the other instances' (resets.go)
	}
	return classified(ctx, err)
}

// forget drops the denials and leases this instance holds for tag.
func (l *Limiter) forget(tag string) {
	var buf [2]string
	for _, row := range rows() {
		k := stateKeys(buf[:0], l.prefix, tag, &row, 0)[0]
		if l.denied != nil {
			l.denied.forget(k)
		}
		if l.leases != nil {
			l.leases.forget(k)
		}
	}
}

// one decides one request under one Limit.
func (l *Limiter) one(ctx context.Context, key string, limit Limit, n, mode int, taken Result) (Result, error) {
	pl, err := l.plans.of(limit)
	if err != nil {
		return Result{}, err
	}
	row := pl.layers[0].row
	if (mode == modeRefund || mode == modeCharge || mode == modeRenew) && taken.foreign(l, key, row, 0) {
		return Result{}, errForeignReceipt
	}
	if mode == modeRefund && taken.Fallback && !row.ids {
		return Result{}, nil // Redis took nothing for a fallback receipt
	}
	var out [1]Result
	err = l.decide(ctx, &request{key: key, pl: pl, n: n, mode: mode, taken: taken.stamp, id: taken.stamp, pos: [maxRules]int64{taken.pos}}, out[:])
	if err == nil && mode <= modeAtMost { // a decision: its Result is a receipt
		out[0].rule = Rule{Key: key, Limit: limit}
	}
	if out[0].Granted > 0 && (mode == modeConsume || mode == modeAtMost) {
		out[0].owner = receipt(l, key, row, 0, out[0].Granted)
	}
	return out[0], err
}

// permitID is a fresh Concurrency permit: 52 random bits, so that ids of
// concurrent requests never meet in practice and Lua holds them exactly.
func permitID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:]) >> 12)
}
