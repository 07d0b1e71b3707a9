// The contract test builds each example server once, starts it as a real
// process, and checks the example contract (README.md in this directory)
// over real HTTP: flags and env vars, routes, headers, bodies, the fail
// policies with Redis gone, in-flight limits shared by processes, the log
// lines, and the graceful shutdown. It runs on the embedded miniredis, and
// also on the real Redis of REDIS_URL and the Redis Cluster of
// REDIS_CLUSTER_ADDRS (skipped when unset, failed under CI=true).
package examples_test

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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redlimit/redlimit/internal/redistest"
)

var frameworks = []string{"nethttp", "gin", "echo", "echov5", "fiber", "fiberv3"}

// binDir holds the example binaries, built once by TestMain before any
// test runs, so no compiler competes with the servers for the CPU.
var binDir string

// TestMain builds the servers, runs the tests, and says which were skipped
// for want of a Redis (redistest.Main), visible without -v.
func TestMain(m *testing.M) {
	dir, err := buildDir()
	if err == nil {
		err = build(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	redistest.Main(m)
}

// buildDir is where the servers are built: beside the test binary when go
// test runs it, in the work directory go test removes afterwards
// (redistest.Main exits, so nothing of ours runs after the tests to remove
// a directory), else a new temporary directory.
func buildDir() (string, error) {
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		if strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "go-build") {
			return filepath.Join(dir, "servers"), nil
		}
	}
	return os.MkdirTemp("", "redlimit-examples-")
}

func build(dir string) error {
	// Without a symbol table and DWARF, linking takes half the time.
	args := []string{"build", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}
	for _, fw := range frameworks {
		args = append(args, "./"+fw)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func binary(fw string) string { return filepath.Join(binDir, fw) }

// contractEnv are the env vars of the contract: the test's own environment
// (CI sets REDIS_URL) must not leak into a server unless a test says so.
var contractEnv = []string{"ADDR", "REDIS_URL", "REDIS_CLUSTER_ADDRS", "ALGORITHM", "LIMIT", "PERIOD", "BURST",
	"KEY", "FAIL", "TIMEOUT", "HEADERS", "MAX_WAIT", "METRICS", "CONCURRENCY", "CONCURRENCY_LEASE"}

func baseEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(contractEnv, name) && name != "GIN_MODE" {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// server is a running example process.
type server struct {
	t      *testing.T
	name   string
	addr   string // host:port
	cmd    *exec.Cmd
	client *http.Client
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed

	mu     sync.Mutex
	lines  []string // stdout
	stderr bytes.Buffer
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

// start runs example fw with args (plus -addr, unless env has ADDR) and env,
// and waits for its "listening on" line.
func start(t *testing.T, fw string, env []string, args ...string) *server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s := launch(t, fw, env, args...)
		err := s.waitListening(15 * time.Second)
		if err == nil {
			return s
		}
		// Between freeAddr and the server's listen, another process may
		// take the port (the embedded miniredis of another server, which
		// binds port 0 first): try another.
		if attempt < 3 && strings.Contains(s.stderrText(), "address already in use") {
			t.Logf("%v; trying another port", err)
			if i := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "ADDR=") }); i >= 0 {
				env = append(slices.Clone(env[:i]), append([]string{"ADDR=" + freeAddr(t)}, env[i+1:]...)...)
			}
			continue
		}
		t.Fatal(err)
	}
}

// launch runs example fw as start says, without waiting.
func launch(t *testing.T, fw string, env []string, args ...string) *server {
	t.Helper()
	s := &server{t: t, name: fw, exited: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}}
	if i := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "ADDR=") }); i >= 0 {
		s.addr = strings.TrimPrefix(env[i], "ADDR=")
	} else {
		s.addr = freeAddr(t)
		args = append([]string{"-addr", s.addr}, args...)
	}
	s.cmd = exec.Command(binary(fw), args...)
	// A generous -timeout, unless the test says otherwise: on a busy 2-core
	// machine a decision may take longer than the default 100ms, and the
	// local fallback's answer would then hide what the test checks.
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
			t.Logf("%s %s\nstdout:\n%s\nstderr:\n%s", fw, strings.Join(args, " "), s.stdout(), s.stderrText())
		}
	})
	return s
}

// waitListening waits for the "listening on" line, and says why not when
// it does not come: the server exited, or timeout passed.
func (s *server) waitListening(timeout time.Duration) error {
	want := "listening on " + s.addr
	for deadline := time.Now().Add(timeout); s.countLog(want) == 0; time.Sleep(10 * time.Millisecond) {
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited (%v) before logging %q: %s", s.name, s.err, want, strings.TrimSpace(s.stderrText()))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not log %q within %v", s.name, want, timeout)
		}
	}
	return nil
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

// countLog counts the stdout lines that contain substr.
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

// logIndex is the index of the first stdout line that contains substr, or
// -1.
func (s *server) logIndex(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.IndexFunc(s.lines, func(l string) bool { return strings.Contains(l, substr) })
}

// line is stdout line i.
func (s *server) line(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines[i]
}

