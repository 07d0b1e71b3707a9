package grpclimit

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/redlimit/redlimit/core"
)

// UnaryClientInterceptor returns a client interceptor that keeps unary
// calls within an upstream's quota, shared by every process on l's Redis.
// Each call first waits for a unit with l.Wait(ctx, 1, limit.For(key)); it
// is never made without one (TestClient). A wait that would outlast the
// deadline fails at once with codes.ResourceExhausted and a RetryInfo of
// that wait (TestClientWaitTooLongForDeadline); a context that ends while
// waiting gives DeadlineExceeded or Canceled. While Redis cannot answer,
// l's local fallback (on by default) lets each process call within its
// share; a Limiter that fails (its fallback off, or closed) gives
// Unavailable (TestClientRedisTimeout).
//
// It panics, at start-up, if l is nil, key is empty or limit is invalid.
func UnaryClientInterceptor(l *core.Limiter, key string, limit core.Limit) grpc.UnaryClientInterceptor {
	switch {
	case l == nil:
		panic("grpclimit: UnaryClientInterceptor: nil Limiter")
	case key == "":
		panic("grpclimit: UnaryClientInterceptor: empty key")
	}
	if err := limit.Validate(); err != nil {
		panic("grpclimit: UnaryClientInterceptor: " + err.Error())
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, err := l.Wait(ctx, 1, limit.For(key)); err != nil {
			return waitStatus(ctx, r, err).Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// waitStatus is the status of a call whose wait failed with err, and r.
func waitStatus(ctx context.Context, r core.Result, err error) *status.Status {
	switch {
	case errors.Is(err, core.ErrWaitExceedsDeadline):
		// Checked first: a deadline that has passed since Wait gave up
		// does not make the refusal a timeout. The RetryInfo holds the
		// whole wait to the microsecond: whole seconds would hold back a
		// caller of a 100 per second quota a hundred times too long, and
		// a caller that retries after it is never early, assuming no
		// other traffic.
		st := status.New(codes.ResourceExhausted, "grpclimit: "+err.Error())
		delay := durationpb.New(max(r.RetryAfter, time.Microsecond))
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: delay}); err == nil {
			return withInfo
		}
		return st // not reached: a RetryInfo always marshals
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err())
	case errors.Is(err, core.ErrUnavailable):
		// Redis failed, or was slower than the Limiter's timeout: not the
		// caller's deadline, so not codes.DeadlineExceeded.
		return status.New(codes.Unavailable, "grpclimit: rate limiter unavailable: "+err.Error())
	}
	// The Limiter could not decide for a reason of its user's (closed): as
	// a server's Status for OutcomeFailedClosed.
	return status.New(codes.Unavailable, "grpclimit: "+err.Error())
}
