package envoylimit

import (
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestHostileClient sends what a hostile or broken Envoy could, through
// gRPC: too many descriptors or entries, huge values, values built to make
// one descriptor's key another's, unknown domains, and the extremes of
// hits_addend. Each gets a clear answer, and no descriptor reaches
// another's counter.
func TestHostileClient(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	r := start(t, rdb, map[string]string{"h.yaml": `domain: h
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: f
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: f
    rate_limit: {unit: hour, requests_per_unit: 1}
`, "colon.yaml": `domain: "x:y"
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
`, "x.yaml": `domain: x
descriptors:
  - key: "y:k"
    rate_limit: {unit: hour, requests_per_unit: 1}
`}, Config{})
	hostileBounds(t, r)
	hostileKeys(t, r)
	hostileNoRedis(t, r, mr.CommandCount)
}

// hostileBounds: past the bounds of a request, INVALID_ARGUMENT.
func hostileBounds(t *testing.T, r *rig) {
	many := make([]*rlv3.RateLimitDescriptor, maxDescriptors+1)
	for i := range many {
		many[i] = d(fmt.Sprintf("a=%d", i))
	}
	if _, err := r.try("h", 0, many...); status.Code(err) != codes.InvalidArgument {
		t.Errorf("%d descriptors: %v; want InvalidArgument", len(many), err)
	}
	if resp, err := r.try("h", 0, many[:maxDescriptors]...); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("%d descriptors, 8 calls of the Limiter: %v, %v; want OK", maxDescriptors, spell(resp), err)
	}
	long := d(strings.Repeat("e=1,", maxEntries) + "e=1")
	if _, err := r.try("h", 0, long); status.Code(err) != codes.InvalidArgument {
		t.Errorf("%d entries: %v; want InvalidArgument", len(long.GetEntries()), err)
	}
	for _, tt := range []struct{ domain, desc string }{{"", "a=1"}, {"h", ""}} {
		var ds []*rlv3.RateLimitDescriptor
		if tt.desc != "" {
			ds = append(ds, d(tt.desc))
		}
		if _, err := r.try(tt.domain, 0, ds...); status.Code(err) != codes.InvalidArgument {
			t.Errorf("domain %q, descriptors %q: %v; want InvalidArgument", tt.domain, tt.desc, err)
		}
	}
}

// hostileKeys: no value, however built, reaches another descriptor's
// counter.
func hostileKeys(t *testing.T, r *rig) {
	// A megabyte value is a key like another (core hashes long keys), and
	// two that differ in their last byte are two keys.
	big := strings.Repeat("v", 1<<20)
	runSteps(t, r, []step{
		{"h", []string{"a=" + big + "1"}, "OK; OK 0/1"},
		{"h", []string{"a=" + big + "2"}, "OK; OK 0/1"},
		{"h", []string{"a=" + big + "1"}, "OVER; OVER 0/1"},
		// a literal '*' value is not the shared pattern's counter
		{"h", []string{"f=files/a"}, "OK; OK 0/1"},
		{"h", []string{"f=*files/*"}, "OK; OK 0/1"},
		{"h", []string{"f=files/b"}, "OVER; OVER 0/1"},
		// a ':' in a domain is not the start of a key
		{"x:y", []string{"k=v"}, "OK; OK 0/1"},
		{"x", []string{"y:k=v"}, "OK; OK 0/1"},
	})

	// Separators in a value: the one entry (a, "x,b=y") is not the two
	// entries (a, x), (b, y).
	one := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "a", Value: "x,b=y"}}}
	for i, want := range []string{"OK; OK 0/1", "OVER; OVER 0/1"} {
		if got := spell(r.ask(t, "h", one)); got != want {
			t.Errorf("(a, \"x,b=y\") %d: %s, want %s", i, got, want)
		}
	}
	runSteps(t, r, []step{{"h", []string{"a=x,b=y"}, "OK; OK 0/1"}})
}

// hostileNoRedis: what needs no Redis asks none of it (commands counts
// miniredis' commands).
func hostileNoRedis(t *testing.T, r *rig, commands func() int) {
	// Unknown domains and descriptors, however many, never reach Redis.
	before := commands()
	for i := range 200 {
		r.ask(t, fmt.Sprintf("unknown-%d", i), d("a=1"))
		r.ask(t, "h", d(fmt.Sprintf("zz=%d", i)), d("a=1,b=2,c=3"))
	}
	if n := commands() - before; n != 0 {
		t.Errorf("unknown domains and descriptors ran %d Redis commands; want 0", n)
	}
	// hits_addend beyond any limit is refused without a command.
	before = commands()
	runSteps(t, r, []step{
		{"h#4294967295", []string{"a=fresh"}, "OVER; OVER 0/1"},
		{"h", []string{"a=fresh+18446744073709551615", "a=fresh+1"}, "OVER; OVER 0/1; OVER 0/1"},
	})
	if n := commands() - before; n != 0 {
		t.Errorf("hits above the limit ran %d Redis commands; want 0", n)
	}
}

// TestSeriesBound: however many values a client sends under
// detailed_metric, the series stop at maxSeries, and the hits beyond go to
// the configured name.
func TestSeriesBound(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxSeries + 100 {
		m.counters("d", fmt.Sprintf("k_%d", i), "")
	}
	if len(m.set) != maxSeries {
		t.Errorf("%d series; want %d", len(m.set), maxSeries)
	}
	if m.counters("d", "k_new", "") != nil || m.counters("d", "k_1", "") == nil {
		t.Error("a new name past the bound has series, or an old one lost its own")
	}
}
