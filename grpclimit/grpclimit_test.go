package grpclimit_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

const peerA, peerB = "203.0.113.7:5000", "203.0.113.8:5000"

// rateFields are the names of the default rate-limit fields.
var rateFields = []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}

// one returns md's single value of name, failing the test when it has
// none or several.
func one(t *testing.T, md metadata.MD, name string) string {
	t.Helper()
	v := md.Get(name)
	if len(v) != 1 {
		t.Errorf("%s: %q, want one value", name, v)
		return ""
	}
	return v[0]
}

// noFields fails the test if md holds a rate-limit field or retry-after.
func noFields(t *testing.T, where string, md metadata.MD) {
	t.Helper()
	for _, k := range append(slices.Clone(rateFields), "retry-after") {
		if v := md.Get(k); v != nil {
			t.Errorf("%s has %s: %q, want none", where, k, v)
		}
	}
}

// wantFields checks the x-ratelimit-* fields in md: the limit, what
// remains, and a reset in the next period (epoch seconds, rounded up).
func wantFields(t *testing.T, b *backend, where string, md metadata.MD, limit, remaining string, period time.Duration) {
	t.Helper()
	if got := one(t, md, "x-ratelimit-limit"); got != limit {
		t.Errorf("%s: x-ratelimit-limit %q, want %q", where, got, limit)
	}
	if got := one(t, md, "x-ratelimit-remaining"); got != remaining {
		t.Errorf("%s: x-ratelimit-remaining %q, want %q", where, got, remaining)
	}
	reset, err := strconv.ParseInt(one(t, md, "x-ratelimit-reset"), 10, 64)
	if now := b.now().Unix(); err != nil || reset < now || reset > now+int64(period/time.Second)+1 {
		t.Errorf("%s: x-ratelimit-reset %v (%v), want epoch seconds within %v of %d", where, reset, err, period, now)
	}
}

// wantDenied checks a ResourceExhausted answer: the RetryInfo detail and
// the retry-after trailer agree, as long as the real wait (wait on
// miniredis, whose clock stands still; up to a second less on a real
// Redis), and the fields are trailers only.
func wantDenied(t *testing.T, b *backend, a answer, wait time.Duration) {
	t.Helper()
	if a.code != codes.ResourceExhausted || a.msg != "rate limit exceeded" {
		t.Fatalf("got %v, want ResourceExhausted \"rate limit exceeded\"", a)
	}
	retry := one(t, a.trailer, "retry-after")
	if a.retry < 0 || strconv.FormatInt(int64(a.retry/time.Second), 10) != retry || a.retry%time.Second != 0 {
		t.Errorf("RetryInfo %v, retry-after trailer %q: want the same whole seconds", a.retry, retry)
	}
	if a.retry != wait && (b.exact() || a.retry > wait || a.retry < wait-time.Second) {
		t.Errorf("RetryInfo %v, want %v", a.retry, wait)
	}
	noFields(t, "the header of a refusal", a.header)
}

// TestUnary: allowed calls carry the fields as headers; the call over the
// limit gets ResourceExhausted, RetryInfo and the fields as trailers.
func TestUnary(t *testing.T) {
	onBoth(t, func(t *testing.T, b *backend) {
		p := b.policy(t, httplimit.Config{Limit: core.PerMinute(2)})
		s := serve(t, nil, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p)))
		c := s.client(peerA)
		for _, remaining := range []string{"1", "0"} {
			a := check(t, c, "")
			if a.code != codes.OK {
				t.Fatalf("got %v, want OK", a)
			}
			wantFields(t, b, "header", a.header, "2", remaining, time.Minute)
			noFields(t, "the trailer of an allowed call", a.trailer)
		}
		a := check(t, c, "")
		wantDenied(t, b, a, 30*time.Second)
		wantFields(t, b, "trailer", a.trailer, "2", "0", time.Minute)
	})
}

