// The contract test builds the server once, starts it as a real process,
// and checks the gRPC part of the example contract (examples/README.md)
// with a real gRPC client: flags and env vars, the rate-limit headers of
// allowed calls, the status, RetryInfo and trailers of refused ones, the
// fail policies with Redis gone, the log lines, and the graceful shutdown.
// It runs on the embedded miniredis, and also on the real Redis of
// REDIS_URL and the Redis Cluster of REDIS_CLUSTER_ADDRS (skipped when
// unset, failed under CI=true).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/internal/redistest"
)

// bin is the server binary, built once by TestMain before any test runs,
// so that no compiler competes with the servers for the CPU.
var bin string

// TestMain builds the server, runs the tests, and says which were skipped
// for want of a Redis (redistest.Main), visible without -v.
func TestMain(m *testing.M) {
	dir, err := buildDir()
	if err == nil {
		bin = filepath.Join(dir, "grpc")
		// Without a symbol table and DWARF, linking takes half the time.
		if out, berr := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin, ".").CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build: %v\n%s", berr, out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redistest.Main(m)
}

// buildDir is where the server is built: beside the test binary when go
// test runs it, in the work directory go test removes afterwards
// (redistest.Main exits, so nothing of ours runs after the tests to
// remove a directory), else a new temporary directory.
func buildDir() (string, error) {
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		if strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "go-build") {
			return filepath.Join(dir, "server"), nil
		}
	}
	return os.MkdirTemp("", "redlimit-grpc-example-")
}

// contractEnv are the env vars of the contract: the test's own
// environment (CI sets REDIS_URL) must not leak into a server unless a
// test says so.
var contractEnv = []string{"ADDR", "REDIS_URL", "REDIS_CLUSTER_ADDRS", "ALGORITHM", "LIMIT", "PERIOD", "BURST", "KEY", "FAIL", "TIMEOUT"}

func baseEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(contractEnv, name) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// server is a running example process, and a client of it.
type server struct {
	t      *testing.T
	addr   string
	cmd    *exec.Cmd
	conn   *grpc.ClientConn
	health healthpb.HealthClient
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed

	mu     sync.Mutex
	lines  []string // stdout
	stderr bytes.Buffer
}

// start runs the server with args (and -addr) and env, and waits for its
// "listening on" line.
func start(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	s := &server{t: t, addr: freeAddr(t), exited: make(chan struct{})}
	args = append([]string{"-addr", s.addr}, args...)
	s.cmd = exec.Command(bin, args...)
	// A generous -timeout, unless the test says otherwise: on a busy
	// 2-core machine a decision may take longer than the default 100ms,
	// and the local fallback's answer would then hide what the test checks.
	s.cmd.Env = baseEnv(append([]string{"TIMEOUT=2s"}, env...)...)
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = &lockedWriter{mu: &s.mu, w: &s.stderr}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
		}
	}()
	go func() {
		<-scanned
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("grpc %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), s.stdout(), s.stderrText())
		}
	})
	s.waitLog("listening on "+s.addr, 15*time.Second)
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	s.conn, s.health = cc, healthpb.NewHealthClient(cc)
	return s
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (s *server) stdout() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

func (s *server) stderrText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

