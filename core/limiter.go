package core

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalidCost is returned for a cost n <= 0, for one above the
	// Limit's capacity, which could never be admitted, for a request a
	// Limit cannot take (AllowAtMost of a Concurrency, say), for a Settle
	// of used < 0, and for a Refund or Settle of a Result taken on another
	// key, Algorithm or layer.
	ErrInvalidCost = errors.New("core: invalid cost")
	// ErrUnavailable is wrapped by the error of every call that Redis
	// failed: Redis did not answer within the Limiter's timeout, refused
	// the connection, answered with an error (a failover's READONLY, OOM
	// under noeviction) or a reply the Limiter cannot read, or was not
	// asked because the circuit breaker is open (see WithBreaker). The
	// error's text is the fault's own, and it still matches what it wraps
	// (context.DeadlineExceeded for the timeout, say).
	//
	// errors.Is(err, ErrUnavailable) is the one test of a Redis fault: what
	// a fail policy (serve or refuse while Redis is away) and a count of
	// Redis errors should ask. No other error matches it: not the caller's
	// mistakes (ErrEmptyKey, ErrInvalidCost, ErrInvalidLimit, ErrClosed),
	// not ErrWaitExceedsDeadline, and not the error of a call whose ctx
	// ended first (the caller gave up: it matches ctx.Err()). httplimit
	// and grpclimit apply their fail policy to ErrUnavailable only, and
	// refuse the rest.
	ErrUnavailable = errors.New("core: redis unavailable")
	// ErrClosed is returned by every call of a Limiter after Close. It is
	// the caller's mistake, not a Redis fault (it does not match
	// ErrUnavailable), so a fail policy does not apply: httplimit refuses
	// the request (503), and grpclimit's call fails with codes.Unavailable,
	// even when failing open.
	ErrClosed = errors.New("core: limiter closed")
)

// errCircuitOpen is the error of a call the open circuit kept from Redis.
var errCircuitOpen = fmt.Errorf("%w (circuit open)", ErrUnavailable)

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
	detach   bool
	group    grouping
	log      func() *slog.Logger
	breaker  breaker
	denied   *denyCache // nil unless WithDenyCache
	fallback *sketch    // nil unless WithLocalFallback
	batch    *batcher   // nil when batching is off
	leases   *leases    // nil unless WithLeases
	health   healthState
	funcs    functions
	plans    plans
	clock    func() time.Time // WithClock
	closed   atomic.Bool
	stop     func() // undoes what New registered on the client
}

// New returns a Limiter that keeps its state in rdb: a *redis.Client, a
// failover (Sentinel) client, a *redis.ClusterClient or a *redis.Ring. It
// returns an error for a nil client and for an invalid Option.
//
// Make rdb with ContextTimeoutEnabled: go-redis then stops at the Limiter's
// deadline on the socket itself; without it the Limiter still keeps its
// timeout, at the cost of a goroutine per call. go-redis retries a command
// whose reply was lost: a retried decision counts its requests twice (it
// never admits one twice); a refund is never retried, since it would give
// back twice. MaxRetries: -1 turns the retries off altogether.
//
// New loads the Limiter's functions into Redis in the background, unless
// Redis holds them already (where Redis 7 functions are not available, each
// call is a script instead, which is logged once at Info level), and
// checks whether the Redis may evict keys (see Ping), logging a warning
// when it may. A call made while that first load runs waits for it, within
// its context and at most a second after New (or the timeout, if longer),
// before its timeout starts: dialling Redis and loading the library do not
// make a new Limiter's first decisions fail. (A Redis that refuses the
// connection ends the wait at once.) Close the Limiter when done
// with it if the client lives on.
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
	l := &Limiter{rdb: rdb, prefix: cfg.prefix, timeout: cfg.timeout, detach: !honoursDeadlines(rdb),
		group: groupingOf(rdb), log: cfg.log, clock: cfg.clock}
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
		l.fallback = newSketch(f.instances, f.maxKeys)
	}
	if cfg.batch > 1 {
		l.batch = newBatcher(cfg.batch, cfg.inflight)
	}
	if cfg.leaseShare > 0 {
		l.leases = newLeases(cfg.leaseShare)
	}
	l.health.log = cfg.log
	l.funcs.prepare(l.timeout)
	l.stop = watchClient(l)
	l.funcs.load(l)
	l.health.start(l)
	return l, nil
}

