// Package grpclimit is rate limiting for gRPC servers, and their outbound
// calls, that shares each limit across every instance of a service through
// Redis.
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(policy)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(policy)),
//	)
//
// The policy is the httplimit.Policy the HTTP adapters take, keyed by the
// peer's IP by default. How calls map to requests, statuses and metadata:
// see docs/http.md#grpc in the repository.
package grpclimit