// TestStream: a stream is decided when it opens; its fields go out as
// headers with its first message, or as trailers when it is refused.
func TestStream(t *testing.T) {
	onBoth(t, func(t *testing.T, b *backend) {
		p := b.policy(t, httplimit.Config{Limit: core.PerMinute(2)})
		s := serve(t, nil, grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(p)))
		c := s.client(peerA)
		for _, remaining := range []string{"1", "0"} {
			a, stop := watch(t, c)
			defer stop()
			if a.code != codes.OK {
				t.Fatalf("got %v, want OK", a)
			}
			wantFields(t, b, "header", a.header, "2", remaining, time.Minute)
		}
		a, _ := watch(t, c)
		wantDenied(t, b, a, 30*time.Second)
		wantFields(t, b, "trailer", a.trailer, "2", "0", time.Minute)
	})
}

// TestFailPolicy: with Redis gone, fail open serves calls without fields;
// fail closed answers Unavailable, retry-after 1 and a RetryInfo of 1s.
func TestFailPolicy(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "closed"}[failClosed], func(t *testing.T) {
			b := newMini(t, time.Second)
			p := b.policy(t, httplimit.Config{Limit: core.PerMinute(100), FailClosed: failClosed})
			s := serve(t, nil,
				grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p)),
				grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(p)))
			c := s.client(peerA)
			if a := check(t, c, ""); a.code != codes.OK {
				t.Fatalf("with Redis up: %v, want OK", a)
			}
			b.mr.Close()
			unary := check(t, c, "")
			stream, stop := watch(t, c)
			defer stop()
			for name, a := range map[string]answer{"unary": unary, "stream": stream} {
				if !failClosed {
					if a.code != codes.OK {
						t.Errorf("%s: %v, want OK", name, a)
					}
					noFields(t, name+" header", a.header)
					continue
				}
				if a.code != codes.Unavailable || a.msg != "rate limiter unavailable" || a.retry != time.Second {
					t.Errorf("%s: %v, want Unavailable \"rate limiter unavailable\" with a RetryInfo of 1s", name, a)
				}
				if got := a.trailer.Get("retry-after"); !slices.Equal(got, []string{"1"}) {
					t.Errorf("%s: retry-after trailer %q, want 1", name, got)
				}
				for _, k := range rateFields {
					if v := a.trailer.Get(k); v != nil {
						t.Errorf("%s: trailer %s %q, want none: Redis did not decide", name, k, v)
					}
				}
			}
		})
	}
}