// stop sends SIGTERM and checks the contract's shutdown: exit status 0
// within 5 s, and nothing on stdout but our own log lines.
func (s *server) stop() {
	s.t.Helper()
	// A connection the client dialled but never used is "new" to the
	// server, which waits for it until its shutdown timeout: close them, as
	// a polite client does. Requests in flight stay.
	s.client.CloseIdleConnections()
	begin := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.t.Fatalf("%s still running 5s after SIGTERM", s.name)
	}
	if s.err != nil {
		s.t.Errorf("%s exited with %v after SIGTERM, want status 0", s.name, s.err)
	}
	s.t.Logf("%s exited %v after SIGTERM", s.name, time.Since(begin).Round(time.Millisecond))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if !strings.HasPrefix(l, "time=") {
			s.t.Errorf("stdout line that is not a log line of ours: %q", l)
		}
	}
}

type response struct {
	status  int
	header  http.Header
	body    string
	elapsed time.Duration
}

// get requests path with the given header name/value pairs.
func (s *server) get(path string, header ...string) response {
	s.t.Helper()
	return s.do(http.MethodGet, path, header...)
}

// do sends a request with method to path and reads the whole response.
func (s *server) do(method, path string, header ...string) response {
	s.t.Helper()
	r, err := s.try(context.Background(), method, path, header...)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// try is do without failing the test, for requests from other goroutines
// and requests that may fail (ctx canceled, the server killed).
func (s *server) try(ctx context.Context, method, path string, header ...string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.addr+path, nil)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	begin := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s on %s: %w", method, path, s.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s on %s: reading body: %w", method, path, s.name, err)
	}
	return response{resp.StatusCode, resp.Header, string(body), time.Since(begin)}, nil
}

// kill ends the server with SIGKILL, as a crash would: no shutdown, no
// permit given back.
func (s *server) kill() {
	s.t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		s.t.Fatalf("SIGKILL %s: %v", s.name, err)
	}
	<-s.exited
}

// decisionLine is a line of redlimit_decisions_total in GET /metrics.
var decisionLine = regexp.MustCompile(`(?m)^redlimit_decisions_total\{([^}]*)\} (\S+)$`)

// decisions is how many decisions the server's GET /metrics (-metrics)
// counts with outcome, over every policy and algorithm.
func (s *server) decisions(outcome string) int {
	s.t.Helper()
	r := s.get("/metrics")
	if r.status != http.StatusOK {
		s.t.Fatalf("GET /metrics: %d, want 200", r.status)
	}
	n := 0
	for _, m := range decisionLine.FindAllStringSubmatch(r.body, -1) {
		if strings.Contains(m[1], `outcome="`+outcome+`"`) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				s.t.Fatalf("GET /metrics: %q is no number", m[0])
			}
			n += int(v)
		}
	}
	return n
}

// waitFor polls cond until it holds, and fails the test when it does not
// within timeout: for what the test can observe but not be told of.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
	}
}

var xHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
var ietfHeaders = []string{"RateLimit-Policy", "RateLimit"}

// denyCacheHit matches a Prometheus line of at least one deny cache hit: the
// examples answer a client denied again before its Retry-After locally.
var denyCacheHit = regexp.MustCompile(`(?m)^redlimit_deny_cache_hits_total\{[^}]*\} [1-9]`)

// wantAllowed checks a 200 "ok" from the limited route with the
// X-RateLimit headers: Limit limit, Remaining remaining, Reset in epoch
// seconds from now to now+maxReset.
func wantAllowed(t *testing.T, r response, limit, remaining int, maxReset time.Duration) {
	t.Helper()
	if r.status != http.StatusOK || r.body != "ok" {
		t.Fatalf("got %d %q, want 200 \"ok\"", r.status, r.body)
	}
	wantXHeaders(t, r, limit, remaining, maxReset)
}

func wantXHeaders(t *testing.T, r response, limit, remaining int, maxReset time.Duration) {
	t.Helper()
	if got := r.header.Get("X-RateLimit-Limit"); got != strconv.Itoa(limit) {
		t.Errorf("X-RateLimit-Limit = %q, want %d", got, limit)
	}
	if got := r.header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(remaining) {
		t.Errorf("X-RateLimit-Remaining = %q, want %d", got, remaining)
	}
	now := time.Now()
	reset, err := strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil {
		t.Errorf("X-RateLimit-Reset = %q, want epoch seconds", r.header.Get("X-RateLimit-Reset"))
	} else if reset < now.Add(-r.elapsed).Unix() || reset > now.Add(maxReset+time.Second).Unix() {
		t.Errorf("X-RateLimit-Reset = %d, want epoch seconds in [%d, %d]", reset, now.Unix(), now.Add(maxReset+time.Second).Unix())
	}
}

// wantDenied checks a 429 with Retry-After in [1, maxRetry] seconds and
// the contract's JSON body.
func wantDenied(t *testing.T, r response, maxRetry int) int {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("got %d %q, want 429", r.status, r.body)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > maxRetry {
		t.Errorf("Retry-After = %q, want whole seconds in [1, %d]", r.header.Get("Retry-After"), maxRetry)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if want := fmt.Sprintf(`{"error":"rate limit exceeded","retry_after":%d}`, ra); strings.TrimSpace(r.body) != want {
		t.Errorf("body = %q, want %s", r.body, want)
	}
	return ra
}

func wantNoHeaders(t *testing.T, r response, names ...string) {
	t.Helper()
	for _, h := range names {
		if v, ok := r.header[http.CanonicalHeaderKey(h)]; ok {
			t.Errorf("%s: %q, want none", h, v)
		}
	}
}

func wantHealthy(t *testing.T, s *server, n int) {
	t.Helper()
	for range n {
		if r := s.get("/healthz"); r.status != http.StatusOK {
			t.Fatalf("GET /healthz: %d %q, want 200", r.status, r.body)
		}
	}
}

// uniqueKey is an API key no other run uses, for the shared real Redis.
func uniqueKey(t *testing.T) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "contract-" + t.Name() + "-" + hex.EncodeToString(b)
}

