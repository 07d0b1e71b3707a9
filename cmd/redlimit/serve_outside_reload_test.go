package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/internal/redistest"
)

// metric reads one sample from the process's /metrics: the line that
// starts with series (a name, with its labels in braces if any); 0 when
// there is none.
func (s *served) metric(t *testing.T, series string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(get(t, "http://"+s.http+"/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// metricSum adds up the samples of /metrics whose line begins with prefix
// and holds label.
func (s *served) metricSum(t *testing.T, prefix, label string) float64 {
	t.Helper()
	sum := 0.0
	for line := range strings.SplitSeq(get(t, "http://"+s.http+"/metrics"), "\n") {
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, label) {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		sum += f
	}
	return sum
}

// waitFor waits up to 30 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("still not %s after 30s", what)
}

// outsideReloadUnderLoad: configurations A and B swap which of two
// descriptors refuses and which is unlimited, while 8 clients send both
// in every request. Each request is decided under one configuration:
// refused, with exactly one descriptor over its limit and the other
// unlimited. A request decided half under A and half under B would be
// admitted (both unlimited) or refused twice.
func outsideReloadUnderLoad(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	dir := t.TempDir()
	conf := func(refuse, free string) string {
		return fmt.Sprintf("domain: flip\ndescriptors:\n  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: 0}\n"+
			"  - key: %s\n    rate_limit: {unlimited: true}\n", refuse, free)
	}
	configFile(t, dir, "flip.yaml", conf("a", "b"))
	s := serveProcess(t, bin, "redis://"+rs.Addr()+"/0", dir)
	var stop atomic.Bool
	var asked atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				resp, err := s.try(request("flip", "a=1", "b=1"))
				if err != nil {
					t.Error(err)
					return
				}
				asked.Add(1)
				st := resp.GetStatuses()
				over, free := 0, 0
				for _, x := range st {
					if x.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
						over++
					}
					if x.GetLimitRemaining() == math.MaxUint32 {
						free++
					}
				}
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || over != 1 || free != 1 {
					t.Errorf("decided under two configurations: %s", says(resp))
					return
				}
			}
		})
	}
	for i := range 6 {
		if i%2 == 0 {
			configFile(t, dir, "flip.yaml", conf("b", "a"))
		} else {
			configFile(t, dir, "flip.yaml", conf("a", "b"))
		}
		want := float64(i + 2)
		waitFor(t, "reloaded", func() bool { return s.metric(t, "ratelimit_service_config_load_success") >= want })
	}
	stop.Store(true)
	wg.Wait()
	if asked.Load() == 0 {
		t.Fatal("no request answered")
	}
}