// TestKeys: calls are keyed by the peer's IP (forwarding metadata
// believed only from a trusted proxy), by a metadata value, or by the
// method; a call that cannot be keyed is refused with InvalidArgument.
func TestKeys(t *testing.T) {
	byProxy, err := httplimit.KeyByIP(httplimit.ClientIP{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		peer    string
		kv      []string
		service string // "list" calls Health/List
		want    codes.Code
	}
	tests := []struct {
		name  string
		key   httplimit.KeyFunc
		calls []call
		keys  []string // in Redis afterwards, as "<name>:<key>"
	}{
		{"peer", nil, []call{
			{peer: peerA, want: codes.OK},
			{peer: peerA, want: codes.ResourceExhausted},
			{peer: peerA, kv: []string{"x-forwarded-for", "198.51.100.1"}, want: codes.ResourceExhausted}, // not from a proxy
			{peer: peerB, want: codes.OK},
			{peer: "[2001:db8::1]:1", want: codes.OK},
			{peer: "[2001:db8::2]:1", want: codes.ResourceExhausted}, // one /64
			{peer: "", want: codes.InvalidArgument},                  // bufconn: no IP
		}, []string{"http:ip:203.0.113.7", "http:ip:203.0.113.8", "http:ip:2001:db8::/64"}},
		{"trusted proxy", byProxy, []call{
			{peer: "10.0.0.7:1", kv: []string{"x-forwarded-for", "198.51.100.1"}, want: codes.OK},
			{peer: "10.0.0.8:1", kv: []string{"X-Forwarded-For", "198.51.100.1"}, want: codes.ResourceExhausted},
			{peer: "10.0.0.7:1", kv: []string{"x-forwarded-for", "192.0.2.1, 198.51.100.2"}, want: codes.OK},
			{peer: peerA, kv: []string{"x-forwarded-for", "198.51.100.3"}, want: codes.OK},
			{peer: peerA, kv: []string{"x-forwarded-for", "198.51.100.4"}, want: codes.ResourceExhausted},
		}, []string{"http:ip:198.51.100.1", "http:ip:198.51.100.2", "http:ip:203.0.113.7"}},
		{"metadata", grpclimit.KeyByMetadata("X-API-Key"), []call{
			{peer: peerA, kv: []string{"x-api-key", "k1"}, want: codes.OK},
			{peer: peerB, kv: []string{"x-api-key", " k1 "}, want: codes.ResourceExhausted},
			{peer: peerA, kv: []string{"x-api-key", "k2"}, want: codes.OK},
			{peer: peerA, want: codes.InvalidArgument},
		}, []string{"http:h:X-Api-Key:k1", "http:h:X-Api-Key:k2"}},
		{"method", grpclimit.KeyByMethod(), []call{
			{peer: peerA, want: codes.OK},
			{peer: peerB, want: codes.ResourceExhausted},
			{peer: peerA, service: "list", want: codes.OK},
		}, []string{"http:route:/grpc.health.v1.Health/Check", "http:route:/grpc.health.v1.Health/List"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			onBoth(t, func(t *testing.T, b *backend) {
				p := b.policy(t, httplimit.Config{Name: "http", Limit: core.PerMinute(1), Key: tt.key})
				s := serve(t, nil, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p)))
				clients := map[string]healthpb.HealthClient{}
				for i, c := range tt.calls {
					if clients[c.peer] == nil {
						clients[c.peer] = s.client(c.peer)
					}
					var a answer
					if c.service == "list" {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						_, err := clients[c.peer].List(ctx, &healthpb.HealthListRequest{})
						cancel()
						a = answerOf(err, nil, nil)
					} else {
						a = check(t, clients[c.peer], "", c.kv...)
					}
					if a.code != c.want {
						t.Errorf("call %d from %q with %q: %v, want %v", i, c.peer, c.kv, a, c.want)
					}
					if c.want == codes.InvalidArgument {
						if a.msg != "missing rate limit key" {
							t.Errorf("call %d: message %q, want \"missing rate limit key\"", i, a.msg)
						}
						noFields(t, "trailer", a.trailer)
					}
				}
				got := b.keys(t)
				for _, k := range tt.keys {
					if !slices.Contains(got, k) {
						t.Errorf("Redis holds %q, want %q among them", got, k)
					}
				}
				if len(got) != len(tt.keys) {
					t.Errorf("Redis holds %q, want %q", got, tt.keys)
				}
			})
		})
	}
}