// scenarios run against every framework.
var scenarios = []struct {
	name string
	run  func(t *testing.T, fw string)
}{
	{"defaults", func(t *testing.T, fw string) {
		s := start(t, fw, nil, "-limit", "3", "-period", "1m")
		if s.countLog("embedded in-process miniredis") != 1 {
			t.Errorf("the log does not say once that the embedded miniredis is used")
		}
		// The embedded miniredis cannot tell whether it may evict keys:
		// that is no reason to warn.
		if n := s.countLog("level=WARN"); n != 0 {
			t.Errorf("logged %d warnings at start, want none", n)
		}
		wantHealthy(t, s, 5)
		for i := range 3 {
			wantAllowed(t, s.get("/"), 3, 2-i, time.Minute)
		}
		// A token comes back every 20s.
		r := s.get("/")
		if ra := wantDenied(t, r, 20); ra < 19 {
			t.Errorf("Retry-After = %d, want about 20 (one token per 20s)", ra)
		}
		wantXHeaders(t, r, 3, 0, time.Minute)
		wantHealthy(t, s, 5)
		if r := s.get("/metrics"); r.status != http.StatusNotFound {
			t.Errorf("GET /metrics without -metrics: %d, want 404", r.status)
		}
		s.stop()
	}},
	{"env, and flags win", func(t *testing.T, fw string) {
		addr := freeAddr(t)
		s := start(t, fw, []string{"ADDR=" + addr, "LIMIT=5", "PERIOD=1m", "HEADERS=both", "ALGORITHM=fixed_window",
			"FAIL=open", "TIMEOUT=3s"}, "-limit", "2")
		for i := range 2 {
			r := s.get("/")
			wantAllowed(t, r, 2, 1-i, time.Minute)
			if p := r.header.Get("RateLimit-Policy"); !regexp.MustCompile(`^"[^"]*";q=2;w=60$`).MatchString(p) {
				t.Errorf("RateLimit-Policy = %q, want \"name\";q=2;w=60", p)
			}
			if p := r.header.Get("RateLimit"); !regexp.MustCompile(fmt.Sprintf(`^"[^"]*";r=%d;t=\d+$`, 1-i)).MatchString(p) {
				t.Errorf("RateLimit = %q, want \"name\";r=%d;t=N", p, 1-i)
			}
		}
		wantDenied(t, s.get("/"), 60)
		s.stop()
	}},
	{"key header with IP fallback", func(t *testing.T, fw string) {
		s := start(t, fw, nil, "-key", "header:X-API-Key", "-limit", "2", "-period", "1m", "-algorithm", "sliding_window")
		for i := range 2 {
			wantAllowed(t, s.get("/", "X-API-Key", "alice"), 2, 1-i, time.Minute)
		}
		wantDenied(t, s.get("/", "X-API-Key", "alice"), 60)
		wantAllowed(t, s.get("/", "X-API-Key", "bob"), 2, 1, time.Minute)
		// Without the header: the client IP, which a spoofed
		// X-Forwarded-For must not change.
		for i := range 2 {
			wantAllowed(t, s.get("/", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i)), 2, 1-i, time.Minute)
		}
		wantDenied(t, s.get("/"), 60)
		wantDenied(t, s.get("/", "X-Forwarded-For", "203.0.113.9", "X-Real-IP", "203.0.113.10"), 60)
		wantAllowed(t, s.get("/", "X-API-Key", "carol"), 2, 1, time.Minute)
		s.stop()
	}},
	{"headers ietf", func(t *testing.T, fw string) {
		s := start(t, fw, nil, "-headers", "ietf", "-limit", "1", "-period", "10s")
		r := s.get("/")
		if r.status != http.StatusOK {
			t.Fatalf("got %d, want 200", r.status)
		}
		wantNoHeaders(t, r, xHeaders...)
		if p := r.header.Get("RateLimit-Policy"); !regexp.MustCompile(`^"[^"]*";q=1;w=10$`).MatchString(p) {
			t.Errorf("RateLimit-Policy = %q, want \"name\";q=1;w=10", p)
		}
		if p := r.header.Get("RateLimit"); !regexp.MustCompile(`^"[^"]*";r=0;t=(9|10)$`).MatchString(p) {
			t.Errorf("RateLimit = %q, want \"name\";r=0;t=10", p)
		}
		r = s.get("/")
		wantDenied(t, r, 10)
		wantNoHeaders(t, r, xHeaders...)
		if r.header.Get("RateLimit") == "" {
			t.Errorf("no RateLimit header on the denial")
		}
		s.stop()
	}},
	{"headers none", func(t *testing.T, fw string) {
		s := start(t, fw, []string{"HEADERS=none"}, "-limit", "1", "-period", "10s")
		r := s.get("/")
		if r.status != http.StatusOK {
			t.Fatalf("got %d, want 200", r.status)
		}
		wantNoHeaders(t, r, append(xHeaders, ietfHeaders...)...)
		r = s.get("/")
		wantDenied(t, r, 10) // Retry-After stays
		wantNoHeaders(t, r, append(xHeaders, ietfHeaders...)...)
		s.stop()
	}},
	{"HEAD / is limited like GET /", func(t *testing.T, fw string) {
		// net/http and Fiber route HEAD with GET; Gin and Echo are told to.
		s := start(t, fw, nil, "-limit", "1", "-period", "1m")
		if r := s.do(http.MethodHead, "/"); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("HEAD /: %d, X-RateLimit-Remaining %q; want 200, 0", r.status, r.header.Get("X-RateLimit-Remaining"))
		}
		if r := s.do(http.MethodHead, "/"); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
			t.Errorf("HEAD / again: %d, Retry-After %q; want 429 with Retry-After", r.status, r.header.Get("Retry-After"))
		}
		wantDenied(t, s.get("/"), 60) // one limit for both
		s.stop()
	}},
	{"slow and spend: parameters, one limit with /", func(t *testing.T, fw string) {
		// A sliding window of an hour gives nothing back while the test
		// runs: each request of any limited route takes one unit of it.
		s := start(t, fw, nil, "-algorithm", "sliding_window", "-limit", "100", "-period", "1h")
		n := 0
		limited := func(path string, status int) response {
			t.Helper()
			r := s.get(path)
			n++
			if r.status != status {
				t.Errorf("GET %s: %d %q, want %d", path, r.status, r.body, status)
			}
			// Decided by the limit of GET /, before the handler looks at
			// the query.
			wantXHeaders(t, r, 100, 100-n, time.Hour)
			return r
		}
		for path, least := range map[string]time.Duration{"/slow?ms=0": 0, "/slow": 500 * time.Millisecond, "/slow?ms=300": 300 * time.Millisecond} {
			if r := limited(path, http.StatusOK); r.body != "ok" || r.elapsed < least {
				t.Errorf("GET %s: %q after %v, want \"ok\" after %v or more", path, r.body, r.elapsed, least)
			}
		}
		for _, q := range []string{"ms=-1", "ms=x", "ms=1.5", "ms=10001", "ms=99999999999", "ms=%205"} {
			wantBadRequest(t, limited("/slow?"+q, http.StatusBadRequest), "ms")
		}
		for _, q := range []string{"", "units=", "units=0", "units=1000001", "units=-3", "units=x", "units=2.5"} {
			wantBadRequest(t, limited("/spend?"+q, http.StatusBadRequest), "units")
		}
		// Reporting what it took settles nothing.
		if r := limited("/spend?units=1", http.StatusOK); r.body != "ok" {
			t.Errorf("GET /spend?units=1: %q, want \"ok\"", r.body)
		}
		wantAllowed(t, s.get("/"), 100, 100-n-1, time.Hour)
		s.stop()
	}},
	{"spend settles after the handler", func(t *testing.T, fw string) {
		s := start(t, fw, nil, "-limit", "100", "-period", "1m", "-key", "header:X-API-Key")
		spendDebt(t, s) // keyed by the client IP
		// The most a request may report: a debt of about a week.
		wantAllowed(t, s.get("/spend?units=1000000", "X-API-Key", "max"), 100, 99, time.Minute)
		if ra := wantDenied(t, s.get("/", "X-API-Key", "max"), 1<<30); ra < 599000 {
			t.Errorf("Retry-After = %d after reporting 1000000 units at 100/min, want about 600000", ra)
		}
		s.stop()
	}},
	{"concurrency, and a client that leaves ends the sleep", func(t *testing.T, fw string) {
		s := start(t, fw, nil, "-concurrency", "1", "-metrics", "-limit", "100", "-period", "1h")
		// fasthttp cannot tell a handler that its client left: on Fiber
		// the sleep runs to its end, so it is short there.
		fasthttp := strings.HasPrefix(fw, "fiber")
		path := "/slow?ms=10000"
		if fasthttp {
			path = "/slow?ms=1500"
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			r   response
			err error
		}
		slow := make(chan result, 1)
		begin := time.Now()
		go func() {
			r, err := s.try(ctx, http.MethodGet, path)
			slow <- result{r, err}
		}()
		waitFor(t, 10*time.Second, "GET "+path+" admitted", func() bool { return s.decisions("allowed") == 1 })
		r := s.get("/")
		wantDenied(t, r, 1)                    // a request in flight may end at any moment
		wantXHeaders(t, r, 100, 99, time.Hour) // the rate limit's
		if n := s.decisions("in_flight"); n != 1 {
			t.Errorf("GET /metrics counts %d in_flight decisions, want 1", n)
		}
		if fasthttp {
			if res := <-slow; res.err != nil || res.r.status != http.StatusOK {
				t.Fatalf("GET %s: %d, %v; want 200", path, res.r.status, res.err)
			}
		} else {
			cancel()
			if res := <-slow; res.err == nil {
				t.Fatalf("GET %s: %d after the client canceled it, want an error", path, res.r.status)
			}
		}
		// The permit is back once the handler returns (a denial is
		// remembered for its Retry-After, a second).
		waitFor(t, 8*time.Second, "GET / admitted again", func() bool { return s.get("/").status == http.StatusOK })
		if !fasthttp && time.Since(begin) > 9*time.Second {
			t.Errorf("the permit came back %v after GET %s began: the sleep did not end with the client", time.Since(begin), path)
		}
		s.stop()
	}},
	{"metrics", func(t *testing.T, fw string) {
		s := start(t, fw, []string{"METRICS=true"}, "-limit", "1", "-period", "1m")
		s.get("/")
		wantDenied(t, s.get("/"), 60)
		wantDenied(t, s.get("/"), 60) // from the deny cache
		// GET /metrics is never limited.
		for range 5 {
			r := s.get("/metrics")
			if r.status != http.StatusOK {
				t.Fatalf("GET /metrics: %d, want 200", r.status)
			}
			for _, want := range []string{`redlimit_decisions_total{`, `outcome="allowed"`, `outcome="denied"`} {
				if !strings.Contains(r.body, want) {
					t.Fatalf("GET /metrics lacks %s:\n%s", want, r.body)
				}
			}
			if !denyCacheHit.MatchString(r.body) {
				t.Fatalf("GET /metrics: no deny cache hit after a repeated denial:\n%s", r.body)
			}
		}
		s.stop()
	}},
	{"fail open, redis refusing", func(t *testing.T, fw string) {
		// Fail open is bounded: Redis never answered, so the local fallback
		// assumes 64 instances, and this one's share of 10 a minute is one
		// unit per 64 x 1m / 10 = 384 s. It serves that unit, without rate-limit
		// headers (they would describe the share, not the key), and refuses
		// the rest as a limit does; it was 5 of 5 served before.
		s := start(t, fw, nil, "-redis", "redis://"+freeAddr(t)+"/0", "-timeout", "100ms", "-fail", "open", "-limit", "10", "-period", "1m")
		for i := range 5 {
			r := s.get("/")
			switch {
			case i == 0 && (r.status != http.StatusOK || r.body != "ok"):
				t.Fatalf("request 1: got %d %q, want 200 ok (the share's unit)", r.status, r.body)
			case i > 0:
				wantDenied(t, r, 384)
			}
			wantNoHeaders(t, r, append(xHeaders, ietfHeaders...)...)
			if r.elapsed > time.Second {
				t.Errorf("answered in %v, want within the 100ms timeout (plus a margin)", r.elapsed)
			}
		}
		wantHealthy(t, s, 2)
		if n := s.countLog("redis call failed"); n != 1 {
			t.Errorf("logged the Redis failure %d times, want once", n)
		}
		s.stop()
	}},
	{"fail closed, redis hanging, then back", func(t *testing.T, fw string) {
		mr := miniredis.RunT(t)
		addr := mr.Addr()
		mr.Close()
		hang := hangingRedis(t, addr)
		// 300ms, not 100ms: once Redis is back, the exact answers below must
		// not fail closed on a busy machine (miniredis runs in this process).
		s := start(t, fw, nil, "-redis", "redis://"+addr+"/0", "-timeout", "300ms", "-fail", "closed", "-limit", "2", "-period", "1m")
		for range 3 {
			r := s.get("/")
			if r.status != http.StatusServiceUnavailable {
				t.Fatalf("got %d %q, want 503", r.status, r.body)
			}
			if got := r.header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After = %q, want 1", got)
			}
			if got := strings.TrimSpace(r.body); got != `{"error":"rate limiter unavailable"}` {
				t.Errorf("body = %q", got)
			}
			wantNoHeaders(t, r, xHeaders...)
			if r.elapsed > time.Second {
				t.Errorf("answered in %v, want within the 300ms timeout (plus a margin)", r.elapsed)
			}
		}
		wantHealthy(t, s, 2)
		// Redis comes back on the same address: limiting resumes by itself.
		_ = hang.Close()
		// The socket is released once the blocked Accept unwinds: retry.
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := mr.StartAddr(addr)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("restart miniredis on %s: %v", addr, err)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		r := s.get("/")
		for r.status != http.StatusOK && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			r = s.get("/")
		}
		wantAllowed(t, r, 2, 1, time.Minute)
		wantAllowed(t, s.get("/"), 2, 0, time.Minute)
		wantDenied(t, s.get("/"), 60)
		// Once per change of state, not per request: a slow answer while
		// Redis comes back may add one more failure and recovery.
		if n := s.countLog("redis call failed"); n < 1 || n > 2 {
			t.Errorf("logged the Redis failure %d times, want once (twice at most)", n)
		}
		if n := s.countLog("redis answers again"); n < 1 || n > 2 {
			t.Errorf("logged the recovery %d times, want once (twice at most)", n)
		}
		s.stop()
	}},
	{"leaky bucket max-wait", func(t *testing.T, fw string) {
		// 2 per second: one request leaves every 500ms. Of three at once,
		// one goes at once, one waits ~500ms, and the third, which would
		// wait ~1s > -max-wait, is denied at once.
		s := start(t, fw, nil, "-algorithm", "leaky_bucket", "-limit", "2", "-period", "1s", "-burst", "5", "-max-wait", "700ms")
		var wg sync.WaitGroup
		rs := make([]response, 3)
		for i := range rs {
			wg.Go(func() { rs[i] = s.get("/") })
		}
		wg.Wait()
		slices.SortFunc(rs, func(a, b response) int { return a.status - b.status })
		if rs[0].status != 200 || rs[1].status != 200 || rs[2].status != 429 {
			t.Fatalf("statuses %d %d %d, want 200 200 429", rs[0].status, rs[1].status, rs[2].status)
		}
		wantDenied(t, rs[2], 2)
		if slow := max(rs[0].elapsed, rs[1].elapsed); slow < 300*time.Millisecond || slow > 1500*time.Millisecond {
			t.Errorf("the delayed request took %v, want about 500ms", slow)
		}
		if rs[2].elapsed > 400*time.Millisecond {
			t.Errorf("the denial took %v, want it at once", rs[2].elapsed)
		}
		s.stop()
	}},
	{"graceful shutdown waits for a held request", func(t *testing.T, fw string) {
		// One request leaves per second; the second of two is held ~1s.
		s := start(t, fw, nil, "-algorithm", "leaky_bucket", "-limit", "1", "-period", "1s", "-burst", "2")
		if r := s.get("/"); r.status != http.StatusOK {
			t.Fatalf("got %d, want 200", r.status)
		}
		done := make(chan response)
		go func() { done <- s.get("/") }() // held ~1s
		time.Sleep(300 * time.Millisecond)
		s.stop()
		if r := <-done; r.status != http.StatusOK {
			t.Errorf("the request held during shutdown got %d, want 200", r.status)
		}
	}},
	{"real redis, shared by two servers", func(t *testing.T, fw string) {
		redistest.Real(t) // skips (fails under CI) without REDIS_URL
		url := os.Getenv("REDIS_URL")
		a := start(t, fw, nil, "-redis", url, "-key", "header:X-API-Key", "-limit", "2", "-period", "1m")
		b := start(t, fw, []string{"REDIS_URL=" + url, "KEY=header:X-API-Key", "LIMIT=2", "PERIOD=1m"})
		sharedLimit(t, a, b)
	}},
	{"redis cluster, shared by two servers", func(t *testing.T, fw string) {
		seeds := redistest.ClusterAddrs(t) // skips (fails under CI) without REDIS_CLUSTER_ADDRS
		a := start(t, fw, nil, "-redis-cluster", strings.Join(seeds, ","), "-key", "header:X-API-Key", "-limit", "2", "-period", "1m")
		// One seed is enough, and still a Cluster: keys on the other
		// masters would fail (open, without headers) on a single-node client.
		b := start(t, fw, []string{"REDIS_CLUSTER_ADDRS=" + seeds[0], "KEY=header:X-API-Key", "LIMIT=2", "PERIOD=1m"})
		sharedLimit(t, a, b)
	}},
	{"real redis, spend settles after the handler", func(t *testing.T, fw string) {
		redistest.Real(t) // skips (fails under CI) without REDIS_URL
		s := start(t, fw, nil, "-redis", os.Getenv("REDIS_URL"), "-key", "header:X-API-Key", "-limit", "100", "-period", "1m")
		spendDebt(t, s, "X-API-Key", uniqueKey(t))
		s.stop()
	}},
	{"real redis, concurrency across three servers", func(t *testing.T, fw string) {
		redistest.Real(t) // skips (fails under CI) without REDIS_URL
		concurrencyShared(t, fw, "-redis", "REDIS_URL", os.Getenv("REDIS_URL"))
	}},
	{"redis cluster, spend and concurrency", func(t *testing.T, fw string) {
		seeds := strings.Join(redistest.ClusterAddrs(t), ",") // skips (fails under CI) without REDIS_CLUSTER_ADDRS
		s := start(t, fw, nil, "-redis-cluster", seeds, "-key", "header:X-API-Key", "-limit", "100", "-period", "1m")
		spendDebt(t, s, "X-API-Key", uniqueKey(t))
		s.stop()
		concurrencyShared(t, fw, "-redis-cluster", "REDIS_CLUSTER_ADDRS", seeds)
	}},
}

