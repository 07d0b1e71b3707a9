package grpclimit

import (
	"context"
	"errors"
	"net/http"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/redlimit/redlimit/httplimit"
)

// Option configures the interceptors made by UnaryServerInterceptor and
// StreamServerInterceptor.
type Option func(*config)

type config struct {
	policy *httplimit.Policy
	skip   func(ctx context.Context, fullMethod string) bool
	deny   func(ctx context.Context, d httplimit.Decision) error
}

// WithSkip exempts the calls it reports true for (health checks, internal
// callers): they are neither counted nor given rate-limit fields. It is
// given the call's context and full method name.
func WithSkip(f func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithDenyHandler answers the calls that do not proceed, instead of
// Status(d). The call ends with the error it returns (a status error, say
// status.Error, or any error, which gRPC sends as codes.Unknown; nil stands
// for Status(d), since the handler does not run). The rate-limit fields and
// retry-after are already the call's trailers when it runs, and d.Outcome
// says why (httplimit.OutcomeDenied, OutcomeInFlight, OutcomeFailedClosed,
// OutcomeNoKey, or OutcomeCanceled when the client left during the decision
// or a LeakyBucket wait).
func WithDenyHandler(f func(ctx context.Context, d httplimit.Decision) error) Option {
	return func(c *config) { c.deny = f }
}

func newConfig(name string, p *httplimit.Policy, opts []Option) *config {
	if p == nil {
		panic("grpclimit: " + name + ": nil Policy")
	}
	c := &config{policy: p}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// UnaryServerInterceptor returns an interceptor that limits unary calls as p
// says (grpc.UnaryInterceptor, grpc.ChainUnaryInterceptor). A call that
// proceeds carries the rate-limit fields as headers, one that does not gets
// Status(d) and the fields as trailers. It panics, at start-up, if p is nil.
func UnaryServerInterceptor(p *httplimit.Policy, opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig("UnaryServerInterceptor", p, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if c.skip != nil && c.skip(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		var resp any
		err := c.serve(ctx, info.FullMethod, unarySink(ctx), func(ctx context.Context, _ *fields) error {
			var err error
			resp, err = handler(ctx, req)
			return err
		})
		return resp, err
	}
}

// StreamServerInterceptor returns an interceptor that limits streaming calls
// as p says, with one decision per stream when it opens. Install it with
// grpc.StreamInterceptor or grpc.ChainStreamInterceptor; what the stream
// then sends or receives is not counted. A stream that proceeds carries the
// rate-limit fields as headers, one that does not gets Status(d) and the
// fields as trailers; an InFlight permit (httplimit.Config.InFlight) is held
// until the handler returns. It panics, at start-up, if p is nil.
func StreamServerInterceptor(p *httplimit.Policy, opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig("StreamServerInterceptor", p, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if c.skip != nil && c.skip(ss.Context(), info.FullMethod) {
			return handler(srv, ss)
		}
		return c.serve(ss.Context(), info.FullMethod, streamSink(ss), func(ctx context.Context, f *fields) error {
			return handler(srv, &serverStream{ServerStream: ss, ctx: ctx, fields: f})
		})
	}
}

// serve decides the call whose context is ctx and, if it proceeds, runs
// next with the context to serve it with, and the fields to send before
// the handler's first message when this interceptor owns them (nil when
// an outer one does). Only the owner, the outermost interceptor of this
// package on the call, sends the fields.
func (c *config) serve(ctx context.Context, method string, out sink, next func(context.Context, *fields) error) error {
	f, ctx, shared := fieldsOf(ctx, out)
	owned := f
	if shared {
		owned = nil
	} else {
		defer f.end()
	}
	var err error
	d := c.policy.Serve(&request{ctx: ctx, method: method}, f, func(ctx context.Context, _ bool) int {
		err = next(ctx, owned)
		return httpStatus(status.Code(err))
	})
	if d.Proceed() {
		return err
	}
	f.refuse()
	f.end() // the trailers are set before the deny handler runs
	if c.deny != nil {
		if err := c.deny(ctx, d); err != nil {
			return err
		}
	}
	return Status(d).Err()
}

// serverStream is the handler's stream: its context carries the decision
// (for Policy.ReportCost) and the call's fields, which go out, when this stream's
// interceptor owns them, as headers before its first message.
type serverStream struct {
	grpc.ServerStream
	ctx    context.Context
	fields *fields // nil: an outer interceptor sends them
}

func (s *serverStream) Context() context.Context { return s.ctx }

func (s *serverStream) SendHeader(md metadata.MD) error {
	if s.fields != nil {
		s.fields.send()
	}
	return s.ServerStream.SendHeader(md)
}

func (s *serverStream) SendMsg(m any) error {
	if s.fields != nil {
		s.fields.send()
	}
	return s.ServerStream.SendMsg(m)
}

// Status is the status a call ends with when d does not let it proceed, and
// nil (OK) when it does. A call denied (for its rate or its InFlight permit)
// gets codes.ResourceExhausted "rate limit exceeded", and one the Limiter
// failed closed codes.Unavailable "rate limiter unavailable", each with a
// google.rpc.RetryInfo whose retry_delay is the retry-after trailer:
// d.RetryAfter() in whole seconds, rounded up, at least 1. A call that could
// not be keyed gets codes.InvalidArgument "missing rate limit key"; one
// whose context ended first, codes.Canceled or codes.DeadlineExceeded
// (TestStatus).
func Status(d httplimit.Decision) *status.Status {
	if d.Proceed() {
		return nil
	}
	var st *status.Status
	switch d.Outcome {
	case httplimit.OutcomeDenied, httplimit.OutcomeInFlight:
		st = status.New(codes.ResourceExhausted, "rate limit exceeded")
	case httplimit.OutcomeFailedClosed:
		st = status.New(codes.Unavailable, "rate limiter unavailable")
	case httplimit.OutcomeNoKey:
		return status.New(codes.InvalidArgument, "missing rate limit key")
	default: // OutcomeCanceled: the client is gone, or out of time
		if errors.Is(d.Err, context.DeadlineExceeded) {
			return status.New(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
		return status.New(codes.Canceled, context.Canceled.Error())
	}
	delay := durationpb.New(time.Duration(d.RetryAfter()) * time.Second)
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: delay}); err == nil {
		return withInfo
	}
	return st // not reached: a RetryInfo always marshals
}

// httpStatus is the HTTP status a gRPC code stands for in
// httplimit.Config.CountIf, as grpc-gateway and Google's APIs map them.
func httpStatus(code codes.Code) int {
	switch code {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// Check decides the call whose handler ctx is at cost n under p, from inside
// the handler. It is for limits that depend on what the call holds (the
// items of a batch, the bytes of an upload). It adds the rate-limit fields
// to the call's (as headers if they have not been sent yet, else as
// trailers) and returns nil when the handler should go on, else the error
// for the handler to return: the decision's Status, with the fields as
// trailers.
func Check(ctx context.Context, p *httplimit.Policy, n int) error {
	method, _ := grpc.Method(ctx)
	f, ctx, shared := fieldsOf(ctx, unarySink(ctx))
	w := &held{f: f}
	defer w.unlock() // (if Check panicked)
	d := p.Check(&request{ctx: ctx, method: method}, w, n)
	if !d.Proceed() {
		w.refuse()
	}
	w.unlock()
	if !shared {
		f.end()
	}
	if d.Proceed() {
		return nil
	}
	return Status(d).Err()
}

// Reset forgets the state of the key of the call whose handler ctx is
// under p, so its quota is whole again (after a successful login, say).
func Reset(ctx context.Context, p *httplimit.Policy) error {
	method, _ := grpc.Method(ctx)
	return p.Reset(&request{ctx: ctx, method: method})
}
