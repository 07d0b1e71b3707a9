package core

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/redlimit/redlimit/internal/clock"
)

// Option configures a Limiter. New reports an invalid one as an error that
// names it.
type Option func(*config)

type config struct {
	prefix          string
	timeout         time.Duration
	breakerFailures int
	breakerCooldown time.Duration
	denyKeys        int
	fallback        *fallbackConfig
	log             func() *slog.Logger
	batch           int
	inflight        int
	leaseShare      float64
	clock           func() time.Time
	stagger         bool
	errs            []error
	acks            replicaAcks
}

type fallbackConfig struct{ instances, maxKeys int }

func defaultConfig() config {
	return config{
		prefix:          "ratelimit",
		timeout:         100 * time.Millisecond,
		breakerFailures: 5,
		breakerCooldown: 500 * time.Millisecond,
		log:             slog.Default,
		batch:           128,
		inflight:        4,
		clock:           time.Now,
		fallback:        defaultFallback,
	}
}

// defaultFallback is the local fallback of a Limiter made without
// WithLocalFallback: n learned from Redis. (core's own tests turn it off,
// to see Redis' errors; the fallback's tests turn it on.)
var defaultFallback = &fallbackConfig{maxKeys: 4096}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("core: "+format, args...))
}

// WithPrefix sets the first part of every Redis key the Limiter writes:
// "<prefix>:{<key>}<suffix>", where the suffix names the algorithm and the
// state's version (":tb4" for a token bucket, ":sw3" and ":sw3m" for a
// sliding window), and a layer after the first adds its index (":tb4:1").
// The key is escaped (see the package doc), and braces in the prefix too,
// so neither can choose the hash tag. Default: "ratelimit".
func WithPrefix(prefix string) Option {
	return func(c *config) {
		if prefix == "" {
			c.fail("WithPrefix: empty prefix")
		}
		c.prefix = escapeBraces.Replace(prefix)
	}
}

// WithTimeout bounds each decision, on top of the caller's context. A Redis
// that is slower, or gone, costs a caller at most d (for d up to 1s, d
// rounded up to a whole ms: the calls that start within a ms share one
// deadline rather than a timer each). A caller that gives up while its
// decision is queued for a batch leaves at once; while its call is on the
// wire, with the reply or at d. 0 leaves only the caller's context.
// Default: 100ms: a healthy Redis answers in well under a millisecond, and
// a busy host or a short stall fits (docs/operations.md, "The timeout").
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithTimeout: negative timeout %v", d)
		}
		c.timeout = d
	}
}

// WithBreaker sets the circuit breaker. After failures consecutive Redis
// failures (errors or timeouts) spread over at least twice the Limiter's
// timeout, calls fail at once with ErrUnavailable for cooldown; then one
// call probes Redis, and its success closes the circuit. The time span keeps
// a burst of concurrent timeouts during a brief hiccup (a Cluster failover
// takes tens of milliseconds) from opening the circuit for a whole cooldown.
// So a dead Redis costs requests nothing after the first few, and exact
// limiting resumes within cooldown of Redis coming back, with no restart.
// failures 0 turns the breaker off. Default: 5 failures, 500ms.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return func(c *config) {
		if failures < 0 || cooldown < 0 || failures > 0 && cooldown == 0 {
			c.fail("WithBreaker: want failures >= 0 and a cooldown > 0, got %d and %v", failures, cooldown)
		}
		c.breakerFailures, c.breakerCooldown = failures, cooldown
	}
}

// WithDenyCache remembers, on this instance, each key that Redis denied,
// until its RetryAfter has passed, and denies further requests for it
// locally, with the same Result and without a round trip. Under abusive
// traffic on a few keys this takes most of the load off Redis. It never
// reports a wait shorter than Redis would; what another instance gives
// back is not seen, so the key may stay denied here until its RetryAfter
// ends (see docs/limits.md#the-deny-cache). At most maxKeys keys are
// remembered. Default: off.
func WithDenyCache(maxKeys int) Option {
	return func(c *config) {
		if maxKeys < 1 {
			c.fail("WithDenyCache: maxKeys must be >= 1, got %d", maxKeys)
		}
		c.denyKeys = maxKeys
	}
}

