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
// decision back. A call is an httplimit.Request whose RemoteAddr is the
// peer, whose Header is the incoming metadata (in any case) and whose
// Route is the full method name, so the default key is the peer's IP;
// KeyByMetadata keys by a metadata value and KeyByMethod by the method.
//
// A call that proceeds carries the rate-limit fields as header metadata,
// in lower case. One that does not ends with Status(d) (ResourceExhausted
// with a RetryInfo detail when denied, Unavailable when failing closed,
// InvalidArgument without a key) and carries them as trailers. CountIf,
// InFlight and Settle hear the call's code as an HTTP status (OK 200,
// NotFound 404, any unlisted code 500); a stream is decided once, when it
// opens. The whole mapping: docs/http.md#grpc.
package grpclimit