// TestInFlight: a call in flight holds its permit until its handler
// returns, panics included, and gives it back before its answer.
func TestInFlight(t *testing.T) {
	onBoth(t, func(t *testing.T, b *backend) {
		p := b.policy(t, httplimit.Config{Limit: core.PerSecond(1000), InFlight: 1})
		entered, release := make(chan struct{}), make(chan struct{})
		hs := &probe{
			check: func(ctx context.Context, service string) error {
				switch service {
				case "block":
					entered <- struct{}{}
					<-release
				case "panic":
					panic(errBoom)
				}
				return nil
			},
			watch: func(stream healthpb.Health_WatchServer) error {
				if err := stream.Send(&healthpb.HealthCheckResponse{}); err != nil {
					return err
				}
				<-stream.Context().Done()
				return nil
			},
		}
		s := serve(t, hs,
			grpc.ChainUnaryInterceptor(recoverer, grpclimit.UnaryServerInterceptor(p)),
			grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(p)))
		c := s.client(peerA)

		done := make(chan answer, 1)
		go func() { done <- check(t, c, "block") }()
		<-entered
		a := check(t, c, "")
		wantDenied(t, b, a, time.Second)
		close(release)
		if a := <-done; a.code != codes.OK {
			t.Fatalf("the call in flight: %v, want OK", a)
		}
		if a := check(t, c, ""); a.code != codes.OK {
			t.Fatalf("after the call in flight returned: %v, want OK: its permit was given back", a)
		}
		if a := check(t, c, "panic"); a.code != codes.Internal {
			t.Fatalf("a panicking handler: %v, want Internal from the recoverer", a)
		}
		if a := check(t, c, ""); a.code != codes.OK {
			t.Fatalf("after a panic: %v, want OK: its permit was given back", a)
		}

		// A stream holds its permit while it is open.
		first, stop := watch(t, c)
		if first.code != codes.OK {
			t.Fatalf("stream: %v, want OK", first)
		}
		if a := check(t, c, ""); a.code != codes.ResourceExhausted {
			t.Errorf("during a stream: %v, want ResourceExhausted", a)
		}
		stop()
		deadline := time.Now().Add(10 * time.Second)
		for check(t, c, "").code != codes.OK {
			if time.Now().After(deadline) {
				t.Fatal("the stream's permit was not given back within 10s of its end")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// TestSettle: a handler reports what its call cost; the interceptor
// settles it when the handler returns.
func TestSettle(t *testing.T) {
	onBoth(t, func(t *testing.T, b *backend) {
		p := b.policy(t, httplimit.Config{Limit: core.PerMinute(10), Settle: true})
		other := b.policy(t, httplimit.Config{Name: "other", Limit: core.PerMinute(10)})
		var reported, reportedOther atomic.Bool
		hs := &probe{check: func(ctx context.Context, service string) error {
			if units, err := strconv.Atoi(service); err == nil {
				reported.Store(p.ReportCost(ctx, units))
				reportedOther.Store(other.ReportCost(ctx, units))
			}
			return nil
		}}
		s := serve(t, hs, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p)))
		c := s.client(peerA)
		a := check(t, c, "5")
		if a.code != codes.OK || one(t, a.header, "x-ratelimit-remaining") != "9" {
			t.Fatalf("got %v, want OK with 9 remaining (the cost before the report)", a)
		}
		if !reported.Load() || reportedOther.Load() {
			t.Errorf("ReportCost: %v for the Policy, %v for another; want true, false", reported.Load(), reportedOther.Load())
		}
		a = check(t, c, "")
		if a.code != codes.OK || one(t, a.header, "x-ratelimit-remaining") != "4" {
			t.Errorf("got %v, want OK with 4 remaining (10 - 5 reported - 1)", a)
		}
	})
}

// TestSettleHugeReport guards that a report of any size is charged, on
// the path gRPC shares with HTTP (httplimit's Finish): a report above the
// largest charge core took was refused and dropped, so 2^40 or 2^62 on
// 1000/min with an estimate of 10 left the key 20 of 20 calls.
func TestSettleHugeReport(t *testing.T) {
	onBoth(t, func(t *testing.T, b *backend) {
		p := b.policy(t, httplimit.Config{Limit: core.PerMinute(1000), Cost: func(httplimit.Request) int { return 10 }, Settle: true})
		hs := &probe{check: func(ctx context.Context, service string) error {
			if units, err := strconv.Atoi(service); err == nil {
				p.ReportCost(ctx, units)
			}
			return nil
		}}
		s := serve(t, hs, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p)))
		c := s.client(peerA)
		if a := check(t, c, strconv.Itoa(1<<62)); a.code != codes.OK {
			t.Fatalf("got %v, want OK", a)
		}
		admitted := 0
		for range 20 {
			if check(t, c, "").code == codes.OK {
				admitted++
			}
		}
		if admitted != 0 {
			t.Errorf("after a report of 2^62: %d of 20 calls admitted, want 0", admitted)
		}
	})
}

// TestCountIf: the handler's code, as an HTTP status, says whether its
// call counts; a panic counts as 500.
func TestCountIf(t *testing.T) {
	b := newMini(t, timeout)
	p := b.policy(t, httplimit.Config{Limit: core.PerMinute(2), CountIf: func(status int) bool { return status >= 400 }})
	hs := &probe{check: func(ctx context.Context, service string) error {
		switch service {
		case "missing":
			return status.Error(codes.NotFound, "no such service")
		case "panic":
			panic(errBoom)
		}
		return nil
	}}
	s := serve(t, hs, grpc.ChainUnaryInterceptor(recoverer, grpclimit.UnaryServerInterceptor(p)))
	c := s.client(peerA)
	for i, step := range []struct {
		service   string
		want      codes.Code
		remaining string
	}{
		{"", codes.OK, "1"}, // OK does not count: its unit comes back
		{"", codes.OK, "1"},
		{"missing", codes.NotFound, "1"}, // 404 counts
		{"", codes.OK, "0"},
		{"", codes.OK, "0"},
		{"panic", codes.Internal, "0"}, // 500 counts
		{"", codes.ResourceExhausted, "0"},
	} {
		a := check(t, c, step.service)
		md := a.header
		if step.want == codes.ResourceExhausted {
			md = a.trailer
		}
		if a.code != step.want || one(t, md, "x-ratelimit-remaining") != step.remaining {
			t.Errorf("step %d (%q): %v, want %v with %s remaining", i, step.service, a, step.want, step.remaining)
		}
	}
}

