package grpclimit

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/redlimit/redlimit/httplimit"
)

// request is the httplimit.Request of a gRPC call: its context, and the
// full method name the interceptor was given.
type request struct {
	ctx    context.Context
	method string
}

// Context is the call's context; it carries the incoming metadata, the
// peer and, inside a handler, the call's stream (grpc.Method).
func (q *request) Context() context.Context { return q.ctx }

// RemoteAddr is the address of the peer that opened the connection
// (google.golang.org/grpc/peer), "ip:port" over TCP; "" when the context
// has none. Over a Unix socket or an in-memory connection it is no IP
// address, so httplimit.KeyByIP cannot key the call.
func (q *request) RemoteAddr() string {
	p, ok := peer.FromContext(q.ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	return p.Addr.String()
}

// Header returns the values of the named incoming metadata, in order (nil
// if absent). Metadata names are lower case in gRPC, so the name is
// matched whatever its case: "X-Forwarded-For" reads x-forwarded-for.
func (q *request) Header(name string) []string {
	return metadata.ValueFromIncomingContext(q.ctx, strings.ToLower(name))
}

// Method is "POST": every gRPC call is an HTTP/2 POST.
func (q *request) Method() string { return "POST" }

// Route is the full method name, "/package.Service/Method".
func (q *request) Route() string { return q.method }

// KeyByMethod keys calls by their full method name
// ("/package.Service/Method"), so each method has one limit shared by all
// clients. httplimit.KeyJoin it with a client key for one limit per client
// per method. It is httplimit.KeyByRoute, since a call's route is its
// method. The client names the method but cannot vary it beyond those the
// server registers: grpc-go answers an unknown one Unimplemented before any
// interceptor runs, unless the server has a grpc.UnknownServiceHandler,
// which lets every invented name through (key by the client as well there).
func KeyByMethod() httplimit.KeyFunc { return httplimit.KeyByRoute() }

// KeyByMetadata keys calls by the value of an incoming metadata entry (an
// API key, a tenant). It takes the entry's first value, without leading or
// trailing spaces and tabs. A call without it cannot be keyed by this
// function, and is refused with codes.InvalidArgument unless another key
// function takes over
// (httplimit.KeyFirst(grpclimit.KeyByMetadata("x-api-key"), byIP)). The key
// is the one httplimit.KeyByHeader(name) gives an HTTP request, so an API
// served over both, under one Policy name, has one limit per value.
//
// The value is whatever the client sends: verify it before the limiter
// runs (authenticate the API key in an earlier interceptor), or a client
// that sends a new value with every call gets a new limit with each.
func KeyByMetadata(name string) httplimit.KeyFunc {
	return httplimit.KeyByHeader(strings.ToLower(name))
}
