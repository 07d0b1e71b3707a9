// Package core is redlimit's rate-limiting engine: many instances of a
// service share one limit per key through Redis, and every decision is an
// atomic Lua script run inside Redis. It knows nothing of HTTP; the
// httplimit package and the framework adapters build on it.
//
// # The algorithms
//
// A Limit is Rate units per Period, enforced by one of six algorithms. A
// unit is a request, or a share of its cost (Allow's n). All of them take time
// from Redis (TIME, in microseconds), never from the app servers, so
// instances with skewed clocks agree; none moves back in time when Redis'
// clock does (after a failover, say), so no fresh quota is handed out; each
// keeps its state with a TTL just long enough for it to matter; and no call
// does work that grows with the cost. Only SlidingWindow's log and
// Concurrency's permits grow with the rate, and a call's work on them is
// bounded: the log never holds more than 1025 entries, and a permit is
// found in O(log n) of the n held.
//
// TokenBucket (the default) is a bucket of capacity Burst (default Rate),
// initially full, refilled continuously at Rate per Period: fractions of a
// token count, so 3 per second means one token every 333.334ms, and 1 per
// hour works as well as 100000 per second. A request of cost n takes n
// tokens if there are n. Pick it for APIs: it allows short bursts and
// enforces the average rate. It is the arithmetic of x/time/rate's Limiter,
// shared across processes.
//
// SlidingWindow admits at most Rate units in any window of length Period.
// It logs each admitted request as an entry weighted by its cost, with
// running totals, so memory grows with the requests in the window, never
// with their cost. For a Rate up to 1024 each request is an entry of its
// own and the bound is exact. Above, a request joins the newest entry when
// both fall in one 1024th of the Period, and a unit leaves the window up to
// Period/1024 late; a log that refunds left with more than 1024 entries has
// each request join the newest entry, later still. So the log never holds
// more than 1025 entries, a call's work is bounded whatever the rate, and
// every error is on the strict side. Pick it when the bound must be exact.
//
// SlidingWindowCounter approximates SlidingWindow in constant memory: the
// count of the current fixed window plus the previous window's count
// weighted by how much of it the sliding window still covers. Pick it for
// large limits (10000 per hour per user) where a log would be big.
//
// FixedWindow counts per window aligned to the Unix epoch (multiples of
// Period) on Redis' clock, or, with Limit.Calendar, per calendar day, ISO
// week or month in Limit.Location (10000 per month, renewed at local
// midnight on the 1st, whatever the month's length or a daylight-saving
// change). It is the cheapest, and the coarsest: up to 2*Rate can pass
// around a window boundary. Over a Period, a window ends when its key
// expires: a decision inside it is INCRBY and PTTL, as cheap as a window
// that starts at a key's first request, and its waits are whole
// milliseconds, up to 2 ms longer than exact (Redis keeps a key through
// the millisecond its expiry names). A Period change takes effect when the
// current window ends.
//
// LeakyBucket shapes instead of only limiting: requests leave at an even
// pace of Rate per Period, each admitted with the Delay it must wait, while
// at most Burst units are queued; Limit.MaxDelay caps the wait. Pick it in
// front of a fragile downstream.
//
// Concurrency limits requests in flight rather than their rate: at most
// Rate at once per key, each holding a permit from Allow until Refund
// gives it back (or Renew keeps it); a permit whose holder died lapses
// after Period, so a crash never shrinks the limit for longer. Work per
// call is O(log N) in the N permits held.
//
// Each algorithm keeps its own state: moving a key to another algorithm
// starts it with a whole quota under the new one. A change of Rate,
// Period or Burst under the same algorithm takes effect on the next call,
// without a reset: the windows and the leaky bucket carry what was spent
// over, the token bucket the tokens it holds, capped at the new capacity
// (TestLimitChangeCarriesOver).
//
// # Using it
//
// A Limiter is safe for concurrent use; make one per Redis client and share
// it. Every decision takes one or more Rules, a key under a Limit
// (core.PerSecond(10).For("user:42")), and decides them together, all or
// nothing: several Limits of one key (10 per second and 1000 per hour),
// or several keys (a user's and its organisation's). Allow decides and
// takes; AllowAtMost takes what fits; Peek reports without taking; Refund
// gives back what a Result took, and Settle charges what a request really
// cost once it is known (beyond what is left, as a debt later requests
// wait out); Renew keeps Concurrency permits (these three take the Result
// alone, which carries its Rules); Reset forgets a key; Wait
// blocks until admitted. A denial is a Result with Allowed false, never an
// error: errors are for invalid arguments and Redis failures. Concurrent
// decisions of one group of keys share script calls (see WithBatching),
// each decided exactly as it would be alone.
//
// On Redis 7 the scripts are one function library, loaded once per node
// (FUNCTION LOAD) and called with FCALL; elsewhere (older or managed
// Redis, miniredis) each decision is an EVALSHA of the same Lua. A node
// that lost the library (a restart, FUNCTION FLUSH) is answered by the
// script at once while the library is loaded again.
//
// Keys are untrusted input, and any bytes work: they are escaped, so that
// no key reaches another's state, and long ones are hashed. A key's hash
// tag, as Redis defines it ("{org:7}" in "{org:7}:user:42"), chooses its
// Cluster slot, so that the keys of one decision can share one (see Rule);
// a client that sends braces in its key moves only its own key's slot,
// which any key could do by its hash.
//
// Redis should not evict the Limiter's keys: an evicted key is a fresh
// quota. Ping and Health report a Redis that may (see Health.MayEvict).
package core
