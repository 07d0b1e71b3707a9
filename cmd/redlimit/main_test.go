package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/clock"
	"github.com/redlimit/redlimit/internal/observe"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// cli runs the command as a user would, with no environment, and returns
// what it printed and its exit status.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, func(string) string { return "" }, &out, &errb)
	return out.String(), errb.String(), code
}

// cliJSON runs the command with -json and decodes its output into v.
func cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errs, code := cli(t, append([]string{"-json"}, args...)...)
	if code != 0 {
		t.Fatalf("redlimit -json %s: exit %d: %s%s", strings.Join(args, " "), code, out, errs)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("redlimit -json %s: %v in %s", strings.Join(args, " "), err, out)
	}
}

type inspectOut struct {
	Key    string      `json:"key"`
	States []stateJSON `json:"states"`
}

// cliSuite runs every subcommand against rdb, reached with conn (the
// -redis or -redis-cluster flag), plain and -json, under a prefix of its
// own: the state of 3 requests taken by an httplimit Policy named "api"
// for client 192.0.2.7, inspected, reset, and an override set, read and
// deleted; then doctor.
func cliSuite(t *testing.T, rdb redis.UniversalClient, conn ...string) {
	ctx := context.Background()
	prefix := fmt.Sprintf("redlimit-clitest:%s:%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	l, err := core.New(rdb, core.WithPrefix(prefix), core.WithLogger(nil), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Reset(ctx, "api:ip:192.0.2.7"); _ = l.Close() })
	lim := core.Limit{Rate: 10, Period: 24 * time.Hour} // Redis' clock runs: refills by 0.001 in 8.6s
	for range 3 {
		if _, err := l.Allow(ctx, 1, lim.For("api:ip:192.0.2.7")); err != nil {
			t.Fatal(err)
		}
	}
	flags := append(conn, "-prefix", prefix, "-name", "api")

	out, errs, code := cli(t, append(flags, "inspect", "192.0.2.7")...)
	if code != 0 || !strings.Contains(out, "token_bucket layer 0  "+prefix+":{api:ip:192.0.2.7}:tb4  TTL ") ||
		!strings.Contains(out, "  tokens       7\n") {
		t.Errorf("inspect: exit %d\n%s%s\nwant the token bucket with 7 tokens", code, out, errs)
	}
	var in inspectOut
	cliJSON(t, &in, append(flags, "inspect", "192.0.2.7")...)
	if len(in.States) != 1 || in.Key != "api:ip:192.0.2.7" || in.States[0].TTLMillis <= 0 {
		t.Fatalf("inspect -json: %+v; want one token bucket with a TTL", in)
	}
	if tokens, _ := in.States[0].Fields["tokens"].(float64); math.Floor(tokens) != 7 {
		t.Errorf("inspect -json: %+v; want one token bucket with 7 tokens and a TTL", in)
	}

	var reset struct{ Deleted []string }
	cliJSON(t, &reset, append(flags, "reset", "192.0.2.7")...)
	if len(reset.Deleted) != 1 || !strings.HasSuffix(reset.Deleted[0], ":tb4") {
		t.Errorf("reset -json: deleted %v, want the token bucket", reset.Deleted)
	}
	out, _, code = cli(t, append(flags, "inspect", "192.0.2.7")...)
	if code != 1 || !strings.HasPrefix(out, "api:ip:192.0.2.7: no state") {
		t.Errorf("inspect after reset: exit %d, %q; want 1 and no state", code, out)
	}
	out, _, code = cli(t, append(flags, "reset", "192.0.2.7")...)
	if code != 1 || !strings.HasPrefix(out, "api:ip:192.0.2.7: no state") {
		t.Errorf("reset of nothing: exit %d, %q; want 1 and no state", code, out)
	}
	overrideSuite(t, rdb, prefix, flags)
	doctorSuite(t, flags, conn)
}

// overrideSuite sets, reads and deletes an override, and checks the
// Limiter's own Overrides sees what the command wrote.
func overrideSuite(t *testing.T, rdb redis.UniversalClient, prefix string, flags []string) {
	ctx := context.Background()
	o, err := core.NewOverrides(rdb, prefix, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Delete(ctx, "acme") })
	out, errs, code := cli(t, append(flags, "override", "set", "acme", "100/min", "-ttl", "1h")...)
	if code != 0 || out != "acme: 100/min for 1h0m0s\n" {
		t.Errorf("override set: exit %d, %q %s", code, out, errs)
	}
	l, found, err := o.Get(ctx, "acme")
	for i := 0; err != nil && i < 20; i++ { // its reads give up after 50ms: a loaded machine
		l, found, err = o.Get(ctx, "acme")
	}
	if err != nil || !found || l.String() != "100/min" {
		t.Errorf("core.Overrides.Get after set: %v %v %v; want 100/min", l, found, err)
	}
	var got overrideJSON
	cliJSON(t, &got, append(flags, "override", "get", "acme")...)
	if got.Name != "acme" || !got.Found || got.Limit != "100/min" || got.TTLMilli <= 59*60*1000 || got.TTLMilli > 60*60*1000 {
		t.Errorf("override get -json: %+v; want 100/min with a TTL of about 1h", got)
	}
	if out, _, code := cli(t, append(flags, "override", "set", "acme", "5/s burst=10")...); code != 0 || out != "acme: 5/s burst=10 until deleted\n" {
		t.Errorf("override set without -ttl: exit %d, %q", code, out)
	}
	cliJSON(t, &got, append(flags, "override", "get", "acme")...)
	if got.Limit != "5/s burst=10" || got.TTLMilli != -1 {
		t.Errorf("override get -json of a lasting override: %+v; want ttl_ms -1", got)
	}
	if out, _, code := cli(t, append(flags, "override", "delete", "acme")...); code != 0 || !strings.HasPrefix(out, "acme: override deleted") {
		t.Errorf("override delete: exit %d, %q", code, out)
	}
	if out, _, code := cli(t, append(flags, "override", "get", "acme")...); code != 0 || out != "acme: no override\n" {
		t.Errorf("override get after delete: exit %d, %q", code, out)
	}
	if _, errs, code := cli(t, append(flags, "override", "set", "acme", "lots")...); code != 1 || !strings.Contains(errs, `"lots"`) {
		t.Errorf("override set of a bad limit: exit %d, %q; want 1 and the error", code, errs)
	}
}

