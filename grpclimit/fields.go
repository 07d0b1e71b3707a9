package grpclimit

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// sink is where a call's fields go: its header and its trailer.
type sink struct {
	setHeader  func(metadata.MD) error
	setTrailer func(metadata.MD)
}

// unarySink writes through the call's stream in ctx (grpc.SetHeader),
// which a unary call has, and so does a streaming handler's context.
func unarySink(ctx context.Context) sink {
	return sink{
		setHeader:  func(m metadata.MD) error { return grpc.SetHeader(ctx, m) },
		setTrailer: func(m metadata.MD) { _ = grpc.SetTrailer(ctx, m) },
	}
}

func streamSink(ss grpc.ServerStream) sink {
	return sink{setHeader: ss.SetHeader, setTrailer: ss.SetTrailer}
}

// fields are the rate-limit fields of one call, shared through its
// context by every interceptor of this package and every Check that
// decides it, so that several Policies compose as
// httplimit.Policy.Serve says (the X-RateLimit fields of the
// strictest, every IETF member, the longest Retry-After). gRPC metadata
// set on a call can only be added to, never replaced, so one fields
// collects them all and its owner, the outermost interceptor, sends them:
// as headers before the handler's first message (send) or when it returns
// (end), or as trailers when any Policy refused the call or the headers
// went out without them; what changed after the headers went out follows
// in the trailers (end).
type fields struct {
	mu      sync.Mutex
	out     sink
	md      metadata.MD
	dirty   bool // md holds fields not sent yet
	refused bool // a Policy refused the call: the fields are trailers
	sent    bool // the headers went out (or are going)
}

type fieldsKey struct{}

// fieldsOf returns the call's fields, and whether ctx had them; without,
// it returns new fields, which the caller owns and must end, and ctx
// carrying them.
func fieldsOf(ctx context.Context, out sink) (*fields, context.Context, bool) {
	if f, ok := ctx.Value(fieldsKey{}).(*fields); ok {
		return f, ctx, true
	}
	f := &fields{out: out, md: metadata.MD{}}
	return f, context.WithValue(ctx, fieldsKey{}, f), false
}

// refuse notes that a Policy refused the call: the fields are trailers.
func (f *fields) refuse() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = true
}

// Get and Set make fields the httplimit.HeaderWriter of its decisions,
// over gRPC metadata, whose names are lower case: "X-Ratelimit-Limit" is
// x-ratelimit-limit.
func (f *fields) Get(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get(name)
}

func (f *fields) Set(name, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set(name, value)
}

// get and set are Get and Set for a caller that holds mu.
func (f *fields) get(name string) string {
	if v := f.md.Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (f *fields) set(name, value string) {
	f.md.Set(name, value)
	f.dirty = true
}

// held is the HeaderWriter of one in-handler Check: its first Get or Set
// takes mu, which Check keeps until it has noted a refusal, so that a
// concurrent SendMsg (send) never sees a refusal's fields without the
// refusal and sends them as headers (TestCheckRefusalFieldsAreTrailers).
// The decision is made before the first write: mu is not held over Redis.
type held struct {
	f      *fields
	locked bool
}

func (h *held) lock() {
	if !h.locked {
		h.f.mu.Lock()
		h.locked = true
	}
}

func (h *held) unlock() {
	if h.locked {
		h.locked = false
		h.f.mu.Unlock()
	}
}

func (h *held) Get(name string) string { h.lock(); return h.f.get(name) }

func (h *held) Set(name, value string) { h.lock(); h.f.set(name, value) }

// refuse notes a refusal in the critical section of the fields written.
func (h *held) refuse() { h.lock(); h.f.refused = true }

// send runs before the handler's first message or header: the headers go
// with it, so the fields must be set now.
func (f *fields) send() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sent {
		return
	}
	f.sent = true
	if f.dirty && !f.refused && f.out.setHeader(f.md.Copy()) == nil {
		f.dirty = false
	}
}

// end runs when the handler has returned (or a Policy refused the call):
// the fields not sent yet go as headers if they still can, else as
// trailers, once.
func (f *fields) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirty {
		return
	}
	f.dirty = false
	if !f.refused && !f.sent {
		f.sent = true
		if f.out.setHeader(f.md.Copy()) == nil {
			return
		}
	}
	f.out.setTrailer(f.md.Copy())
}