// outsideBadReloads: a configuration replaced by one that does not load,
// by an empty file, by a directory without a file, keeps the last good one
// and says why (ERROR with the file and line, config_load_error); a
// Kubernetes ConfigMap's symbolic link swap loads the new one.
func outsideBadReloads(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	root := t.TempDir()
	good := "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n"
	// As a ConfigMap volume: conf/r.yaml -> ..data/r.yaml, ..data -> v1.
	configFile(t, filepath.Join(root, "v1"), "r.yaml", fmt.Sprintf(good, 5))
	conf := filepath.Join(root, "conf")
	must(t, os.Mkdir(conf, 0o755))
	must(t, os.Symlink("v1", filepath.Join(root, "..data")))
	must(t, os.Symlink(filepath.Join("..", "..data", "r.yaml"), filepath.Join(conf, "r.yaml")))
	s := serveProcess(t, bin, "redis://"+rs.Addr()+"/0", conf)
	limitIs := func(n int) func() bool {
		want := fmt.Sprintf("OK; OK %d/%d", n, n)
		return func() bool { return says(s.ask(t, request("r", "k=x+0"))) == want }
	}
	if !limitIs(5)() {
		t.Fatalf("v1: %s", says(s.ask(t, request("r", "k=x+0"))))
	}
	swap := func(v, body string) {
		configFile(t, filepath.Join(root, v), "r.yaml", body)
		must(t, os.Symlink(v, filepath.Join(root, "..data.new")))
		must(t, os.Rename(filepath.Join(root, "..data.new"), filepath.Join(root, "..data")))
	}
	swap("v2", fmt.Sprintf(good, 4))
	waitFor(t, "v2 loaded", limitIs(4))

	errs := 0.0
	for i, bad := range []struct{ body, says string }{
		{"domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `line 4: rate_limit: invalid rate limit unit \"fortnight\"`},
		{"", "empty file"},
		{"domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: -1}\n", `line 4: requests_per_unit: want a whole number from 0 to 4294967295, not \"-1\"`},
		{"domain: r\n  descriptors: [\n", "line 2: mapping values are not allowed"},
	} {
		swap(fmt.Sprintf("bad%d", i), bad.body)
		errs++
		waitFor(t, "refused", func() bool { return s.metric(t, "ratelimit_service_config_load_error") >= errs })
		if !limitIs(4)() {
			t.Errorf("after %q: %s; want the last good configuration", bad.body, says(s.ask(t, request("r", "k=x+0"))))
		}
		if log := s.stderr.String(); !strings.Contains(log, "r.yaml: "+bad.says) {
			t.Errorf("after %q the log does not say %q:\n%s", bad.body, bad.says, log)
		}
	}
	swap("v3", fmt.Sprintf(good, 3))
	waitFor(t, "v3 loaded", limitIs(3))
	if got := s.metric(t, "ratelimit_service_config_load_error"); got != errs {
		t.Errorf("config_load_error = %v; want %v, one per bad configuration", got, errs)
	}
}

// outsideManyFiles: a directory of 300 files, one domain each, all
// loaded, each domain with its own limit; files that are not YAML are
// not read.
func outsideManyFiles(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	dir := t.TempDir()
	const n = 300
	for i := range n {
		configFile(t, dir, fmt.Sprintf("d%03d.yaml", i),
			fmt.Sprintf("domain: d%d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: %d}\n", i, i+1))
	}
	configFile(t, dir, "README.md", "not a configuration")
	s := serveProcess(t, bin, "redis://"+rs.Addr()+"/0", dir)
	for i := range n {
		want := fmt.Sprintf("OK; OK %d/%d", i, i+1)
		if got := says(s.ask(t, request(fmt.Sprintf("d%d", i), "k=v"))); got != want {
			t.Fatalf("domain d%d: %s; want %s", i, got, want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// outsideClusterAllOrNothing: on the shared Redis Cluster (under a key
// prefix of its own), 16 clients at once, each request a shared key of 3
// units and its client's key of 1, in other slots and other calls: exactly
// the 100 requests the shared limit of 300 holds are admitted, and each
// client's key counts exactly its client's admitted requests.
func outsideClusterAllOrNothing(t *testing.T, bin string) {
	cluster := redistest.Cluster(t)
	for i := 0; ; i++ { // no window may end mid-test
		now := redistest.Now(t, cluster)
		if time.Hour-now.Sub(now.Truncate(time.Hour)) > 30*time.Second {
			break
		}
		if i == 60 {
			t.Fatal("Redis' clock stayed at an hour's end for 60 s")
		}
		time.Sleep(time.Second)
	}
	dir := t.TempDir()
	configFile(t, dir, "c.yaml", "domain: c\ndescriptors:\n  - key: shared\n    rate_limit: {unit: hour, requests_per_unit: 300}\n"+
		"  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	s := serveProcess(t, bin, "", dir, "-redis-cluster", strings.Join(redistest.ClusterAddrs(t), ","),
		"-prefix", fmt.Sprintf("envoy-outside:%d", time.Now().UnixNano()))
	const clients, each = 16, 40
	var admitted [clients]atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for range each {
				resp, err := s.try(request("c", fmt.Sprintf("client=%d+1", c), "shared=all+3")) // the client's call first: a refusal gives it back
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					admitted[c].Add(1)
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for c := range clients {
		n := admitted[c].Load()
		total += n
		left := s.ask(t, request("c", fmt.Sprintf("client=%d+0", c))).GetStatuses()[0].GetLimitRemaining()
		if int64(1000-left) != n {
			t.Errorf("client %d: %d admitted, its key counts %d", c, n, 1000-left)
		}
	}
	if total != 100 {
		t.Errorf("%d requests of 3 units admitted under a limit of 300; want exactly 100", total)
	}
}
