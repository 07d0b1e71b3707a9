package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// The tests of this file drive `redlimit serve` from outside, as Envoy and
// its operators do: the command built as a user builds it, run as a
// process of its own, spoken to over gRPC with go-control-plane's client,
// on a redis-server each test starts for itself (so that it can count
// every key, pause, kill and restart it).

// TestServeOutside builds the command once and runs the checks from
// outside on it.
func TestServeOutside(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "redlimit")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tt := range outsideChecks {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, bin) })
	}
}

var outsideChecks = []struct {
	name string
	run  func(t *testing.T, bin string)
}{
	{"reference", outsideReference},
	{"reload under load", outsideReloadUnderLoad},
	{"bad reloads", outsideBadReloads},
	{"many files", outsideManyFiles},
	{"hostile sizes", outsideHostileSizes},
	{"distinct values", outsideDistinctValues},
	{"redis paused", outsideRedisPaused},
	{"redis restarted", outsideRedisRestarted},
	{"drain", outsideDrain},
	{"cluster all or nothing", outsideClusterAllOrNothing},
}

// served is one `redlimit serve` process and Envoy's client of it.
type served struct {
	cmd    *exec.Cmd
	client rlsv3.RateLimitServiceClient
	http   string
	stderr *redistest.LogBuffer
	exited chan struct{}
}

// serveProcess starts bin serve on redis (a URL; "" when extra names
// the Redis) with the configuration at path and the extra flags, and waits
// until it listens. It is stopped
// (SIGTERM) when the test ends.
func serveProcess(t *testing.T, bin, redis, path string, extra ...string) *served {
	t.Helper()
	args := []string{"serve", "-config", path, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-timeout", "2s"}
	if redis != "" {
		args = append(args, "-redis", redis)
	}
	args = append(args, extra...)
	s := &served{cmd: exec.Command(bin, args...), stderr: &redistest.LogBuffer{}, exited: make(chan struct{})}
	s.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	s.cmd.Stderr = s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan []string, 1)
	go func() {
		re := regexp.MustCompile(`gRPC on (\S+), HTTP on (\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- m
			}
		}
	}()
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { s.stop(t) })
	var m []string
	select {
	case m = <-addrs:
	case <-s.exited:
		t.Fatalf("redlimit serve exited: %s", s.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("redlimit serve does not listen after 30s: %s", s.stderr.String())
	}
	cc, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	s.client, s.http = rlsv3.NewRateLimitServiceClient(cc), m[2]
	return s
}

// stop ends the process as an orchestrator does, SIGTERM, and fails the
// test if it does not exit 0.
func (s *served) stop(t *testing.T) {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		if code := s.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("redlimit serve exited %d after SIGTERM: %s", code, s.stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		t.Errorf("redlimit serve still running 30s after SIGTERM")
	}
}

// ask sends one request and fails the test on an error.
func (s *served) ask(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.try(req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

func (s *served) try(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.client.ShouldRateLimit(ctx, req)
}

// request is a request of domain with descriptors spelt "k=v,k2=v2", a
// trailing "+N" for the descriptor's hits_addend.
func request(domain string, descs ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, spec := range descs {
		d := &rlv3.RateLimitDescriptor{}
		if i := strings.LastIndex(spec, "+"); i >= 0 {
			var n uint64
			if _, err := fmt.Sscan(spec[i+1:], &n); err != nil {
				panic(spec)
			}
			d.HitsAddend = wrapperspb.UInt64(n)
			spec = spec[:i]
		}
		for kv := range strings.SplitSeq(spec, ",") {
			k, v, _ := strings.Cut(kv, "=")
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// says spells a response: its overall code, then each status's code and,
// where it has a limit, remaining/limit ("OVER; OK 3/5; OVER 0/0").
func says(resp *rlsv3.RateLimitResponse) string {
	parts := []string{resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		p := st.GetCode().String()
		if l := st.GetCurrentLimit(); l != nil {
			p += fmt.Sprintf(" %d/%d", st.GetLimitRemaining(), l.GetRequestsPerUnit())
		} else if st.GetLimitRemaining() != 0 {
			p += fmt.Sprintf(" %d", st.GetLimitRemaining())
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// configFile writes a configuration file into dir (made if needed).
func configFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path+".tmp", []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	return path
}

// limitKeys lists the keys in Redis but the fleet's: the Limiter's local
// fallback registers each instance under "<prefix>:fleet" (the command's
// prefix, ratelimit), a key that must expire within 15 s of the last
// renewal (docs/limits.md). Any other key is a limit's.
func limitKeys(t *testing.T, adm *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	iter := adm.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); k != "ratelimit:fleet" {
			keys = append(keys, k)
		} else if ttl := adm.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 15*time.Second {
			t.Errorf("the fleet key %s has TTL %v; want at most 15s", k, ttl)
		}
	}
	must(t, iter.Err())
	return keys
}