// TestSkip: skipped calls are neither counted nor given fields.
func TestSkip(t *testing.T) {
	b := newMini(t, timeout)
	p := b.policy(t, httplimit.Config{Limit: core.PerMinute(1)})
	var methods []string
	skip := grpclimit.WithSkip(func(ctx context.Context, fullMethod string) bool {
		methods = append(methods, fullMethod)
		return slices.Contains(metadata.ValueFromIncomingContext(ctx, "x-internal"), "yes")
	})
	s := serve(t, nil, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p, skip)))
	c := s.client(peerA)
	for range 3 {
		if a := check(t, c, "", "x-internal", "yes"); a.code != codes.OK || len(a.header.Get("x-ratelimit-remaining")) != 0 {
			t.Errorf("skipped: %v, want OK without fields", a)
		}
	}
	if a := check(t, c, ""); a.code != codes.OK || one(t, a.header, "x-ratelimit-remaining") != "0" {
		t.Errorf("not skipped: %v, want OK with 0 remaining", a)
	}
	if want := healthpb.Health_Check_FullMethodName; len(methods) != 4 || methods[0] != want {
		t.Errorf("the skip function saw %q, want %q 4 times", methods, want)
	}
}

// TestDenyHandler: the deny handler's error ends the call, with the
// fields already set as trailers; nil stands for the default answer.
func TestDenyHandler(t *testing.T) {
	b := newMini(t, timeout)
	p := b.policy(t, httplimit.Config{Limit: core.PerMinute(1)})
	deny := grpclimit.WithDenyHandler(func(ctx context.Context, d httplimit.Decision) error {
		if d.Outcome == httplimit.OutcomeNoKey {
			return nil // the default answer
		}
		return status.Errorf(codes.PermissionDenied, "%s, %d s", d.Outcome, d.RetryAfter())
	})
	s := serve(t, nil, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p, deny)))
	c := s.client(peerA)
	check(t, c, "")
	a := check(t, c, "")
	if a.code != codes.PermissionDenied || a.msg != "denied, 60 s" {
		t.Errorf("got %v, want PermissionDenied \"denied, 60 s\"", a)
	}
	if got := one(t, a.trailer, "retry-after"); got != "60" {
		t.Errorf("retry-after trailer %q, want 60", got)
	}
	if a := check(t, s.client(""), ""); a.code != codes.InvalidArgument {
		t.Errorf("unkeyable, the deny handler returning nil: %v, want InvalidArgument", a)
	}
}

// TestCompose: two Policies on one call send one set of fields, the
// strictest's, and every IETF member, as headers, or all as trailers when
// one refuses.
func TestCompose(t *testing.T) {
	onBoth(t, func(t *testing.T, b *backend) {
		both := httplimit.Headers{httplimit.XRateLimit{}, httplimit.IETF{}}
		outer := b.policy(t, httplimit.Config{Name: "a", Limit: core.PerMinute(5), Headers: both})
		inner := b.policy(t, httplimit.Config{Name: "b", Limit: core.PerMinute(2), Headers: both})
		s := serve(t, nil,
			grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(outer), grpclimit.UnaryServerInterceptor(inner)),
			grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(outer), grpclimit.StreamServerInterceptor(inner)))
		c := s.client(peerA)
		a := check(t, c, "")
		if a.code != codes.OK {
			t.Fatalf("got %v, want OK", a)
		}
		wantFields(t, b, "header", a.header, "2", "1", time.Minute)
		if got, want := one(t, a.header, "ratelimit-policy"), `"a";q=5;w=60, "b";q=2;w=60`; got != want {
			t.Errorf("ratelimit-policy %q, want %q", got, want)
		}
		st, stop := watch(t, c)
		defer stop()
		if st.code != codes.OK {
			t.Fatalf("stream: %v, want OK", st)
		}
		wantFields(t, b, "stream header", st.header, "2", "0", time.Minute)
		a = check(t, c, "")
		wantDenied(t, b, a, 30*time.Second)
		wantFields(t, b, "trailer", a.trailer, "2", "0", time.Minute)
		state := one(t, a.trailer, "ratelimit")
		if !strings.HasPrefix(state, `"a";r=2;t=`) || !strings.Contains(state, `, "b";r=0;t=30`) && b.exact() {
			t.Errorf("ratelimit trailer %q, want a's member then b's refusal", state)
		}
	})
}