// sharedLimit checks that two servers on one Redis share one limit per key.
func sharedLimit(t *testing.T, a, b *server) {
	t.Helper()
	if a.countLog("miniredis") != 0 || b.countLog("miniredis") != 0 {
		t.Fatalf("a server uses the embedded miniredis, want the real Redis")
	}
	key := uniqueKey(t)
	wantAllowed(t, a.get("/", "X-API-Key", key), 2, 1, time.Minute)
	wantAllowed(t, b.get("/", "X-API-Key", key), 2, 0, time.Minute)
	wantDenied(t, a.get("/", "X-API-Key", key), 60)
	wantDenied(t, b.get("/", "X-API-Key", key), 60)
	// Fresh keys, spread over a Cluster's slots: each is decided exactly.
	for range 8 {
		wantAllowed(t, a.get("/", "X-API-Key", uniqueKey(t)), 2, 1, time.Minute)
		wantAllowed(t, b.get("/", "X-API-Key", uniqueKey(t)), 2, 1, time.Minute)
	}
	a.stop()
	b.stop()
}

// wantBadRequest checks a 400 with a short text that names the query
// parameter.
func wantBadRequest(t *testing.T, r response, param string) {
	t.Helper()
	if r.status != http.StatusBadRequest {
		return // reported by the caller
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(ct), "text/plain") {
		t.Errorf("Content-Type = %q, want text/plain", ct)
	}
	if body := strings.TrimSpace(r.body); !strings.Contains(body, param) || len(body) > 200 {
		t.Errorf("body = %q, want a short text that names %s", r.body, param)
	}
}

