package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer returns the path of the server program, REDIS_SERVER or
// redis-server (see the package doc), or skips the test (fails it under CI).
func RedisServer(t testing.TB) string {
	t.Helper()
	name := os.Getenv("REDIS_SERVER")
	if name == "" {
		name = "redis-server"
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s is not on PATH (apt-get install -y redis-server, or set REDIS_SERVER); this test starts, kills and restarts its own", name)
	}
	return bin
}

// versions caches the major version of each server program.
var versions sync.Map // path -> int

// majorVersion is the major version bin --version reports ("Redis server
// v=7.0.15 ...", "Valkey server v=8.0.1 ..."), 0 when it does not say.
func majorVersion(bin string) int {
	if v, ok := versions.Load(bin); ok {
		return v.(int)
	}
	out, _ := exec.Command(bin, "--version").Output()
	major := 0
	if _, v, ok := strings.Cut(string(out), "v="); ok {
		digits, _, _ := strings.Cut(v, ".")
		major, _ = strconv.Atoi(digits)
	}
	versions.Store(bin, major)
	return major
}

// serverArgs are StartServer's options for bin: DEBUG (DEBUG SLEEP, say)
// must be enabled from Redis 7 on, and Redis 6.2 refuses the option.
func serverArgs(bin, port, dir string) []string {
	args := []string{
		"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", "redis.log",
	}
	if majorVersion(bin) >= 7 {
		args = append(args, "--enable-debug-command", "yes")
	}
	return args
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if err := ln.Close(); err != nil {
		t.Fatalf("freeing port %s: %v", port, err)
	}
	return port
}

// Server is a redis-server process started by a test, on a loopback port
// of its own, without persistence. Only this test talks to it, so it may be
// killed, paused, restarted, put to sleep and counted exactly.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port string
	argv func(port string) []string // the arguments of bin

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// StartServer starts a redis-server, or REDIS_SERVER (extra are further
// arguments), and waits until it answers; it is killed when the test ends.
// Without the server program the test is skipped (failed under CI).
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: RedisServer(t), dir: t.TempDir()}
	s.argv = func(port string) []string { return append(serverArgs(s.bin, port, s.dir), extra...) }
	s.launch()
	return s
}

// StartProgram starts bin (a Sentinel, say) with the arguments argv gives
// for a port and a working directory, as StartServer does.
func StartProgram(t testing.TB, bin string, argv func(port, dir string) []string) *Server {
	t.Helper()
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	s.argv = func(port string) []string { return argv(port, s.dir) }
	s.launch()
	return s
}

// launch starts s on a free port and arranges for it to be killed when
// the test ends.
func (s *Server) launch() {
	t := s.t
	t.Helper()
	t.Cleanup(s.cleanup)
	var err error
	for range 3 { // the free port may be taken in between
		s.port = FreePort(t)
		if err = s.start(); err == nil {
			return
		}
	}
	t.Fatalf("starting %s: %v", s.bin, err)
}

func (s *Server) Addr() string { return "127.0.0.1:" + s.port }

func (s *Server) start() error {
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
func (s *Server) waitReady(exited chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer func() { _ = c.Close() }() // a probe: its connections' fate is not the server's
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

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "log: " + string(bytes.TrimSpace(b))
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v to redis-server pid %d: %v", sig, cmd.Process.Pid, err)
	}
}

// Kill is kill -9: the server is gone, with all its data, when it returns.
func (s *Server) Kill() {
	s.t.Helper()
	s.signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("redis-server pid %d still running 10s after SIGKILL", s.cmd.Process.Pid)
	}
}

// Restart starts the server again on the same port, after kill.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting redis-server on port %s: %v", s.port, err)
	}
}

// Pause stops the process (SIGSTOP) and waits until it is stopped: the
// kernel still accepts connections for it, but nothing answers.
func (s *Server) Pause() {
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

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
}

func (s *Server) cleanup() {
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

// Client returns a client of the server with ContextTimeoutEnabled, after
// edit (if not nil) has changed its options; closed when the test ends.
func (s *Server) Client(t testing.TB, edit func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true}
	if edit != nil {
		edit(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Admin returns a client for test housekeeping (DEBUG SLEEP, DBSIZE), with
// long timeouts.
func (s *Server) Admin(t testing.TB) *redis.Client {
	return s.Client(t, func(o *redis.Options) {
		o.ContextTimeoutEnabled = false
		o.ReadTimeout = 10 * time.Second
	})
}

// Port is the server's port.
func (s *Server) Port() string { return s.port }

// Dir is the server's working directory.
func (s *Server) Dir() string { return s.dir }

// Pid is the process id of the running server.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// ServerMajor is the major version of the server StartServer runs
// (REDIS_SERVER, or redis-server on the PATH), 0 when it does not say.
func ServerMajor(t testing.TB) int {
	t.Helper()
	return majorVersion(RedisServer(t))
}