// reconnected runs when the client made a connection, or Redis answered
// again after failing: it may be another server.
func (l *Limiter) reconnected() {
	l.health.trigger(l)
	l.funcs.load(l)
}

// Close detaches the Limiter from its client: it stops its background
// checks, drops its leases (their unused units are given back) and removes
// what New registered on the client, so a client that outlives many
// Limiters keeps nothing of them. Calls made after Close return ErrClosed;
// the client itself stays open. A Limiter that is not closed leaves
// nothing behind either once it is garbage collected.
//
// Close a server's Limiter after the server has drained
// (http.Server.Shutdown or grpc.Server.GracefulStop has returned): a
// request decided after Close is refused, whatever the fail policy, since
// serving requests unlimited because the Limiter was closed too early
// would hide the mistake, and a 503 (codes.Unavailable) is what a server
// that is going away answers anyway.
func (l *Limiter) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.stop()
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

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.one(ctx, key, limit, 1, modeConsume, Result{})
}

// AllowN decides whether a request that costs n units may proceed now, and
// takes n if it may. A denial is a Result with Allowed false; the error is
// for invalid arguments and Redis failures (the timeout included), when the
// Result is zero. For Concurrency, n must be 1: the request takes a
// permit, which Refund gives back.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return l.one(ctx, key, limit, n, modeConsume, Result{})
}

// AllowAtMost takes as many units as fit now, up to n, and reports how many
// in Result.Granted: for batch workers that take what they may. n may
// exceed the Limit's capacity. It is denied, taking nothing, only when not
// even one unit fits; RetryAfter is then the wait for one.
func (l *Limiter) AllowAtMost(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return l.one(ctx, key, limit, n, modeAtMost, Result{})
}

// Peek reports what Allow would decide now, without taking anything:
// Remaining is what is left before the request, RetryAfter the wait for one
// unit.
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.one(ctx, key, limit, 1, modePeek, Result{})
}

// Refund gives back what taken (the Result of a call that admitted a request
// of key under limit) took but did not use: the request failed, or
// should not count. A refund never makes room the limit would not have
// had if the units had never been taken: the windows count units out only
// from the window they were taken in (a refund after that window ended
// gives nothing back), and the buckets give back only what they have not
// refilled since (nothing once they would be full anyway). For
// Concurrency, Refund gives the permit back.
//
// A receipt is refunded or settled once, on its own key and Algorithm (and
// layer, for AllowLayers'); one of another key, Algorithm or layer is
// refused with ErrInvalidCost. The Limiter cannot tell a second refund or
// settle of one receipt from a first, and would give its units back again:
// that the caller must not do. A Limit whose Rate, Period or Burst changed
// since the take still takes its receipts (the state is the same).
func (l *Limiter) Refund(ctx context.Context, key string, limit Limit, taken Result) error {
	if taken.Granted <= 0 {
		return nil
	}
	_, err := l.one(ctx, key, limit, taken.Granted, modeRefund, taken)
	return err
}

// Settle corrects what taken (the Result of a call that admitted a request
// of key under limit) took to what the request really used, once that is
// known (the tokens of a completion, the bytes streamed): it gives back
// the units not used, as Refund does, or takes the excess even beyond what
// is left, as a debt that later requests wait out at the Limit's rate (the
// buckets run below empty; the windows carry what exceeds Rate into the
// following windows, Rate in each, and refuse every request until the
// last of them begins: a debt of k x Rate beyond the window's own Rate
// refuses through the k-th following window, calendar days, ISO weeks and
// months alike; a calendar debt's RetryAfter and ResetAfter reach no
// further than the start of the second following window, where a request
// learns the rest). It returns what the key has left after the
// correction. used may be 0 (Refund); used < 0 is ErrInvalidCost. A zero
// taken charges all of used. Concurrency permits have no cost: Settle
// leaves them alone. The receipt rules of Refund hold: settle taken once.
//
// No used is too large: a larger one never leaves the key a shorter wait.
// Each state has a deepest debt, and a charge beyond it leaves the state
// there. A bucket's is the deepest its exact arithmetic holds: the least
// of 2^52 of its scaled units (a unit is Period/gcd(Period, Rate) of them,
// Period in µs or, for a Burst over a long Period, in ticks of 10^k µs),
// which is at least 4 times its Capacity, and what refills in 2^52µs
// (about 142 years): about 75 billion units (142 years) for
// PerMinute(1000), 521249 (5.2 days) for 99991 per 24 hours. A window
// charges up to 2^40 units (the largest Rate) of one Settle, more under
// SettleLayers beside a bucket that takes more, and carries a debt no
// further than 2^52µs after the Unix epoch (the year 2112).
func (l *Limiter) Settle(ctx context.Context, key string, limit Limit, taken Result, used int) (Result, error) {
	n, mode, err := correction(max(taken.Granted, 0), used)
	if err != nil {
		return Result{}, err
	}
	if n == 0 || limit.Algorithm == Concurrency || taken.Granted <= 0 && mode == modeRefund {
		return Result{Allowed: true, Granted: taken.Granted, Remaining: taken.Remaining, ResetAfter: taken.ResetAfter}, nil
	}
	res, err := l.one(ctx, key, limit, n, mode, taken)
	if err != nil {
		return Result{}, err
	}
	res.Allowed, res.Granted, res.RetryAfter = true, used, 0
	return res, nil
}