// spendDebt checks GET /spend on a server with -limit 100 -period 1m (a
// token bucket): the request takes one unit and reports 150, settled
// once its handler returns: 50 units below empty, so the next request
// waits for 51 units, 30.6 s at 100 per minute.
func spendDebt(t *testing.T, s *server, header ...string) {
	t.Helper()
	wantAllowed(t, s.get("/spend?units=150", header...), 100, 99, time.Minute)
	r := s.get("/", header...)
	if ra := wantDenied(t, r, 31); ra < 30 {
		t.Errorf("Retry-After = %d after a debt of 50 units, want 31 (51 units at 100/min)", ra)
	}
	wantXHeaders(t, r, 100, 0, 90*time.Second) // 150 units to refill
	wantDenied(t, s.get("/spend?units=1", header...), 31)
}

// concurrencyShared checks -concurrency 2 on three servers sharing the
// Redis that flag (or env, for the third) names as addr: of ten
// simultaneous requests, two are served and eight refused; and the
// permits of a server killed while it holds them lapse after
// -concurrency-lease.
func concurrencyShared(t *testing.T, fw, flag, env, addr string) {
	t.Helper()
	const lease = 2 * time.Second
	args := []string{flag, addr, "-key", "header:X-API-Key", "-limit", "1000", "-period", "1s",
		"-concurrency", "2", "-concurrency-lease", lease.String(), "-metrics"}
	servers := []*server{
		start(t, fw, nil, args...),
		start(t, fw, nil, args...),
		start(t, fw, []string{env + "=" + addr, "KEY=header:X-API-Key", "LIMIT=1000", "PERIOD=1s",
			"CONCURRENCY=2", "CONCURRENCY_LEASE=" + lease.String(), "METRICS=true"}),
	}
	for _, s := range servers {
		if s.countLog("miniredis") != 0 {
			t.Fatalf("%s uses the embedded miniredis, want the real Redis", s.name)
		}
		// A first request opens the server's Redis connection: the ten
		// below are then decided at once.
		wantAllowed(t, s.get("/", "X-API-Key", uniqueKey(t)), 1000, 999, time.Second)
	}

	key := uniqueKey(t)
	rs := make([]response, 10)
	errs := make([]error, len(rs))
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range rs {
		wg.Go(func() {
			<-ready
			rs[i], errs[i] = servers[i%3].try(context.Background(), http.MethodGet, "/slow?ms=1500", "X-API-Key", key)
		})
	}
	close(ready)
	wg.Wait()
	count := map[int]int{}
	for i, r := range rs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		count[r.status]++
		switch r.status {
		case http.StatusOK:
			if r.body != "ok" || r.header.Get("X-RateLimit-Limit") != "1000" {
				t.Errorf("GET /slow?ms=1500: %q, X-RateLimit-Limit %q; want \"ok\", 1000", r.body, r.header.Get("X-RateLimit-Limit"))
			}
		case http.StatusTooManyRequests:
			wantDenied(t, r, 1) // a request in flight may end at any moment
		}
	}
	if count[http.StatusOK] != 2 || count[http.StatusTooManyRequests] != 8 {
		t.Fatalf("10 simultaneous GET /slow?ms=1500 on 3 servers answered %v, want 2 × 200 and 8 × 429", count)
	}
	inFlight := 0
	for _, s := range servers {
		inFlight += s.decisions("in_flight")
	}
	if inFlight != 8 {
		t.Errorf("GET /metrics of the 3 servers count %d in_flight decisions, want 8", inFlight)
	}

	// Server a takes both permits of a fresh key, and is killed.
	a, b, c := servers[0], servers[1], servers[2]
	key = uniqueKey(t)
	allowed := a.decisions("allowed")
	held := make(chan error, 2)
	for range 2 {
		go func() {
			r, err := a.try(context.Background(), http.MethodGet, "/slow?ms=10000", "X-API-Key", key)
			if err == nil {
				err = fmt.Errorf("GET /slow?ms=10000 on %s answered %d before it was killed", a.name, r.status)
			}
			held <- err
		}()
	}
	waitFor(t, 10*time.Second, "both GET /slow?ms=10000 admitted", func() bool { return a.decisions("allowed") == allowed+2 })
	taken := time.Now()
	for _, s := range []*server{b, c} {
		wantDenied(t, s.get("/", "X-API-Key", key), 1)
	}
	a.kill()
	killed := time.Now()
	for range 2 {
		if err := <-held; !strings.Contains(err.Error(), "on "+a.name+":") || strings.Contains(err.Error(), "answered") {
			t.Errorf("a request held by the killed server: %v, want a broken connection", err)
		}
	}
	// The permits lapse a lease after they were taken (or renewed, every
	// half lease, should the kill have come that late).
	waitFor(t, lease+8*time.Second, "a permit of the killed server free", func() bool {
		r, err := b.try(context.Background(), http.MethodGet, "/", "X-API-Key", key)
		return err == nil && r.status == http.StatusOK
	})
	t.Logf("a permit was free %v after it was taken, %v after SIGKILL (lease %v)",
		time.Since(taken).Round(10*time.Millisecond), time.Since(killed).Round(10*time.Millisecond), lease)
	// Both: two requests at once are served.
	waitFor(t, 5*time.Second, "both permits of the killed server free", func() bool {
		var wg sync.WaitGroup
		var ok [2]bool
		for i, s := range []*server{b, c} {
			wg.Go(func() {
				r, err := s.try(context.Background(), http.MethodGet, "/slow?ms=300", "X-API-Key", key)
				ok[i] = err == nil && r.status == http.StatusOK
			})
		}
		wg.Wait()
		return ok[0] && ok[1]
	})
	b.stop()
	c.stop()
}