// WithLocalFallback sets how the Limiter decides while Redis cannot answer
// (errors, timeouts, an open circuit). It decides in process, each key
// getting this instance's share of its Limit, so that the instances
// together stay within a bound of it. instances is n, the Limiters sharing the limits;
// 0 learns it from Redis while Redis answers (each Limiter registers
// under "<prefix>:fleet"), and assumes 64 before Redis has ever answered.
// maxKeys sizes its memory: keys active at once. The bounds per
// algorithm and their tests are in docs/limits.md ("The local
// fallback"). Results carry Fallback: true. WithLocalFallback(0, 0) turns
// it off: Redis' error goes back to the caller, and under httplimit's
// FailOpen requests are then served with no limit: the one way to ask
// for that. Default: on, instances learned, maxKeys 4096.
func WithLocalFallback(instances, maxKeys int) Option {
	return func(c *config) {
		switch {
		case instances == 0 && maxKeys == 0:
			c.fallback = nil
		case instances < 0 || maxKeys < 1:
			c.fail("WithLocalFallback: want instances >= 0 and maxKeys >= 1 (or both 0: off), got %d and %d", instances, maxKeys)
		default:
			c.fallback = &fallbackConfig{instances: instances, maxKeys: maxKeys}
		}
	}
}

// WithLogger sets where the Limiter logs. It logs Redis failing, the
// circuit opening, Redis answering again, and a Redis that may evict its
// keys, once per change of state, never per request (a failure at most
// once per 10s when failures and successes alternate, as on a Cluster with
// one master down). nil turns logging off. Default: slog.Default(), as it
// is when a record is logged.
func WithLogger(log *slog.Logger) Option {
	return func(c *config) {
		c.log = func() *slog.Logger { return log }
	}
}

// WithBatching bounds how many decisions of concurrent callers go into one
// script call. A caller whose group of keys has fewer than 4 calls in
// flight makes its own at once, so a lone request never waits for company;
// beyond that, callers queue, and each call that returns takes the queue
// into the next call, decided in order at one Redis instant exactly as
// separate calls would be: under load Redis runs one script for many
// decisions. A group is every key on a single Redis
// (a *redis.Client, Sentinel included), every key of one hash slot on a
// Cluster, and one key on other clients (a Ring). max 1 turns batching off.
// Default: 128.
func WithBatching(max int) Option {
	return func(c *config) {
		if max < 1 {
			c.fail("WithBatching: max must be >= 1, got %d", max)
		}
		c.batch = max
	}
}

func init() { clock.SetWith(withClock) }

// withClock sets the application clock the Limiter reads to find the
// calendar windows of a Limit with a Calendar (which the scripts then
// hold to Redis' own clock, within a window either way): for tests that
// move Redis' clock (redlimittest does, through clock.With), so the two
// agree. Decisions are timed by Redis alone; the deny cache, leases and
// the local fallback keep the process' own clock, and Result.At reads this
// one where Redis' is not known. Default: time.Now.
func withClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			c.fail("clock.With: nil clock")
		}
		c.clock = now
	}
}

// WithStaggeredWindows starts each key's FixedWindow windows at an offset
// of its own within the Period. The offset is a hash of its Redis key, so
// that a million keys of one Limit do not all reset at one instant: still
// aligned on Redis' clock, and the same on every instance that staggers.
// Their state is apart from an unstaggered
// window's, so every instance of a fleet must agree. Calendar windows are
// not staggered. The local fallback counts them as aligned windows.
func WithStaggeredWindows() Option {
	return func(c *config) { c.stagger = true }
}

// WithLeases lets the Limiter take a slice of a busy key's quota from Redis
// in one call and spend it in process, for limits of thousands of requests
// per second and more, where one round trip per request is the cost. It
// applies to FixedWindow and SlidingWindowCounter limits: a lease lives
// only inside the window its units were counted in. A lease holds at most
// share of the Limit's capacity and lasts until its window ends, or 250ms.
// Units are counted in Redis before they are spent, so the instances
// together never admit more than the limit. At most 4096 keys are leased
// at once. Sizing, expiry, Reset and the bound on units held unused are in
// docs/limits.md#leases-in-detail. Default: off.
func WithLeases(share float64) Option {
	return func(c *config) {
		if !(share > 0 && share <= 0.5) {
			c.fail("WithLeases: share must be in (0, 0.5], got %v", share)
		}
		c.leaseShare = share
	}
}

// WithReplicaAcks makes every Redis call of the Limiter wait until
// replicas replicas hold its writes, or timeout (WAIT, sent with the
// script on one connection, in the same round trip): a failover then
// loses no admitted decision. A call they do not acknowledge in time is
// a Redis fault, answered like a timeout (the fallback or the fail
// policy), although the master took its units. It costs a round trip to
// a replica per call; see docs/operations.md for the loss without it and
// BENCHMARKS.md for the cost. timeout must be at least 1ms and below the
// Limiter's timeout. Default: off (replication is asynchronous).
func WithReplicaAcks(replicas int, timeout time.Duration) Option {
	return func(c *config) {
		if replicas < 1 || timeout < time.Millisecond {
			c.fail("WithReplicaAcks: want replicas >= 1 and a timeout of 1ms or more, got %d and %v", replicas, timeout)
		}
		c.acks = replicaAcks{n: replicas, timeout: timeout}
	}
}