// TestCheck: a handler's Check adds its decision to the call's fields,
// and its refusal is the handler's error, with the fields as trailers.
func TestCheck(t *testing.T) {
	for _, mounted := range []bool{false, true} {
		t.Run("interceptor="+strconv.FormatBool(mounted), func(t *testing.T) {
			b := newMini(t, timeout)
			units := b.policy(t, httplimit.Config{Name: "units", Limit: core.PerMinute(10)})
			hs := &probe{check: func(ctx context.Context, service string) error {
				n, _ := strconv.Atoi(service)
				return grpclimit.Check(ctx, units, n)
			}}
			var opts []grpc.ServerOption
			if mounted {
				calls := b.policy(t, httplimit.Config{Name: "calls", Limit: core.PerMinute(100)})
				opts = append(opts, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(calls)))
			}
			c := serve(t, hs, opts...).client(peerA)
			a := check(t, c, "6")
			if a.code != codes.OK {
				t.Fatalf("got %v, want OK", a)
			}
			wantFields(t, b, "header", a.header, "10", "4", time.Minute)
			a = check(t, c, "6")
			wantDenied(t, b, a, 12*time.Second)
			wantFields(t, b, "trailer", a.trailer, "10", "4", time.Minute)
		})
	}
}

// TestHeadersSentByHandler: a handler that sends the headers itself sends
// them without the fields, which then go as trailers.
func TestHeadersSentByHandler(t *testing.T) {
	b := newMini(t, timeout)
	p := b.policy(t, httplimit.Config{Limit: core.PerMinute(2)})
	hs := &probe{check: func(ctx context.Context, _ string) error {
		return grpc.SendHeader(ctx, metadata.Pairs("x-own", "1"))
	}}
	c := serve(t, hs, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p))).client(peerA)
	a := check(t, c, "")
	if a.code != codes.OK || one(t, a.header, "x-own") != "1" {
		t.Fatalf("got %v (header %v), want OK with the handler's header", a, a.header)
	}
	noFields(t, "header", a.header)
	wantFields(t, b, "trailer", a.trailer, "2", "1", time.Minute)
}

