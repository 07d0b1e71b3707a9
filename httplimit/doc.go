// Package httplimit is the HTTP decision step every redlimit adapter
// shares: it keys a request, asks a core.Limiter, applies the fail policy,
// and says what to answer, with which status, headers and body. The
// adapters (nethttplimit, ginlimit, echolimit, echov5limit, fiberlimit,
// fiberv3limit) only read their framework's request and write this
// package's answer back, so they behave the same, byte for byte.
//
// A Config compiles once into a Policy:
//
//	policy, err := httplimit.New(httplimit.Config{
//		Limiter: limiter,               // a *core.Limiter
//		Limit:   core.PerMinute(100),
//		Key:     httplimit.KeyFirst(httplimit.KeyByHeader("X-API-Key"), byIP),
//	})
//
// and an adapter serves it (nethttplimit.New(policy), ginlimit.New(policy),
// ...). The same Policy can check a request from inside a handler, for
// limits that depend on the payload (each adapter's Check), and reset a
// key after a successful login (each adapter's Reset).
//
// # Keys
//
// A request is limited by the key its KeyFunc returns: the client IP by
// default (KeyByIP), a header (KeyByHeader), the route (KeyByRoute), the
// first of several (KeyFirst), several together (KeyJoin), or the user an
// earlier middleware stored (each adapter's KeyByContextValue; KeyByLocals
// in Fiber). A request that cannot be keyed is refused with 400, never
// served unlimited, unless Config.ServeUnkeyed says so: leaving a header
// out must not be a way around the limit. A key a client chooses (an API
// key the app has not verified) is a limit per value: verify it first, or
// limit the client IP too.
//
// The client IP is the address of the peer that opened the connection;
// X-Forwarded-For and its kin are read only from the trusted proxies that
// ClientIP names, because any client can send them.
//
// # Responses
//
// A response the Limiter decided, allowed or denied, carries the fields
// of Config.Headers: X-RateLimit-Limit (the quota's capacity),
// X-RateLimit-Remaining and X-RateLimit-Reset (the Unix epoch second at
// which the quota is whole again, rounded up) by default, or the IETF
// draft's RateLimit-Policy and RateLimit fields, or both, or none, under
// names you choose. A denied request gets 429, Retry-After in whole seconds
// (rounded up, at least 1, never early) and
// {"error":"rate limit exceeded","retry_after":N}. When Redis fails or is
// slower than the Limiter's timeout, the request is served without
// rate-limit headers (by default) or answered 503 with Retry-After: 1 and
// {"error":"rate limiter unavailable"} (Config.FailClosed).
// A cost that can never pass is refused with 503 even when failing open.
package httplimit
