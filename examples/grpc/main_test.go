package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/core"
)

var listening = regexp.MustCompile(`listening on (\S+?)"?(\s|$)`)

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
	if m := listening.FindStringSubmatch(w.buf.String()); m != nil && !w.sent {
		w.addr <- m[1]
		w.sent = true
	}
	return len(p), nil
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestRun runs the server in-process (under the race detector when the
// tests have it) on the embedded Redis: 8 concurrent Checks under a
// limit of 3 a minute get 3 OK and 5 ResourceExhausted, and run returns
// nil once its context ends, within the contract's 5 s even with a
// Health/Watch stream open (told NOT_SERVING, then cut).
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &logWriter{addr: make(chan string, 1)}
	env := map[string]string{"LIMIT": "3", "PERIOD": "1m", "TIMEOUT": "2s", "KEY": "metadata:x-api-key"}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, log)
	}()
	var addr string
	select {
	case addr = <-log.addr:
	case err := <-done:
		t.Fatalf("run returned %v before listening; log:\n%s", err, log)
	case <-time.After(10 * time.Second):
		t.Fatalf("no \"listening on\" line within 10s; log:\n%s", log)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	client := healthpb.NewHealthClient(cc)
	codesSeen := make([]codes.Code, 8)
	var wg sync.WaitGroup
	for i := range codesSeen {
		wg.Go(func() {
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			codesSeen[i] = status.Code(err)
		})
	}
	wg.Wait()
	slices.Sort(codesSeen)
	if want := []codes.Code{0, 0, 0, 8, 8, 8, 8, 8}; !slices.Equal(codesSeen, want) {
		t.Errorf("8 concurrent Checks: %v, want 3 OK and 5 ResourceExhausted", codesSeen)
	}
	// A stream, under a key of its own (the peer's quota is spent).
	sctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "watcher")
	stream, err := client.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v, %v; want SERVING", r, err)
	}
	begin := time.Now()
	cancel()
	if r, err := stream.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch at shutdown: %v, %v; want NOT_SERVING", r, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("run still running 5s after cancel")
	}
	if _, err := stream.Recv(); err == nil {
		t.Error("the Watch stream is still open after run returned")
	}
	t.Logf("run returned %v after cancel", time.Since(begin).Round(time.Millisecond))
	if t.Failed() {
		t.Logf("log:\n%s", log)
	}
}

// TestParseConfig: defaults, env vars under flags, and errors naming
// the flag.
func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != ":50051" || cfg.coreLimit() != core.PerSecond(10) || cfg.key != "ip" || cfg.failClosed || cfg.timeout != 100*time.Millisecond {
		t.Errorf("defaults: %+v", cfg)
	}
	env := map[string]string{"ADDR": ":9000", "LIMIT": "5", "KEY": "metadata:x-api-key", "FAIL": "closed", "REDIS_CLUSTER_ADDRS": "127.0.0.1:7001"}
	cfg, err = parseConfig([]string{"-limit", "7", "-redis", "redis://127.0.0.1:6379/0"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != ":9000" || cfg.limit != 7 || cfg.key != "metadata:x-api-key" || !cfg.failClosed ||
		cfg.redisURL == "" || cfg.redisCluster != nil {
		t.Errorf("env under flags: %+v", cfg)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-key", "header:X-API-Key"}, "-key"},
		{[]string{"-key", "metadata:x-token-bin"}, "-key"},
		{[]string{"-limit", "0"}, "-limit"},
		{[]string{"-burst", "0"}, "-burst"},
		{[]string{"-period", "0s"}, "-period"},
		{[]string{"-timeout", "0s"}, "-timeout"},
		{[]string{"-redis-cluster", "nope"}, "-redis-cluster"},
		{[]string{"-redis", "redis://a:1", "-redis-cluster", "b:2"}, "exclusive"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		if _, err := parseConfig(tt.args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}