func (s *server) countLog(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

func (s *server) waitLog(substr string, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for s.countLog(substr) == 0 {
		select {
		case <-s.exited:
			s.t.Fatalf("the server exited (%v) before logging %q", s.err, substr)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the server did not log %q within %v", substr, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and checks the contract's shutdown: exit status 0
// within 5 s, and nothing on stdout but log lines.
func (s *server) stop() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.t.Fatal("the server is still running 5s after SIGTERM")
	}
	if s.err != nil {
		s.t.Errorf("the server exited with %v after SIGTERM, want status 0", s.err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if !strings.HasPrefix(l, "time=") {
			s.t.Errorf("stdout line that is not a log line: %q", l)
		}
	}
}

// answer is what the client saw of a call.
type answer struct {
	code            codes.Code
	msg             string
	header, trailer metadata.MD
	retry           time.Duration // the RetryInfo detail's; -1 without one
	elapsed         time.Duration
}

func (a answer) String() string {
	return fmt.Sprintf("%v %q header %v trailer %v retry %v", a.code, a.msg, a.header, a.trailer, a.retry)
}

// check calls Health/Check with the metadata pairs kv.
func (s *server) check(kv ...string) answer {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var header, trailer metadata.MD
	begin := time.Now()
	_, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
	st := status.Convert(err)
	a := answer{code: st.Code(), msg: st.Message(), header: header, trailer: trailer, retry: -1, elapsed: time.Since(begin)}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			a.retry = ri.GetRetryDelay().AsDuration()
		}
	}
	return a
}

func one(md metadata.MD, name string) string {
	if v := md.Get(name); len(v) == 1 {
		return v[0]
	}
	return fmt.Sprintf("%q", md.Get(name))
}

// wantAllowed checks an OK answer with the x-ratelimit-* headers: limit,
// remaining, and a reset in epoch seconds within period from now.
func wantAllowed(t *testing.T, a answer, limit, remaining string, period time.Duration) {
	t.Helper()
	if a.code != codes.OK {
		t.Fatalf("got %v, want OK", a)
	}
	wantFields(t, "header", a.header, limit, remaining, period)
	for _, k := range []string{"x-ratelimit-limit", "retry-after"} {
		if v := a.trailer.Get(k); v != nil {
			t.Errorf("allowed call: trailer %s %q, want none", k, v)
		}
	}
}

func wantFields(t *testing.T, where string, md metadata.MD, limit, remaining string, period time.Duration) {
	t.Helper()
	if got := one(md, "x-ratelimit-limit"); got != limit {
		t.Errorf("%s x-ratelimit-limit %s, want %s", where, got, limit)
	}
	if got := one(md, "x-ratelimit-remaining"); got != remaining {
		t.Errorf("%s x-ratelimit-remaining %s, want %s", where, got, remaining)
	}
	reset, err := strconv.ParseInt(one(md, "x-ratelimit-reset"), 10, 64)
	if now := time.Now().Unix(); err != nil || reset < now || reset > now+int64(period/time.Second)+1 {
		t.Errorf("%s x-ratelimit-reset %s, want epoch seconds within %v of %d", where, one(md, "x-ratelimit-reset"), period, now)
	}
}

// wantDenied checks a ResourceExhausted answer: a RetryInfo detail equal
// to the retry-after trailer, between min and max, the x-ratelimit-*
// fields as trailers and none as headers.
func wantDenied(t *testing.T, a answer, limit string, period, min, max time.Duration) {
	t.Helper()
	if a.code != codes.ResourceExhausted || a.msg != "rate limit exceeded" {
		t.Fatalf("got %v, want ResourceExhausted \"rate limit exceeded\"", a)
	}
	if got := one(a.trailer, "retry-after"); a.retry%time.Second != 0 || got != strconv.Itoa(int(a.retry/time.Second)) {
		t.Errorf("RetryInfo %v, retry-after trailer %s: want the same whole seconds", a.retry, got)
	}
	if a.retry < min || a.retry > max {
		t.Errorf("RetryInfo %v, want %v to %v", a.retry, min, max)
	}
	wantFields(t, "trailer", a.trailer, limit, "0", period)
	for _, k := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"} {
		if v := a.header.Get(k); v != nil {
			t.Errorf("refused call: header %s %q, want none", k, v)
		}
	}
}

func uniqueKey(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "test-" + hex.EncodeToString(b[:])
}

