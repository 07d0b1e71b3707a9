package reliability

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// missing skips a test whose prerequisite is absent, loudly, or fails it
// under CI, where every reliability test must run.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("under CI=%s: %s; this test must not be skipped there", os.Getenv("CI"), msg)
	}
	t.Skipf("SKIPPED: %s", msg)
}

// redisServer returns the path of redis-server, or skips the test.
func redisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		missing(t, "redis-server is not on PATH (apt-get install -y redis-server); this test starts, kills and restarts its own")
	}
	return bin
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// server is a redis-server process started by this test, on a loopback port
// of its own, without persistence. Only this test talks to it, so it may be
// killed, paused, restarted, put to sleep and counted exactly.
type server struct {
	t    testing.TB
	bin  string
	dir  string
	port string
	argv func(port string) []string // the arguments of bin

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// startServer starts a redis-server (extra are further arguments) and
// waits until it answers; it is killed when the test ends.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	s := &server{t: t, bin: redisServer(t), dir: t.TempDir()}
	s.argv = func(port string) []string {
		return append([]string{
			"--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			"--dir", s.dir, "--logfile", "redis.log",
			"--enable-debug-command", "yes",
		}, extra...)
	}
	s.launch()
	return s
}

// launch starts s on a free port and arranges for it to be killed when
// the test ends.
func (s *server) launch() {
	t := s.t
	t.Helper()
	t.Cleanup(s.cleanup)
	var err error
	for range 3 { // the free port may be taken in between
		s.port = freePort(t)
		if err = s.start(); err == nil {
			return
		}
	}
	t.Fatalf("starting %s: %v", s.bin, err)
}

func (s *server) addr() string { return "127.0.0.1:" + s.port }

func (s *server) start() error {
	cmd := exec.Command(s.bin, s.argv(s.port)...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return s.waitReady(exited)
}

// waitReady polls PING until the server answers, for at most 10 s.
func (s *server) waitReady(exited chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s on port %s exited: %s", s.bin, s.port, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on port %s does not answer after 10s: %v; %s", s.bin, s.port, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "log: " + string(bytes.TrimSpace(b))
}

func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v to redis-server pid %d: %v", sig, cmd.Process.Pid, err)
	}
}

// kill is kill -9: the server is gone, with all its data, when it returns.
func (s *server) kill() {
	s.t.Helper()
	s.signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("redis-server pid %d still running 10s after SIGKILL", s.cmd.Process.Pid)
	}
}

// restart starts the server again on the same port, after kill.
func (s *server) restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting redis-server on port %s: %v", s.port, err)
	}
}

// pause stops the process (SIGSTOP) and waits until it is stopped: the
// kernel still accepts connections for it, but nothing answers.
func (s *server) pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			return // no procfs: the signal is delivered at once anyway
		}
		// pid (comm) state ...: the state follows the last ')'.
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && (f[0] == "T" || f[0] == "t") {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server pid %d not stopped 5s after SIGSTOP", s.cmd.Process.Pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// resume continues a paused server (SIGCONT).
func (s *server) resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
}

func (s *server) cleanup() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-exited
}

// client returns a client of the server with ContextTimeoutEnabled, after
// edit (if not nil) has changed its options; closed when the test ends.
func (s *server) client(t testing.TB, edit func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true}
	if edit != nil {
		edit(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// admin returns a client for test housekeeping (DEBUG SLEEP, DBSIZE), with
// long timeouts.
func (s *server) admin(t testing.TB) *redis.Client {
	return s.client(t, func(o *redis.Options) {
		o.ContextTimeoutEnabled = false
		o.ReadTimeout = 10 * time.Second
	})
}

// patient is the timeout of Limiters in tests about exactness rather than
// latency, so that a 2-core CI machine busy with other packages' tests
// does not turn a slow answer into a failure.
const patient = time.Second

// eventually polls cond every few milliseconds until it holds, and fails
// the test if it does not within d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unique returns a string no other run shares, for keys on a shared Redis.
func unique(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return "reltest:" + name + ":" + hex.EncodeToString(b[:])
}

// counter is a go-redis hook that counts the commands a client sends, so a
// test can tell whether a call touched Redis at all. A new connection's
// handshake (HELLO, CLIENT SETINFO) is not counted: it is go-redis', not
// the Limiter's.
type counter struct {
	cmds  atomic.Int64
	evals atomic.Int64 // EVAL (not EVALSHA): a script was (re)loaded
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
			return next(ctx, cmd) // the connection's own handshake
		}
		c.cmds.Add(1)
		if cmd.Name() == "eval" {
			c.evals.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			switch cmd.Name() {
			case "hello", "client", "auth", "select":
			default:
				c.cmds.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// logRecorder is a slog.Handler that keeps "LEVEL message" of each record.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Level.String()+" "+r.Message)
	h.mu.Unlock()
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) records() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.recs...)
}

// isTimeout reports an error that means "Redis did not answer in time".
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) ||
		(errors.As(err, &ne) && ne.Timeout())
}
