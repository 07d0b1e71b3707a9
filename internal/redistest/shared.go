package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Without REDIS_URL, Real uses a redis-server this test binary starts
// once, when the server program is on PATH: so the README's plain
// `go test -race work` runs the real-Redis suites rather than skipping
// them, which a passing package's line in a log file would not show. The
// kernel kills the server when the binary exits (Pdeathsig, from a thread
// kept for the binary's life).
var shared struct {
	once sync.Once
	url  string
	err  error
}

// serverOnPath reports whether REDIS_SERVER, or redis-server, is on PATH.
func serverOnPath() (string, bool) {
	name := os.Getenv("REDIS_SERVER")
	if name == "" {
		name = "redis-server"
	}
	bin, err := exec.LookPath(name)
	return bin, err == nil
}

// sharedURL starts the binary's own redis-server the first time, and
// returns its URL.
func sharedURL(bin string) (string, error) {
	shared.once.Do(func() { shared.url, shared.err = startShared(bin) })
	return shared.url, shared.err
}

func startShared(bin string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	// Nothing is written to dir (no persistence); the log goes nowhere.
	args := append(serverArgs(bin, port, os.TempDir()), "--logfile", "")
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends:
		// this one, locked, ends only with the binary.
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
		select {} // keep the thread
	}()
	if err := <-started; err != nil {
		return "", err
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer func() { _ = c.Close() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return "redis://127.0.0.1:" + port + "/0", nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s on port %s does not answer after 10s: %v", bin, port, err)
		}
	}
}
