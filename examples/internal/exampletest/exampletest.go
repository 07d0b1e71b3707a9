// Package exampletest runs an example server's run function in-process,
// under the race detector when the tests have it, as a smoke test beside
// the black-box contract test of the examples module (examples/contract_test.go).
package exampletest

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// RunFunc is an example's run.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

var listening = regexp.MustCompile(`listening on (\S+?)"?(\s|$)`)

// Smoke starts run on a port of the kernel's choosing, with the embedded
// Redis, a limit of 5 per 10 minutes and -concurrency 100 (never reached),
// reads the bound address from the "listening on" log line, checks GET
// /slow (1 unit), GET /spend?units=2 (1 unit, and 1 more once settled),
// then GET / (the 2 units left allowed, then 429 under a burst of
// concurrent requests), GET /healthz and GET /metrics, then cancels the
// context and expects run to return nil.
func Smoke(t *testing.T, run RunFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &logWriter{addr: make(chan string, 1)}
	env := map[string]string{"LIMIT": "5", "PERIOD": "10m", "TIMEOUT": "2s", "CONCURRENCY": "100"}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-metrics"}, func(k string) string { return env[k] }, log)
	}()
	var addr string
	select {
	case addr = <-log.addr:
	case err := <-done:
		t.Fatalf("run returned %v before listening; log:\n%s", err, log)
	case <-time.After(10 * time.Second):
		t.Fatalf("no \"listening on\" line within 10s; log:\n%s", log)
	}
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("logged %q, want the bound address", addr)
	}
	get := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			return 0
		}
		defer func() { _ = resp.Body.Close() }()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for _, path := range []string{"/slow?ms=1", "/spend?units=2"} {
		if c := get(path); c != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, c)
		}
	}
	codes := make([]int, 8)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() { codes[i] = get("/") })
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[200] != 2 || count[429] != 6 {
		t.Errorf("8 concurrent GET / answered %v, want 2 × 200 and 6 × 429", count)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		if c := get(path); c != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, c)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("run still running 5s after cancel")
	}
	if t.Failed() {
		t.Logf("log:\n%s", log)
	}
}

// logWriter keeps the log and sends the first "listening on" address.
type logWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	addr chan string
	sent bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		if m := listening.FindStringSubmatch(w.buf.String()); m != nil {
			w.addr <- m[1]
			w.sent = true
		}
	}
	return len(p), nil
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