// hangingRedis listens on addr and never answers, like a Redis that hangs.
func hangingRedis(t *testing.T, addr string) io.Closer {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	h := closerFunc(func() error {
		err := l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		conns = nil
		return err
	})
	t.Cleanup(func() { _ = h.Close() })
	return h
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// long are the scenarios that take a second or more, mostly waiting: the
// restart of Redis, a held request. Each framework has them under CI and
// with REDIS_URL; otherwise only the first one does, so that a plain
// go test stays quick (go test runs only GOMAXPROCS parallel tests at once).
var long = map[string]bool{
	"fail closed, redis hanging, then back":                true,
	"leaky bucket max-wait":                                true,
	"graceful shutdown waits for a held request":           true,
	"concurrency, and a client that leaves ends the sleep": true,
}

// everyFramework reports whether the long scenarios run on every framework.
func everyFramework() bool { return os.Getenv("CI") != "" || os.Getenv("REDIS_URL") != "" }

func TestContract(t *testing.T) {
	for i, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					if long[sc.name] && i > 0 && !everyFramework() {
						redistest.Missing(t, "the long contract scenarios run on %s alone without REDIS_URL or CI", frameworks[0])
					}
					t.Parallel()
					sc.run(t, fw)
				})
			}
		})
	}
}

// TestEvictionWarning checks that a server whose Redis may evict keys (a
// maxmemory, and a policy other than noeviction) says so in its log at
// start, before it listens, and in its metrics.
func TestEvictionWarning(t *testing.T) {
	rs := redistest.StartServer(t, "--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru")
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			s := start(t, fw, nil, "-redis", "redis://"+rs.Addr()+"/0", "-metrics", "-key", "header:X-API-Key")
			warning := s.logIndex("may evict")
			if warning < 0 {
				t.Fatalf("no warning containing %q in the log", "may evict")
			}
			if !strings.Contains(s.line(warning), "level=WARN") {
				t.Errorf("the eviction line is not a warning: %s", s.line(warning))
			}
			if listening := s.logIndex("listening on"); warning > listening {
				t.Errorf("the eviction warning came after the server listened")
			}
			if n := s.countLog("may evict"); n != 1 {
				t.Errorf("logged the eviction risk %d times, want once", n)
			}
			if r := s.get("/metrics"); !strings.Contains(r.body, "\nredlimit_redis_may_evict 1\n") {
				t.Errorf("GET /metrics: no redlimit_redis_may_evict 1:\n%s", r.body)
			}
			wantAllowed(t, s.get("/", "X-API-Key", fw), 10, 9, time.Second) // decided as ever
			s.stop()
		})
	}
}