func TestContract(t *testing.T) {
	t.Run("embedded redis: allowed with headers, refused with trailers", func(t *testing.T) {
		s := start(t, nil, "-limit", "2", "-period", "1m")
		if s.countLog("embedded in-process miniredis") != 1 {
			t.Error("the log does not say the Redis is embedded")
		}
		wantAllowed(t, s.check(), "2", "1", time.Minute)
		wantAllowed(t, s.check(), "2", "0", time.Minute)
		// A token of 2 per minute comes back every 30s.
		wantDenied(t, s.check(), "2", time.Minute, 29*time.Second, 30*time.Second)
		s.stop()
	})
	t.Run("env vars, and the key from metadata", func(t *testing.T) {
		s := start(t, []string{"LIMIT=1", "PERIOD=1m", "KEY=metadata:x-api-key", "ALGORITHM=sliding_window"})
		wantAllowed(t, s.check("x-api-key", "k1"), "1", "0", time.Minute)
		wantDenied(t, s.check("x-api-key", "k1"), "1", time.Minute, time.Second, time.Minute)
		wantAllowed(t, s.check("x-api-key", "k2"), "1", "0", time.Minute)
		wantAllowed(t, s.check(), "1", "0", time.Minute) // keyed by the peer IP
		wantDenied(t, s.check(), "1", time.Minute, time.Second, time.Minute)
		s.stop()
	})
	t.Run("reflection is not limited", func(t *testing.T) {
		s := start(t, nil, "-limit", "1", "-period", "1m")
		for range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
			if err == nil {
				err = stream.Send(&reflectionpb.ServerReflectionRequest{
					MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			}
			var r *reflectionpb.ServerReflectionResponse
			if err == nil {
				r, err = stream.Recv()
			}
			cancel()
			if err != nil || !strings.Contains(r.String(), "grpc.health.v1.Health") {
				t.Fatalf("ListServices: %v, %v; want the health service", r, err)
			}
		}
		wantAllowed(t, s.check(), "1", "0", time.Minute)
		s.stop()
	})
	t.Run("a flag beats its env var", func(t *testing.T) {
		s := start(t, []string{"LIMIT=1"}, "-limit", "3")
		wantAllowed(t, s.check(), "3", "2", time.Second)
		s.stop()
	})
	for _, fail := range []string{"open", "closed"} {
		t.Run("fail "+fail+" with Redis gone", func(t *testing.T) {
			mr := miniredis.RunT(t)
			s := start(t, nil, "-redis", "redis://"+mr.Addr()+"/0", "-fail", fail, "-timeout", "500ms", "-limit", "2", "-period", "1m")
			wantAllowed(t, s.check(), "2", "1", time.Minute)
			mr.Close()
			// Fail open is bounded: the local fallback holds the key to what
			// Redis last left it (1), or to this instance's share if Redis
			// had not counted the fleet yet (one unit per 32 minutes): one
			// call passes, without x-ratelimit-* headers, the next is
			// refused as a limit refuses. Both passed before.
			for i := range 2 {
				a := s.check()
				if a.elapsed > 2*time.Second {
					t.Errorf("the answer took %v with -timeout 500ms", a.elapsed)
				}
				switch {
				case fail == "open" && i == 0 && a.code != codes.OK:
					t.Errorf("call %d: got %v, want OK", i+1, a)
				case fail == "open" && i == 0:
					if v := a.header.Get("x-ratelimit-remaining"); v != nil {
						t.Errorf("fail open: header x-ratelimit-remaining %q, want none", v)
					}
				case fail == "open" && (a.code != codes.ResourceExhausted || a.retry < time.Second || one(a.trailer, "retry-after") == ""):
					t.Errorf("call %d: got %v, want ResourceExhausted with a retry-after", i+1, a)
				case fail == "open":
					if v := a.trailer.Get("x-ratelimit-remaining"); v != nil {
						t.Errorf("fail open, refused: trailer x-ratelimit-remaining %q, want none", v)
					}
				case a.code != codes.Unavailable || a.retry != time.Second || one(a.trailer, "retry-after") != "1":
					t.Errorf("got %v, want Unavailable, a RetryInfo of 1s and retry-after 1", a)
				}
			}
			s.stop()
		})
	}
	t.Run("real redis, shared by two servers", func(t *testing.T) {
		redistest.Real(t) // skips (fails under CI) without REDIS_URL
		url := os.Getenv("REDIS_URL")
		a := start(t, nil, "-redis", url, "-key", "metadata:x-api-key", "-limit", "2", "-period", "1m")
		b := start(t, []string{"REDIS_URL=" + url, "KEY=metadata:x-api-key", "LIMIT=2", "PERIOD=1m"})
		shared(t, a, b)
	})
	t.Run("redis cluster, shared by two servers", func(t *testing.T) {
		seeds := redistest.ClusterAddrs(t) // skips (fails under CI) without REDIS_CLUSTER_ADDRS
		a := start(t, nil, "-redis-cluster", strings.Join(seeds, ","), "-key", "metadata:x-api-key", "-limit", "2", "-period", "1m")
		b := start(t, []string{"REDIS_CLUSTER_ADDRS=" + seeds[0], "KEY=metadata:x-api-key", "LIMIT=2", "PERIOD=1m"})
		shared(t, a, b)
	})
}

// shared checks that servers a and b share one limit of 2 a minute.
func shared(t *testing.T, a, b *server) {
	t.Helper()
	key := uniqueKey(t)
	wantAllowed(t, a.check("x-api-key", key), "2", "1", time.Minute)
	wantAllowed(t, b.check("x-api-key", key), "2", "0", time.Minute)
	wantDenied(t, a.check("x-api-key", key), "2", time.Minute, 29*time.Second, 30*time.Second)
	a.stop()
	b.stop()
}

// TestInvalidConfig: a value the server cannot use is an exit status 1
// and a message that names the flag; -h is the usage and status 0.
func TestInvalidConfig(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"-key", "header:X-API-Key"}, nil, "-key"},
		{nil, []string{"LIMIT=0"}, "-limit ($LIMIT)"},
		{[]string{"-fail", "sometimes"}, nil, "-fail"},
		{[]string{"-redis", "http://nope"}, nil, "-redis"},
	} {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = baseEnv(tt.env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), tt.want) {
			t.Errorf("%q %q: %v, %q; want exit status 1 naming %s", tt.args, tt.env, err, out, tt.want)
		}
	}
	out, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-redis-cluster") || !strings.Contains(string(out), "$KEY") {
		t.Errorf("-h: %v, %q; want the usage, with the env vars, and status 0", err, out)
	}
}