// doctorSuite runs doctor plain and -json: every check there, none failed.
func doctorSuite(t *testing.T, flags, conn []string) {
	want := []string{"server", "functions", "memory", "replicas", "time", "latency"}
	if conn[0] == "-redis-cluster" {
		want = append(want, "slots")
	}
	var doc struct {
		OK       bool
		Findings []finding
	}
	cliJSON(t, &doc, append(flags, "doctor")...)
	out, errs, code := cli(t, append(flags, "doctor")...)
	if !doc.OK || code != 0 {
		t.Errorf("doctor: exit %d, %+v\n%s%s", code, doc, out, errs)
	}
	for _, f := range doc.Findings {
		if f.Check == "replicas" && (!strings.Contains(f.Value, "min-replicas-to-write") ||
			conn[0] == "-redis-cluster" && !strings.Contains(f.Value, "lag")) {
			t.Errorf("doctor: replicas %q; want each replica's lag and min-replicas-*", f.Value)
		}
	}
	for _, check := range want {
		found := false
		for _, f := range doc.Findings {
			found = found || f.Check == check && f.Value != "" && f.Meaning != ""
		}
		if !found || !strings.Contains(out, " "+check+" ") {
			t.Errorf("doctor: no %s check in %+v\n%s", check, doc.Findings, out)
		}
	}
}

func TestRealRedis(t *testing.T) {
	rdb := redistest.Real(t)
	cliSuite(t, rdb, "-redis", os.Getenv("REDIS_URL"))
}

func TestCluster(t *testing.T) {
	rdb := redistest.Cluster(t)
	cliSuite(t, rdb, "-redis-cluster", strings.Join(redistest.ClusterAddrs(t), ","))
}

