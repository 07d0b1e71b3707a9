package envoylimit

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestMain(m *testing.M) {
	reloadEvery = 10 * time.Millisecond
	redistest.Main(m)
}

// rig is a Server behind a real gRPC listener on loopback, and the client
// Envoy would be, on one Redis.
type rig struct {
	srv     *Server
	client  rlsv3.RateLimitServiceClient
	dir     string
	prefix  string
	rdb     redis.UniversalClient
	cluster bool // keys in other slots are decided one slot after another
}

var prefixes atomic.Int64

// start serves the configuration files (name to YAML) with cfg's options
// on a Limiter of rdb under a key prefix of the test's own.
func start(t testing.TB, rdb redis.UniversalClient, files map[string]string, cfg Config, opts ...core.Option) *rig {
	t.Helper()
	_, isCluster := rdb.(*redis.ClusterClient)
	r := &rig{dir: t.TempDir(), rdb: rdb, cluster: isCluster}
	for name, body := range files {
		writeFile(t, filepath.Join(r.dir, name), body)
	}
	r.prefix = fmt.Sprintf("envoytest:%d:%d", time.Now().UnixNano(), prefixes.Add(1))
	cfg.Limiter, cfg.Path = limiter(t, rdb, append([]core.Option{core.WithPrefix(r.prefix)}, opts...)...), r.dir
	var err error
	if r.srv, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.srv.Close() })
	r.client = serve(t, r.srv)
	return r
}

// limiter is a Limiter on rdb for a test: a patient timeout, no logs.
func limiter(t testing.TB, rdb redis.UniversalClient, opts ...core.Option) *core.Limiter {
	t.Helper()
	lim, err := core.New(rdb, append([]core.Option{core.WithTimeout(time.Second), core.WithLogger(nil), core.WithLocalFallback(0, 0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

// serve puts s on a gRPC server on a loopback port and returns a client.
func serve(t testing.TB, s rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, s)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// writeFile replaces path's content at once, as a configuration tool
// does (a file written in place can be read half written).
func writeFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// d is a descriptor: "k=v,k2=v2"; a trailing "+N" sets its hits_addend.
func d(spec string) *rlv3.RateLimitDescriptor {
	out := &rlv3.RateLimitDescriptor{}
	if i := strings.LastIndex(spec, "+"); i >= 0 {
		var n uint64
		if _, err := fmt.Sscan(spec[i+1:], &n); err != nil {
			panic(spec)
		}
		out.HitsAddend = wrapperspb.UInt64(n)
		spec = spec[:i]
	}
	for kv := range strings.SplitSeq(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out.Entries = append(out.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return out
}

// ask sends one request of the descriptors to domain.
func (r *rig) ask(t testing.TB, domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := r.try(domain, 0, ds...)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

func (r *rig) try(domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
}

// spell spells a response: its overall code, then each status's code
// and, where it has a limit, remaining/limit.
func spell(resp *rlsv3.RateLimitResponse) string {
	parts := []string{short(resp.GetOverallCode())}
	for _, st := range resp.GetStatuses() {
		p := short(st.GetCode())
		if l := st.GetCurrentLimit(); l != nil {
			p += fmt.Sprintf(" %d/%d", st.GetLimitRemaining(), l.GetRequestsPerUnit())
		} else if st.GetLimitRemaining() != 0 {
			p += fmt.Sprintf(" %d", st.GetLimitRemaining())
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func short(c rlsv3.RateLimitResponse_Code) string {
	switch c {
	case rlsv3.RateLimitResponse_OK:
		return "OK"
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return "OVER"
	}
	return c.String()
}

// eventually waits up to 10 s for cond.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("still not %s after 10s", what)
}
