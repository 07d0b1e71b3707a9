// Package core is redlimit's framework-agnostic rate limiter: many
// instances of a service share one limit per key through Redis, and every
// decision is one atomic Lua script run inside Redis.
//
// # The algorithms
//
// A Limit is Rate requests per Period, enforced by one of five algorithms.
// All of them take time from Redis (TIME, in microseconds), never from the
// app servers, so instances with skewed clocks agree; none moves back in
// time when Redis' clock does (after a failover, say), so no fresh burst is
// handed out; each keeps one key per caller with a TTL just long enough for
// its state to matter.
//
// TokenBucket (the default) is a bucket of capacity Burst (default Rate),
// initially full, refilled continuously at Rate per Period: fractions of a
// token count, so 3 per second means one token every 333.334ms, and 1 per
// hour works as well as 100000 per second. A request of cost n takes n
// tokens if there are n. Pick it for APIs: it allows short bursts and
// enforces the average rate. It is the same arithmetic as x/time/rate's
// Limiter, shared across processes.
//
// SlidingWindow admits at most Rate in any window of length Period,
// exactly: it logs each admitted unit in a sorted set, so its memory grows
// with Rate (about 20 bytes a unit up to 128 units, about 118 beyond).
// One member per unit, rather than one weighted member per request as
// Redisson keeps, makes counting the window a ZCOUNT and finding the exact
// wait for n units a rank lookup, both O(log N), where weights would need a
// sum over the whole window on every call; the price is n members for a
// request of cost n. Pick it when the bound must be exact and Rate is
// modest.
//
// SlidingWindowCounter approximates SlidingWindow in constant memory: the
// count of the current fixed window plus the previous window's count
// weighted by how much of it the sliding window still covers. Pick it for
// large limits (10000 per hour per user) where a log would be big.
//
// FixedWindow counts per calendar-aligned window (epoch multiples of
// Period). It is the cheapest, and the coarsest: up to 2*Rate can pass
// around a window boundary.
//
// LeakyBucket shapes instead of only limiting: requests leave at an even
// pace of Rate per Period, each admitted with the Delay it must wait, while
// at most Burst units are queued; Limit.MaxDelay caps the wait. Pick it in
// front of a fragile downstream.
//
// # Using it
//
// A Limiter is safe for concurrent use; make one per Redis client and share
// it. Allow and AllowN decide and consume; Peek reports without consuming;
// Reset forgets a key; Wait blocks until admitted; AllowLayers checks
// several limits of one key atomically. A denial is a Result with Allowed
// false, never an error: errors are for invalid arguments and Redis
// failures. Policy turns decisions into HTTP answers for the adapters.
//
// Keys are untrusted input: they are escaped so a caller cannot choose the
// Redis Cluster hash tag, long keys are hashed, and any bytes work.
package core
