// Package core is redlimit's rate-limiting engine: it decides inside Redis,
// atomically, whether a key may spend units under a Limit, so every
// instance of a service shares one limit per key. It knows nothing of HTTP.
//
//	limiter, err := core.New(rdb) // one per Redis client, shared
//	res, err := limiter.Allow(ctx, 1, core.PerSecond(10).For("user:42"))
//	if err == nil && !res.Allowed { ... } // a denial is a Result, not an error
//
// The six algorithms and their bounds, every call (AllowAtMost, Peek, Wait,
// Refund, Settle, Renew, Reset), and how keys reach Redis and its Cluster
// slots: see docs/limits.md and docs/operations.md in the repository.
package core