// correction is what a settle of used units does to a receipt that took
// granted (>= 0): n units of modeRefund or modeCharge.
func correction(granted, used int) (n, mode int, err error) {
	if used < 0 {
		return 0, 0, fmt.Errorf("%w: used = %d, want >= 0", ErrInvalidCost, used)
	}
	if used > granted {
		return used - granted, modeCharge, nil
	}
	return granted - used, modeRefund, nil
}

// Renew keeps the Concurrency permit that taken holds for another Period:
// a request in flight for longer than Period renews it, say every half
// Period, or its permit lapses and counts no more. A permit that had
// lapsed (a renewal failed or came late) is taken again, atomically, when
// the key has room for it, as a new request would take it. Allowed reports
// that taken's request holds its permit for another Period; false means
// the permit had lapsed and the key is full: the request holds none, and
// nothing counts it, so its caller should stop it (httplimit cancels its
// context).
func (l *Limiter) Renew(ctx context.Context, key string, limit Limit, taken Result) (Result, error) {
	if limit.Algorithm != Concurrency {
		return Result{}, errNotConcurrency
	}
	return l.one(ctx, key, limit, 1, modeRenew, taken)
}

var errNotConcurrency = fmt.Errorf("%w: Renew keeps Concurrency permits only", ErrInvalidLimit)

// Reset forgets key's state under every algorithm and layer, so its quota
// is whole again. Units handed out before the Reset and refunded after it
// may be given back to the fresh state: the quota is then at most whole.
// Concurrency permits are not quota but requests still in flight: Reset
// keeps them, so a Reset never lets more than Rate run at once; each goes
// when its request gives it back or lapses.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if l.closed.Load() {
		return ErrClosed
	}
	tag := escapeTag(key)
	keys := make([]string, 0, maxLayers*(len(algorithms)+2))
	for layer := range maxLayers {
		for a := range algorithms {
			if !algorithms[a].ids { // permits of requests in flight stay
				keys = stateKeys(keys, l.prefix, tag, &algorithms[a], layer)
			}
		}
		keys = stateKeys(keys, l.prefix, tag, &calendarWindow, layer)
	}
	l.forget(tag)
	_, err := l.do(ctx, func(ctx context.Context) (any, error) {
		return nil, l.rdb.Del(ctx, keys...).Err()
	})
	// A denial that was in flight during the DEL may have cached itself.
	l.forget(tag)
	return classified(ctx, err)
}

// forget drops the denials and leases this instance holds for tag.
func (l *Limiter) forget(tag string) {
	var buf [2]string
	for _, row := range append(algorithms[:], calendarWindow) {
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
	if (mode == modeRefund || mode == modeCharge) && taken.foreign(key, row, 0) {
		return Result{}, errForeignReceipt
	}
	var out [1]Result
	err = l.decide(ctx, &request{key: key, pl: pl, n: n, mode: mode, taken: taken.stamp, id: taken.stamp}, out[:])
	if out[0].Granted > 0 && (mode == modeConsume || mode == modeAtMost) {
		out[0].owner = receipt(key, row, 0)
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

// Logger is the logger the Limiter was made with (WithLogger), nil when
// logging is off: for the packages built on it, so that one setting
// covers them.
func (l *Limiter) Logger() *slog.Logger { return l.log() }
