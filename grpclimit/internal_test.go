package grpclimit

import (
	"context"
	"net"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// TestHTTPStatus: the HTTP status each gRPC code stands for, in Finish.
func TestHTTPStatus(t *testing.T) {
	want := map[codes.Code]int{
		codes.OK: 200, codes.InvalidArgument: 400, codes.Unauthenticated: 401,
		codes.PermissionDenied: 403, codes.NotFound: 404, codes.ResourceExhausted: 429,
		codes.Unavailable: 503, codes.DeadlineExceeded: 504,
	}
	for code := codes.OK; code <= codes.Unauthenticated; code++ {
		w, ok := want[code]
		if !ok {
			w = 500
		}
		if got := httpStatus(code); got != w {
			t.Errorf("httpStatus(%v) = %d, want %d", code, got, w)
		}
	}
}

// TestRequest: what a Policy reads of a call.
func TestRequest(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
		"x-forwarded-for", "192.0.2.1", "x-forwarded-for", "192.0.2.2", "x-api-key", "k"))
	q := &request{ctx: ctx, method: "/pkg.Service/Method"}
	if got := q.Header("X-Forwarded-For"); !slices.Equal(got, []string{"192.0.2.1", "192.0.2.2"}) {
		t.Errorf("Header(X-Forwarded-For) = %q, want both values in order", got)
	}
	if got := q.Header("x-missing"); got != nil {
		t.Errorf("Header(x-missing) = %q, want nil", got)
	}
	if q.Method() != "POST" || q.Route() != "/pkg.Service/Method" || q.RemoteAddr() != "" {
		t.Errorf("Method %q, Route %q, RemoteAddr %q; want POST, the full method, and no peer", q.Method(), q.Route(), q.RemoteAddr())
	}
	q.ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443}})
	if got := q.RemoteAddr(); got != "[2001:db8::1]:443" {
		t.Errorf("RemoteAddr = %q, want [2001:db8::1]:443", got)
	}
}