// TestUsage: wrong words, flags and connections are usage errors (exit
// 2) that say what is wrong, before any Redis is asked.
func TestUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "usage: redlimit"},
		{[]string{"-redis", "redis://127.0.0.1:1", "frobnicate"}, "usage: redlimit"},
		{[]string{"-redis", "redis://127.0.0.1:1", "inspect"}, "which client"},
		{[]string{"-redis", "redis://127.0.0.1:1", "override", "set", "x"}, "usage: redlimit"},
		{[]string{"-nosuchflag", "doctor"}, "-nosuchflag"},
		{[]string{"doctor"}, "no Redis"},
		{[]string{"-redis", "x://", "doctor"}, "-redis"},
		{[]string{"-redis", "redis://a", "-redis-cluster", "b:1", "doctor"}, "exclusive"},
	} {
		_, errs, code := cli(t, tt.args...)
		if code != 2 || !strings.Contains(errs, tt.want) {
			t.Errorf("redlimit %q: exit %d, %q; want 2 and %q", tt.args, code, errs, tt.want)
		}
	}
	var out, errb bytes.Buffer
	env := map[string]string{"REDIS_URL": "redis://a", "REDIS_CLUSTER_ADDRS": "b:1"}
	if code := run(context.Background(), []string{"doctor"}, func(k string) string { return env[k] }, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "both set") {
		t.Errorf("both env vars: exit %d, %q; want 2", code, errb.String())
	}
}

// TestInspectMini checks the plain output of every algorithm's state, and
// that a Redis which does not answer is exit 1 with the error.
func TestInspectMini(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	ctx := context.Background()
	l, err := core.New(rdb, core.WithLogger(nil), clock.With[core.Option](func() time.Time { return redistest.Epoch }), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	for a := range core.Algorithm(observe.Algorithms) {
		if _, err := l.Allow(ctx, 1, core.Limit{Algorithm: a, Rate: 10, Period: time.Minute}.For("k")); err != nil {
			t.Fatal(err)
		}
	}
	url := "redis://" + mr.Addr()
	out, errs, code := cli(t, "-redis", url, "-core", "inspect", "k")
	for _, want := range []string{"token_bucket layer 0", "sliding_window layer 0", "sliding_window_counter layer 0",
		"fixed_window layer 0", "leaky_bucket layer 0", "concurrency layer 0", "  in_flight    1\n",
		"  window_start 2026-01-02T03:04:00Z (5s ago)\n", "  next_lapse   2026-01-02T03:05:05Z (in 1m0s)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect: no %q in\n%s%s (exit %d)", want, out, errs, code)
		}
	}
	mr.Close()
	if _, errs, code := cli(t, "-redis", url, "-timeout", "1s", "-core", "inspect", "k"); code != 1 || !strings.Contains(errs, "redlimit: ") {
		t.Errorf("a Redis gone: exit %d, %q; want 1 and the error", code, errs)
	}
}

// TestDoctorFindings: on a private redis-server that may evict and has no
// redlimit library, doctor warns about eviction and says the library is
// not loaded, exit 0; once the server is gone, it fails, exit 1.
func TestDoctorFindings(t *testing.T) {
	s := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	url := "redis://" + s.Addr()
	var doc struct {
		OK       bool
		Findings []finding
	}
	cliJSON(t, &doc, "-redis", url, "doctor")
	status := map[string]string{}
	for _, f := range doc.Findings {
		status[f.Check] = f.Status + ": " + f.Value
	}
	if !doc.OK || !strings.HasPrefix(status["memory"], "warn: ") || !strings.Contains(status["memory"], "allkeys-lru") ||
		!strings.Contains(status["functions"], "not loaded") && !strings.Contains(status["functions"], "FUNCTION refused") {
		t.Errorf("doctor on an evicting server: %v", status)
	}
	s.Kill()
	out, _, code := cli(t, "-redis", url, "-timeout", "2s", "doctor")
	if code != 1 || !strings.HasPrefix(out, "fail  server") {
		t.Errorf("doctor on a dead server: exit %d, %q; want 1 and the server failing", code, out)
	}
}