// TestCanceled: a call whose context ends during its LeakyBucket wait is
// not served, and its Status is its context's.
func TestCanceled(t *testing.T) {
	b := newMini(t, timeout)
	p := b.policy(t, httplimit.Config{Limit: core.Limit{Algorithm: core.LeakyBucket, Rate: 1, Period: time.Minute, Burst: 5}})
	seen := make(chan *status.Status, 1)
	deny := grpclimit.WithDenyHandler(func(ctx context.Context, d httplimit.Decision) error {
		st := grpclimit.Status(d)
		seen <- st
		return st.Err()
	})
	var served atomic.Int32
	hs := &probe{check: func(context.Context, string) error { served.Add(1); return nil }}
	c := serve(t, hs, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p, deny))).client(peerA)
	if a := check(t, c, ""); a.code != codes.OK {
		t.Fatalf("first: %v, want OK", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("second, held for a minute: %v, want DeadlineExceeded", err)
	}
	select {
	case st := <-seen:
		// The server's deadline and the client's cancellation race.
		if st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled {
			t.Errorf("Status of the canceled decision: %v, want DeadlineExceeded or Canceled", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deny handler did not run")
	}
	if n := served.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// TestStatus: each outcome's status, and the RetryInfo of refusals.
func TestStatus(t *testing.T) {
	tests := []struct {
		d     httplimit.Decision
		code  codes.Code
		retry time.Duration // -1: no RetryInfo
	}{
		{httplimit.Decision{Outcome: httplimit.OutcomeAllowed}, codes.OK, -1},
		{httplimit.Decision{Outcome: httplimit.OutcomeFailedOpen}, codes.OK, -1},
		{httplimit.Decision{Outcome: httplimit.OutcomeDenied, Result: core.Result{RetryAfter: 1500 * time.Millisecond}}, codes.ResourceExhausted, 2 * time.Second},
		{httplimit.Decision{Outcome: httplimit.OutcomeDenied, Result: core.Result{RetryAfter: time.Microsecond}}, codes.ResourceExhausted, time.Second},
		{httplimit.Decision{Outcome: httplimit.OutcomeInFlight, Result: core.Result{RetryAfter: 10 * time.Millisecond}}, codes.ResourceExhausted, time.Second},
		{httplimit.Decision{Outcome: httplimit.OutcomeFailedClosed, Err: errBoom}, codes.Unavailable, time.Second},
		{httplimit.Decision{Outcome: httplimit.OutcomeNoKey, Err: errBoom}, codes.InvalidArgument, -1},
		{httplimit.Decision{Outcome: httplimit.OutcomeCanceled, Err: context.Canceled}, codes.Canceled, -1},
		{httplimit.Decision{Outcome: httplimit.OutcomeCanceled, Err: errors.Join(errBoom, context.DeadlineExceeded)}, codes.DeadlineExceeded, -1},
	}
	for _, tt := range tests {
		st := grpclimit.Status(tt.d)
		a := answerOf(st.Err(), nil, nil)
		if a.code != tt.code || a.retry != tt.retry {
			t.Errorf("%v: %v, want %v with RetryInfo %v", tt.d.Outcome, a, tt.code, tt.retry)
		}
	}
}

// TestClient: the client interceptor keeps calls within a shared quota,
// and never calls the upstream without a unit of it.
func TestClient(t *testing.T) {
	mr, _ := redistest.Mini(t)
	// As README advises: no retries within a decision, and one dial, so
	// that a Redis that is down fails at once rather than at the timeout.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	defer func() { _ = rdb.Close() }()
	l, err := core.New(rdb, core.WithTimeout(time.Second), core.WithLogger(nil), core.WithLocalFallback(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int32
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		served.Add(1)
		return handler(ctx, req)
	}
	s := serve(t, nil, grpc.ChainUnaryInterceptor(count))
	c := s.client(peerA, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(l, "upstream:health", core.PerMinute(2))))
	for range 2 {
		if a := check(t, c, ""); a.code != codes.OK {
			t.Fatalf("got %v, want OK", a)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted || time.Since(start) > 500*time.Millisecond {
		t.Errorf("over the quota, with 1s to go and 30s to wait: %v after %v, want ResourceExhausted at once", err, time.Since(start))
	}
	mr.Close()
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("with Redis down: %v, want Unavailable", err)
	}
	if n := served.Load(); n != 2 {
		t.Errorf("the upstream served %d calls, want 2", n)
	}
}

// TestPanicsAtStartUp: the constructors refuse what cannot work.
func TestPanicsAtStartUp(t *testing.T) {
	l := newMini(t, timeout).limiter
	for name, f := range map[string]func(){
		"UnaryServerInterceptor(nil)":  func() { grpclimit.UnaryServerInterceptor(nil) },
		"StreamServerInterceptor(nil)": func() { grpclimit.StreamServerInterceptor(nil) },
		"UnaryClientInterceptor(nil)":  func() { grpclimit.UnaryClientInterceptor(nil, "k", core.PerSecond(1)) },
		"UnaryClientInterceptor(\"\")": func() { grpclimit.UnaryClientInterceptor(l, "", core.PerSecond(1)) },
		"UnaryClientInterceptor(bad)":  func() { grpclimit.UnaryClientInterceptor(l, "k", core.Limit{Rate: -1}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}
