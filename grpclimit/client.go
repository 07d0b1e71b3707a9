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

// UnaryClientInterceptor returns a client interceptor that keeps the
// unary calls of every process sharing l's Redis within one quota of an
// upstream (a partner API's 100 calls per second for the whole fleet): each
// call first waits with l.Wait(ctx, 1, limit.For(key)), sleeping for the
// RetryAfter Redis returns, and is made once admitted.
//
// A call is never made without a unit of the quota. One whose wait would
// outlast its deadline fails at once with codes.ResourceExhausted and a
// google.rpc.RetryInfo detail whose retry_delay is the wait it would have
// had (core.ErrWaitExceedsDeadline's Result.RetryAfter, to the
// microsecond: a RetryInfo holds any duration, and whole seconds would
// hold back a caller of a 100 per second quota a hundred times too long),
// so a caller that retries after it is never early, assuming no other
// traffic. One whose context ends while it waits fails then, with
// codes.DeadlineExceeded or codes.Canceled. When the Limiter fails, the
// call fails too, with codes.Unavailable, as a server's Status does: for
// Redis down, slower than the Limiter's timeout, or the circuit open
// (errors matching core.ErrUnavailable), and for a closed Limiter. A
// quota an upstream enforces is not one to exceed while Redis is away:
// give l core.WithLocalFallback to keep calling, each process within its
// share of the limit, while Redis is down.
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
		// does not make the refusal a timeout.
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