// TestInvalidConfig checks that a bad flag or env var stops the server
// with a non-zero status and an error naming the flag, and that -h is no
// failure.
func TestInvalidConfig(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want string // on stderr
	}{
		{"bad -limit", []string{"-limit", "many"}, nil, "-limit"},
		{"bad LIMIT", nil, []string{"LIMIT=0"}, "-limit ($LIMIT)"},
		{"bad -algorithm", []string{"-algorithm", "gcra"}, nil, "-algorithm"},
		{"bad HEADERS", nil, []string{"HEADERS=all"}, "$HEADERS (flag -headers)"},
		{"bad -fail", []string{"-fail", "shut"}, nil, "-fail"},
		{"bad -key", []string{"-key", "cookie:id"}, nil, "-key"},
		{"bad -redis", []string{"-redis", "http://x"}, nil, "-redis"},
		{"bad -addr", []string{"-addr", "256.0.0.1:x"}, nil, "-addr"},
		{"bad CONCURRENCY", nil, []string{"CONCURRENCY=-1"}, "-concurrency ($CONCURRENCY)"},
		{"bad -concurrency-lease", []string{"-concurrency-lease", "0s"}, nil, "-concurrency-lease"},
	}
	for i, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			for j, tt := range tests {
				if i > 0 && j > 1 && !everyFramework() {
					break // the parsing is shared: two cases show the server exits on them
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				cmd := exec.CommandContext(ctx, binary(fw), tt.args...)
				cmd.Env = baseEnv(tt.env...)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				cancel()
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() == 0 {
					t.Errorf("%s: got %v, want a non-zero exit status", tt.name, err)
				}
				if !strings.Contains(stderr.String(), tt.want) {
					t.Errorf("%s: stderr %q does not name %s", tt.name, stderr.String(), tt.want)
				}
			}
			out, err := exec.Command(binary(fw), "-h").Output()
			if err != nil {
				t.Errorf("-h: %v, want exit status 0", err)
			}
			if !bytes.Contains(out, []byte("-max-wait")) || !bytes.Contains(out, []byte("$REDIS_CLUSTER_ADDRS")) {
				t.Errorf("-h prints no usage:\n%s", out)
			}
		})
	}
}
