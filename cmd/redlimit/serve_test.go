package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestServe runs `redlimit serve` as the README and docs/envoy.md show it,
// on their example configuration, and speaks Envoy's protocol to it: 10 a
// minute per client IP admits 10 and refuses the 11th; /healthz answers
// and /metrics counts; the end of its context (SIGINT, SIGTERM) drains it
// and it exits 0.
func TestServe(t *testing.T) {
	mr, _ := redistest.Mini(t)
	dir := filepath.Join("..", "..", "envoylimit", "testdata", "example.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb redistest.LogBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "-redis", "redis://" + mr.Addr() + "/0", "-config", dir,
			"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-timeout", "5s"}, func(string) string { return "" }, &out, &errb)
	}()
	addrs := regexp.MustCompile(`gRPC on (\S+), HTTP on (\S+)`)
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m = addrs.FindStringSubmatch(out.String())
	}
	if m == nil {
		t.Fatalf("serve did not start:\n%s%s", out.String(), errb.String())
	}
	cc, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	client := rlsv3.NewRateLimitServiceClient(cc)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.9"}},
	}}}
	for i := range 11 {
		want := rlsv3.RateLimitResponse_OK
		if i == 10 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("request %d: %v, %v; want %v", i, resp, err, want)
		}
	}
	for path, want := range map[string]string{
		"/healthz": "ok",
		"/metrics": `ratelimit_service_rate_limit_over_limit{domain="edge",key1="remote_address",key2=""} 1`,
	} {
		body := get(t, "http://"+m[2]+path)
		if !strings.Contains(body, want) {
			t.Errorf("GET %s: %s\nwant %s", path, body, want)
		}
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d after its context ended; want 0\n%s", c, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}

// TestServeRefuses: a configuration that does not load stops serve at
// once with the file and line; a missing -config is bad usage.
func TestServeRefuses(t *testing.T) {
	mr, _ := redistest.Mini(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "-redis", "redis://" + mr.Addr(), "-config", bad}, 1, bad + `: line 4: a descriptor: unknown key "ratelimit"`},
		{[]string{"serve", "-redis", "redis://" + mr.Addr()}, 2, "usage: redlimit serve"},
		{[]string{"serve", "-config", bad}, 2, "no Redis"},
	} {
		out, errs, code := cli(t, tt.args...)
		if code != tt.code || !strings.Contains(out+errs, tt.want) {
			t.Errorf("redlimit %s: exit %d\n%s%s\nwant exit %d and %q", strings.Join(tt.args, " "), code, out, errs, tt.code, tt.want)
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
