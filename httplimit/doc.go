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
// ...); each adapter's Check decides inside a handler, and its Reset
// forgets a key (after a successful login).
//
// A request is limited by the key its KeyFunc returns: the client IP by
// default (KeyByIP, which reads X-Forwarded-For only from the proxies
// ClientIP trusts), a header, the route, or a combination. A request that
// cannot be keyed is refused with 400, never served unlimited, unless
// Config.ServeUnkeyed says so. A denied request gets 429 with Retry-After
// and the rate-limit fields of Config.Headers; docs/http.md has every
// answer, and what happens when Redis fails.
package httplimit
