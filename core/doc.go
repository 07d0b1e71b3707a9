// Package core is redlimit's rate-limiting engine: many instances of a
// service share one limit per key through Redis, and every decision is an
// atomic Lua script run inside Redis. It knows nothing of HTTP; the
// httplimit package and the framework adapters build on it.
//
// A Limit is Rate units per Period, enforced by one of six algorithms:
// TokenBucket (the default: bursts up to Burst, the average rate
// enforced), SlidingWindow (at most Rate in any window of Period),
// SlidingWindowCounter (its approximation in constant memory),
// FixedWindow (per aligned window, or per calendar day, week or month),
// LeakyBucket (an even pace, each request told the Delay to wait) and
// Concurrency (requests in flight, each holding a permit). A unit is a
// request, or a share of its cost. Every algorithm takes time from Redis,
// never from the app servers, keeps its state with a TTL, and does no work
// that grows with the cost. docs/limits.md has each one's bounds, cost and
// memory.
//
// A Limiter is safe for concurrent use; make one per Redis client and
// share it. Every decision takes one or more Rules, a key under a Limit
// (core.PerSecond(10).For("user:42")), and decides them together, all or
// nothing. Allow decides and takes; AllowAtMost takes what fits; Peek
// reports without taking; Wait blocks until admitted; Refund gives back
// what a Result took, Settle charges what a request really cost, and Renew
// keeps Concurrency permits (each takes the Result alone); Reset forgets a
// key. A denial is a Result with Allowed false, never an error: errors
// are for invalid arguments and Redis failures.
//
// Keys are untrusted input, and any bytes work: they are escaped, so that
// no key reaches another's state, and long ones are hashed. A key's hash
// tag ("{org:7}" in "{org:7}:user:42") chooses its Cluster slot (see
// Rule). Redis should not evict the Limiter's keys: an evicted key is a
// fresh quota (see Health.MayEvict).
package core
