package grpclimit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/conformance"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestMain says which real-Redis tests were skipped, without -v, and
// keeps go-redis' own log (a line per failed dial, when a test stops
// Redis) out of the output.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	redistest.Main(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// timeout bounds each decision: generous, so that a loaded machine (-race,
// parallel packages) never turns a slow answer into a failure; the tests
// that stop Redis use a shorter one.
const timeout = 5 * time.Second

// backend is a test's Redis: its Limiter, and the miniredis behind it
// (nil for the real Redis).
type backend struct {
	limiter *core.Limiter
	mr      *miniredis.Miniredis
	rdb     redis.UniversalClient
	prefix  string
}

func (b *backend) exact() bool { return b.mr != nil }

// now is the decisions' clock, which the fields count from: Redis' (a
// miniredis stands still at redistest.Epoch).
func (b *backend) now() time.Time {
	if b.mr != nil {
		return redistest.Epoch
	}
	return time.Now()
}

// newMini is a miniredis of the test's own, its clock standing still at
// redistest.Epoch.
func newMini(t *testing.T, timeout time.Duration) *backend {
	t.Helper()
	mr, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithTimeout(timeout), core.WithLogger(nil), core.WithLocalFallback(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return &backend{limiter: l, mr: mr, rdb: rdb, prefix: "ratelimit"}
}

// newReal uses REDIS_URL under a prefix unique to the test, and deletes
// its keys afterwards; it skips the test without REDIS_URL (fails it under
// CI).
func newReal(t *testing.T) *backend {
	t.Helper()
	rdb := redistest.Real(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "redlimit-grpclimit:" + hex.EncodeToString(b[:])
	l, err := core.New(rdb, core.WithPrefix(prefix), core.WithTimeout(timeout), core.WithLogger(nil), core.WithLocalFallback(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := rdb.Keys(ctx, prefix+":*").Result()
		if err == nil && len(keys) > 0 {
			err = rdb.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("cleaning up keys %s:*: %v", prefix, err)
		}
	})
	return &backend{limiter: l, rdb: rdb, prefix: prefix}
}

// keys lists the keys the test wrote as "<policy name>:<key>".
func (b *backend) keys(t *testing.T) []string {
	t.Helper()
	return conformance.StoredKeys(t, b.rdb, b.prefix)
}

// onBoth runs f on miniredis and on the real Redis of REDIS_URL.
func onBoth(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("miniredis", func(t *testing.T) { f(t, newMini(t, timeout)) })
	t.Run("redis", func(t *testing.T) { f(t, newReal(t)) })
}

func (b *backend) policy(t *testing.T, cfg httplimit.Config) *httplimit.Policy {
	t.Helper()
	cfg.Limiter = b.limiter
	p, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// peers is a bufconn listener whose connections come from the addresses
// the test names, one per client connection: gRPC takes a call's peer
// from its connection's RemoteAddr.
type peers struct {
	*bufconn.Listener
	mu    sync.Mutex // held across a dial, so that addresses and connections pair up
	addrs chan net.Addr
}

func (p *peers) Accept() (net.Conn, error) {
	c, err := p.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &peerConn{Conn: c, remote: <-p.addrs}, nil
}

func (p *peers) dialer(addr string) func(context.Context, string) (net.Conn, error) {
	var remote net.Addr = bufconnAddr{}
	if addr != "" {
		remote = net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))
	}
	return func(ctx context.Context, _ string) (net.Conn, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.addrs <- remote
		c, err := p.DialContext(ctx)
		if err != nil {
			<-p.addrs
		}
		return c, err
	}
}

type peerConn struct {
	net.Conn
	remote net.Addr
}

func (c *peerConn) RemoteAddr() net.Addr { return c.remote }

// bufconnAddr is the peer address of an in-memory connection: no IP.
type bufconnAddr struct{}

func (bufconnAddr) Network() string { return "bufconn" }
func (bufconnAddr) String() string  { return "bufconn" }

// server is a gRPC server on an in-memory listener.
type server struct {
	t     *testing.T
	peers *peers
}

// serve starts a server with opts, the standard health service (or hs),
// and stops it when the test ends.
func serve(t *testing.T, hs healthpb.HealthServer, opts ...grpc.ServerOption) *server {
	t.Helper()
	p := &peers{Listener: bufconn.Listen(1 << 20), addrs: make(chan net.Addr, 1)}
	srv := grpc.NewServer(opts...)
	if hs == nil {
		hs = health.NewServer()
	}
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(p)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return &server{t: t, peers: p}
}

// client is a client whose connection comes from peer ("ip:port"; ""
// for an in-memory address, which is no IP).
func (s *server) client(peer string, opts ...grpc.DialOption) healthpb.HealthClient {
	s.t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(s.peers.dialer(peer)),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///bufconn", opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// answer is what a client saw of a call.
type answer struct {
	code            codes.Code
	msg             string
	header, trailer metadata.MD
	retry           time.Duration // the RetryInfo detail's; -1 without one
}

func (a answer) String() string {
	return a.code.String() + " " + a.msg + " header " + fmtMD(a.header) + " trailer " + fmtMD(a.trailer) + " retry " + a.retry.String()
}

// fmtMD lists the rate-limit fields of md.
func fmtMD(md metadata.MD) string {
	var b strings.Builder
	for _, k := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after", "ratelimit-policy", "ratelimit"} {
		if v := md.Get(k); v != nil {
			b.WriteString(k + "=" + strings.Join(v, "|") + " ")
		}
	}
	return "{" + strings.TrimSpace(b.String()) + "}"
}

func answerOf(err error, header, trailer metadata.MD) answer {
	st := status.Convert(err)
	a := answer{code: st.Code(), msg: st.Message(), header: header, trailer: trailer, retry: -1}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			a.retry = ri.GetRetryDelay().AsDuration()
		}
	}
	return a
}

// check calls Health/Check with the metadata pairs kv, for service.
func check(t *testing.T, c healthpb.HealthClient, service string, kv ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var header, trailer metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.Header(&header), grpc.Trailer(&trailer))
	return answerOf(err, header, trailer)
}

// watch opens Health/Watch and reads its first message.
func watch(t *testing.T, c healthpb.HealthClient, kv ...string) (answer, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		cancel()
		return answerOf(err, nil, nil), func() {}
	}
	_, err = s.Recv()
	header, _ := s.Header()
	if err != nil {
		cancel()
		return answerOf(err, header, s.Trailer()), func() {}
	}
	return answerOf(nil, header, nil), cancel
}

// probe is a Health service whose Check runs f.
type probe struct {
	healthpb.UnimplementedHealthServer
	check func(ctx context.Context, service string) error
	watch func(stream healthpb.Health_WatchServer) error
}

func (p *probe) Check(ctx context.Context, in *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := p.check(ctx, in.Service); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (p *probe) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	if p.watch == nil {
		return status.Error(codes.Unimplemented, "no watch")
	}
	return p.watch(stream)
}

// recoverer turns a handler's panic into codes.Internal, as a recovery
// interceptor does, so that the server survives it.
func recoverer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(ctx, req)
}

var errBoom = errors.New("boom")
