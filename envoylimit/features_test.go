package envoylimit

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

const simple = `domain: s
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: j
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// TestOverride: a limit Envoy sends with a descriptor (its route's
// configuration) replaces the configured one, for a known domain.
func TestOverride(t *testing.T) {
	_, rdb := redistest.Mini(t)
	r := start(t, rdb, map[string]string{"s.yaml": simple}, Config{})
	o := d("anything=1")
	o.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)}
	for i, want := range []string{"OK; OK 1/2", "OK; OK 0/2", "OVER; OVER 0/2"} {
		resp := r.ask(t, "s", o)
		if got := spell(resp); got != want {
			t.Errorf("request %d: %s, want %s", i, got, want)
		}
		if st := resp.GetStatuses()[0]; st.GetDurationUntilReset().AsDuration() > 5*time.Minute || st.GetCurrentLimit().GetUnitMultiplier().GetValue() != 5 {
			t.Errorf("request %d: %v; want a reset within 5 minutes and the multiplier", i, st)
		}
	}
	if got := spell(r.ask(t, "unknown", o)); got != "OK; OK" {
		t.Errorf("override in an unknown domain: %s, want OK without a limit", got)
	}
	for _, bad := range []*rlv3.RateLimitDescriptor_RateLimitOverride{
		{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_UNKNOWN},
		{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit(99)},
		{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(1 << 31)},
	} {
		o.Limit = bad
		if _, err := r.try("s", 0, o); status.Code(err) != codes.InvalidArgument {
			t.Errorf("override %v: %v; want InvalidArgument", bad, err)
		}
	}
}

// TestNegativeHits: a descriptor with is_negative_hits gives nothing back
// and takes nothing: a refund needs the receipt of what was taken.
func TestNegativeHits(t *testing.T) {
	_, rdb := redistest.Mini(t)
	r := start(t, rdb, map[string]string{"s.yaml": simple}, Config{})
	r.ask(t, "s", d("j=a+5"))
	neg := d("j=a+3")
	neg.IsNegativeHits = true
	if got := spell(r.ask(t, "s", neg)); got != "OK; OK" {
		t.Errorf("negative hits: %s", got)
	}
	if got := spell(r.ask(t, "s", d("j=a+0"))); got != "OVER; OVER 0/5" {
		t.Errorf("after negative hits: %s; want the key still full", got)
	}
}

// TestHeaders: with Config.Headers the response carries the RateLimit
// fields of the descriptor nearest its limit, or of the last that refused.
func TestHeaders(t *testing.T) {
	_, rdb := redistest.Mini(t)
	r := start(t, rdb, map[string]string{"s.yaml": simple}, Config{Headers: true})
	fields := func(ds ...*rlv3.RateLimitDescriptor) string {
		var parts []string
		for _, h := range r.ask(t, "s", ds...).GetResponseHeadersToAdd() {
			parts = append(parts, h.GetKey()+": "+h.GetValue())
		}
		return strings.Join(parts, ", ")
	}
	for i, tt := range []struct {
		ds   []*rlv3.RateLimitDescriptor
		want string
	}{
		{[]*rlv3.RateLimitDescriptor{d("k=a"), d("j=a")}, "RateLimit-Limit: 5, RateLimit-Remaining: 4, RateLimit-Reset: "},
		{[]*rlv3.RateLimitDescriptor{d("k=a+8"), d("j=a")}, "RateLimit-Limit: 10, RateLimit-Remaining: 1, RateLimit-Reset: "},
		{[]*rlv3.RateLimitDescriptor{d("k=a"), d("j=a+4")}, "RateLimit-Limit: 5, RateLimit-Remaining: 3, RateLimit-Reset: "}, // j refused
		{[]*rlv3.RateLimitDescriptor{d("k=a"), d("j=a")}, "RateLimit-Limit: 10, RateLimit-Remaining: 0, RateLimit-Reset: "},
		{[]*rlv3.RateLimitDescriptor{d("nothing=a")}, ""},
		// above the limit, refused without asking: its window, never "retry now"
		{[]*rlv3.RateLimitDescriptor{d("k=b+11")}, "RateLimit-Limit: 10, RateLimit-Remaining: 0, RateLimit-Reset: 60"},
		{[]*rlv3.RateLimitDescriptor{d("k=c+10"), d("j=c+5")}, "RateLimit-Limit: 10, RateLimit-Remaining: 0, RateLimit-Reset: "}, // the first of the nearest
		// both refuse: the last one's fields, as envoyproxy/ratelimit picks them
		{[]*rlv3.RateLimitDescriptor{d("k=c"), d("j=c")}, "RateLimit-Limit: 5, RateLimit-Remaining: 0, RateLimit-Reset: "},
	} {
		got := fields(tt.ds...)
		if !strings.HasPrefix(got, tt.want) || tt.want != "" && strings.HasSuffix(got, "Reset: 0") {
			t.Errorf("request %d: %q; want %q and a reset of at least a second", i, got, tt.want)
		}
	}
	r2 := start(t, rdb, map[string]string{"s.yaml": simple}, Config{})
	if h := r2.ask(t, "s", d("k=a")).GetResponseHeadersToAdd(); h != nil {
		t.Errorf("without Config.Headers: %v", h)
	}
}

// TestMetrics: the series envoyproxy/ratelimit's users alert on count
// each descriptor's hits by what happened to them.
func TestMetrics(t *testing.T) {
	_, rdb := redistest.Mini(t)
	reg := prometheus.NewPedanticRegistry()
	r := start(t, rdb, map[string]string{"m.yaml": `domain: m
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: ip
    value: 50.0.0.5
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: det
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 5}
`}, Config{Metrics: reg})
	r.ask(t, "m", d("k=a+7"))                 // within 7, near 0 (used 7 of 10: the threshold is 8)
	r.ask(t, "m", d("k=a+2"))                 // within 2, near 1
	r.ask(t, "m", d("k=a+2"))                 // over 2
	r.ask(t, "m", d("s=a"), d("s=a"))         // one key twice: 2 hits, 1 over its 1
	r.ask(t, "m", d("ip=50.0.0.5"))           // over
	r.ask(t, "m", d("det=x"), d("det=y"))     // a series per value
	r.ask(t, "m", d("route=api,method=GET"))  // value_to_metric: route_api
	r.ask(t, "m", d("k=b"), d("ip=50.0.0.5")) // k counted in total only
	m := r.srv.metrics
	for _, tt := range []struct {
		vec              *prometheus.CounterVec
		key1, key2, name string
		want             float64
	}{
		{m.total, "k", "", "total", 12}, {m.within, "k", "", "within", 9}, {m.near, "k", "", "near", 1}, {m.over, "k", "", "over", 2},
		{m.total, "s", "", "total", 2}, {m.over, "s", "", "over", 2}, {m.shadow, "s", "", "shadow", 2},
		{m.over, "ip_50_0_0_5", "", "over", 2},
		{m.total, "det_x", "", "total", 1}, {m.total, "det_y", "", "total", 1}, {m.total, "det", "", "total", 0},
		{m.within, "route_api", "method", "within", 1},
	} {
		if got := testutil.ToFloat64(tt.vec.WithLabelValues("m", tt.key1, tt.key2)); got != tt.want {
			t.Errorf("%s{key1=%q,key2=%q} = %v, want %v", tt.name, tt.key1, tt.key2, got, tt.want)
		}
	}
	if got := testutil.ToFloat64(m.loadOK); got != 1 {
		t.Errorf("config_load_success = %v, want 1", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), "ratelimit_service_config_load_error"); err == nil {
		t.Log("(config_load_error is 0)")
	}
}

// TestReload: a changed file is loaded; a bad one is refused with a log
// line and a metric, and the last good configuration stays; fixing it
// loads it.
func TestReload(t *testing.T) {
	_, rdb := redistest.Mini(t)
	reg := prometheus.NewRegistry()
	var logs redistest.LogBuffer
	r := start(t, rdb, map[string]string{"s.yaml": simple}, Config{Metrics: reg}, core.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	m := r.srv.metrics
	path := filepath.Join(r.dir, "s.yaml")
	writeFile(t, path, strings.Replace(simple, "requests_per_unit: 10", "requests_per_unit: 3", 1))
	eventually(t, "reloaded", func() bool { return spell(r.ask(t, "s", d("k=x+0"))) == "OK; OK 3/3" })

	writeFile(t, path, "domain: s\ndescriptors:\n  - key: k\n    ratelimit: {}\n")
	eventually(t, "refused", func() bool { return testutil.ToFloat64(m.loadErr) == 1 })
	if got := spell(r.ask(t, "s", d("k=x+0"))); got != "OK; OK 3/3" {
		t.Errorf("after a bad file: %s; want the last good configuration", got)
	}
	if !strings.Contains(logs.String(), `level=ERROR msg="envoylimit: configuration refused; the last good one stays"`) ||
		!strings.Contains(logs.String(), `unknown key \"ratelimit\"`) {
		t.Errorf("log: %s; want the refusal and why", logs.String())
	}

	// The fix first: a look between the two writes then sees a good
	// configuration either way, and refuses nothing more.
	writeFile(t, path, simple)
	writeFile(t, filepath.Join(r.dir, "t.yaml"), "domain: t\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	eventually(t, "fixed", func() bool { return spell(r.ask(t, "t", d("k=x+0"))) == "OK; OK 1/1" })
	if got := spell(r.ask(t, "s", d("k=x+0"))); got != "OK; OK 10/10" {
		t.Errorf("after the fix: %s", got)
	}
	if err := os.Remove(filepath.Join(r.dir, "t.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a removed file's domain gone", func() bool { return spell(r.ask(t, "t", d("k=x+0"))) == "OK; OK" })
	if got := testutil.ToFloat64(m.loadErr); got != 1 {
		t.Errorf("config_load_error = %v; want 1, one per change of the files\n%s", got, logs.String())
	}
}

// TestReloadSymlinkSwap: a Kubernetes ConfigMap updates by pointing a
// symbolic link at a new directory; that is a change too.
func TestReloadSymlinkSwap(t *testing.T) {
	_, rdb := redistest.Mini(t)
	root := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(root, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "v1", "s.yaml"), simple)
	writeFile(t, filepath.Join(root, "v2", "s.yaml"), strings.Replace(simple, "requests_per_unit: 5", "requests_per_unit: 4", 1))
	conf := filepath.Join(root, "conf")
	must(t, os.Mkdir(conf, 0o755))
	must(t, os.Symlink(filepath.Join(root, "v1"), filepath.Join(root, "..data")))
	must(t, os.Symlink(filepath.Join(root, "..data", "s.yaml"), filepath.Join(conf, "s.yaml")))
	srv, err := New(Config{Limiter: limiter(t, rdb), Path: conf})
	must(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	r := &rig{srv: srv, client: serve(t, srv)}
	if got := spell(r.ask(t, "s", d("j=x+0"))); got != "OK; OK 5/5" {
		t.Fatalf("v1: %s", got)
	}
	must(t, os.Symlink(filepath.Join(root, "v2"), filepath.Join(root, "..data.new")))
	must(t, os.Rename(filepath.Join(root, "..data.new"), filepath.Join(root, "..data")))
	eventually(t, "v2 loaded", func() bool { return spell(r.ask(t, "s", d("j=x+0"))) == "OK; OK 4/4" })
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
