// Package grpclimit is Redis-backed rate limiting for gRPC servers (and
// their outbound calls): every instance of a service shares one limit per
// key.
//
//	policy, err := httplimit.New(httplimit.Config{Limiter: limiter, Limit: core.PerSecond(10)})
//	if err != nil { ... }
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(policy)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(policy)),
//	)
//
// Every decision is httplimit's (see httplimit.Policy), the same Policy the
// HTTP adapters take: this package only reads the call and writes the
// decision back, so keys, client IPs, limits, layers, the fail policy and
// the rate-limit fields are those the httplimit documentation describes.
//
// # What a Policy reads of a call
//
// A call is an httplimit.Request whose Context is the call's context,
// whose RemoteAddr is the peer address (google.golang.org/grpc/peer),
// whose Header is the incoming metadata of that name (matched in any
// case: metadata names are lower case), whose Method is "POST" and whose
// Route is the full method name, "/package.Service/Method". So the default
// key is the peer's IP; httplimit.KeyByIP with ClientIP.TrustedProxies
// reads x-forwarded-for (or the metadata ClientIP.Header names) only from
// the proxies it trusts; KeyByMetadata keys by a metadata value and
// KeyByMethod by the method. A peer that is no IP address (a Unix socket,
// an in-memory connection) cannot be keyed by IP.
//
// # Answers
//
// A call that proceeds carries the rate-limit fields of Config.Headers as
// header metadata, in lower case: x-ratelimit-limit, x-ratelimit-remaining
// and x-ratelimit-reset by default. A call that does not proceed ends with
// Status(d), and carries them as trailers, with retry-after when it may
// try again:
//
//	outcome                  code                retry-after, RetryInfo
//	denied (rate, InFlight)  ResourceExhausted   d.RetryAfter() s, rounded up, at least 1
//	Redis fault, fail closed Unavailable         1 s
//	no key                   InvalidArgument     none
//	context ended            Canceled or DeadlineExceeded
//
// The google.rpc.RetryInfo detail's retry_delay is the retry-after
// trailer, so a client that waits it out is never early. A Redis fault
// is decided by the Limiter's local fallback (served without rate-limit
// fields only if it is off), unless httplimit.Config.FailClosed.
// WithDenyHandler answers refusals in your own way.
//
// Several Policies on one server compose as they do over HTTP
// (grpc.ChainUnaryInterceptor with one interceptor each, or Check inside a
// handler): the call carries one set of fields, those of the strictest
// Policy, and every IETF member. Since gRPC metadata can only be added to,
// the outermost interceptor of this package collects them and sends them
// as headers when the handler sends its first message or returns, or as
// trailers when the call is refused or the headers went out without them
// (a handler's grpc.SendHeader); what a Check adds after the headers went
// out follows in the trailers.
//
// # The end of a call
//
// The features of a Policy that need the end of a call (Config.CountIf,
// Config.InFlight, Config.Settle) hear it when the handler returns, with
// the HTTP status the call's code stands for: OK 200, InvalidArgument 400,
// Unauthenticated 401, PermissionDenied 403, NotFound 404,
// ResourceExhausted 429, Unavailable 503, DeadlineExceeded 504, any other
// code (or a panic) 500. So a CountIf of status >= 400 counts the calls
// that fail. The call's answer then waits for that last Redis round trip
// (bounded by the Limiter's timeout), so that a client that calls again
// at once finds its InFlight permit given back. A stream is decided once,
// when it opens, and holds an InFlight permit until its handler returns.
package grpclimit
