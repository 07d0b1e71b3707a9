package envoylimit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/redlimit/redlimit/internal/redistest"
)

// step is one request and the answer it must get (see spell).
type step struct {
	domain string // "d#3": domain d, the request's hits_addend 3
	descs  []string
	want   string
}

// starter serves configuration files (name to YAML) on the test's Redis.
type starter func(files map[string]string, cfg Config) *rig

// scenarios run on miniredis (TestDecisions), and on a real Redis and a
// Redis Cluster (TestEndToEnd).
var scenarios = []struct {
	name string
	run  func(*testing.T, starter)
}{
	{"basic", decisionsBasic}, {"matching", decisionsMatching}, {"wildcards", decisionsWildcards},
	{"shadow", decisionsShadow}, {"hits", decisionsHits},
}

func TestDecisions(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			sc.run(t, func(files map[string]string, cfg Config) *rig { return start(t, rdb, files, cfg) })
		})
	}
}

func runSteps(t *testing.T, r *rig, steps []step) {
	t.Helper()
	for i, s := range steps {
		ds := make([]*rlv3.RateLimitDescriptor, len(s.descs))
		for j, spec := range s.descs {
			ds[j] = d(spec)
		}
		dom, hits, _ := strings.Cut(s.domain, "#")
		n, _ := strconv.Atoi(hits)
		resp, err := r.try(dom, uint32(n), ds...)
		if err != nil {
			t.Fatalf("step %d %s %v: %v", i, s.domain, s.descs, err)
		}
		if got := spell(resp); got != s.want && (!r.cluster || slotwise(got) != slotwise(s.want)) {
			t.Errorf("step %d %s %v: got %q, want %q", i, s.domain, s.descs, got, s.want)
		}
	}
}

// slotwise spells a refused response as a Cluster may answer it: a
// descriptor in a slot not asked, because another slot refused first, is
// OK without a limit.
func slotwise(spelt string) string {
	if !strings.HasPrefix(spelt, "OVER") {
		return spelt
	}
	parts := strings.Split(spelt, "; ")
	for i, p := range parts[1:] {
		if strings.HasPrefix(p, "OK ") {
			parts[i+1] = "OK"
		}
	}
	return strings.Join(parts, "; ")
}

func decisionsBasic(t *testing.T, start starter) {
	r := start(map[string]string{"messaging.yaml": `
domain: messaging
descriptors:
  # 5 marketing messages a day to a number
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # 100 messages a day to any number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`}, Config{})
	both := []string{"message_type=marketing,to_number=1", "to_number=1"}
	var steps []step
	for i := range 5 {
		steps = append(steps, step{"messaging", both, fmt.Sprintf("OK; OK %d/5; OK %d/100", 4-i, 99-i)})
	}
	steps = append(steps,
		step{"messaging", both, "OVER; OVER 0/5; OK 95/100"},
		// the refused request took nothing from to_number=1
		step{"messaging", []string{"to_number=1"}, "OK; OK 94/100"},
		step{"messaging", []string{"to_number=2"}, "OK; OK 99/100"},
		// unknown: domain, key, value under a key without default, deeper path
		step{"nope", []string{"to_number=1"}, "OK; OK"},
		step{"messaging", []string{"from=1"}, "OK; OK"},
		step{"messaging", []string{"message_type=transactional,to_number=1"}, "OK; OK"},
		step{"messaging", []string{"to_number=1,extra=1"}, "OK; OK"},
		step{"messaging", []string{"message_type=marketing"}, "OK; OK"},
	)
	runSteps(t, r, steps)
}

// TestDecisionsMatching: the most specific configured descriptor decides,
// at the request's depth only, as envoyproxy/ratelimit documents it; an
// unknown, whitelisted, replaced or unlimited descriptor is not counted.
func decisionsMatching(t *testing.T, start starter) {
	r := start(map[string]string{"ref.yaml": reference}, Config{})
	runSteps(t, r, []step{
		{"ref", []string{"key1=value1,subkey1=x"}, "OK; OK 4/5"},
		{"ref", []string{"key1=value1,subkey1=y"}, "OK; OK 4/5"}, // each value its own counter
		{"ref", []string{"key1=value1,subkey1=subvalue1"}, "OK; OK 9/10"},
		{"ref", []string{"key1=other,subkey1=x"}, "OK; OK"},
		{"ref", []string{"key1=value1"}, "OK; OK"},
		{"ref", []string{"key1=value1,subkey1=x,deeper=1"}, "OK; OK"},
		{"ref", []string{"key2=anything"}, "OK; OK 19/20"},
		{"ref", []string{"key2=value3"}, "OK; OK"}, // a value without a limit: whitelisted
		{"ref", []string{"key6=x"}, "OK; OK 4294967295"},
		{"ref", []string{"blocked=50.0.0.5"}, "OVER; OVER 0/0"}, // requests_per_unit 0 refuses all
		{"ref", []string{"blocked=50.0.0.6"}, "OK; OK"},
		// key5's limit replaces key4's where both match; alone, key4 counts
		{"ref", []string{"key4=a", "key5=a"}, "OK; OK; OK 1/2"},
		{"ref", []string{"key4=a"}, "OK; OK 0/1"},
		{"ref", []string{"key4=a", "key5=a"}, "OK; OK; OK 0/2"},
		{"ref", []string{"key4=a"}, "OVER; OVER 0/1"},
		// share_threshold: every value matching files/* meets on one counter
		{"ref", []string{"key8=x,files=files/a"}, "OK; OK 99/100"},
		{"ref", []string{"key8=x,files=files/b"}, "OK; OK 98/100"},
		{"ref", []string{"key8=y,files=files/c"}, "OK; OK 99/100"},
		{"ref", []string{"key8=x,files=other"}, "OK; OK"},
	})
}

func decisionsWildcards(t *testing.T, start starter) {
	r := start(map[string]string{"w.yaml": `domain: w
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: wild
    value: foo1
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: mid
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: multi
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: first
    value: a*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: first
    value: ab*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: any
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: nested
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 20}
`}, Config{})
	runSteps(t, r, []step{
		{"w", []string{"wild=foo"}, "OK; OK 19/20"},
		{"w", []string{"wild=fooX"}, "OK; OK 19/20"}, // its own counter: no share_threshold
		{"w", []string{"wild=foo1"}, "OK; OK 4/5"},   // an exact value beats a wildcard
		{"w", []string{"wild=fo"}, "OK; OK"},
		{"w", []string{"mid=barb"}, "OK; OK 19/20"},
		{"w", []string{"mid=barXYb"}, "OK; OK 19/20"},
		{"w", []string{"mid=bar"}, "OK; OK"},
		{"w", []string{"mid=barbc"}, "OK; OK"},
		{"w", []string{"multi=foobarbaz"}, "OK; OK 9/10"},
		{"w", []string{"multi=fooXbarYbaz"}, "OK; OK 9/10"},
		{"w", []string{"multi=foobazbar"}, "OK; OK"},
		{"w", []string{"first=abc"}, "OK; OK 0/1"}, // the first wildcard in the file
		{"w", []string{"first=ab*"}, "OK; OK 1/2"}, // a pattern's own value is the pattern's, as envoyproxy/ratelimit finds it
		{"w", []string{"any="}, "OK; OK 2/3"},
		{"w", []string{"nested=val1,wild=goose"}, "OK; OK 19/20"},
		{"w", []string{"nested=val1,wild=foo"}, "OK; OK"},
	})
}

// TestDecisionsShadow: a shadow_mode limit is counted and reported, and
// never refuses; in a request another limit refuses, it counts nothing.
func decisionsShadow(t *testing.T, start starter) {
	r := start(map[string]string{"s.yaml": `domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 2, unit: minute}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 2, unit: minute}
  - key: other
    rate_limit: {requests_per_unit: 1, unit: minute}
`}, Config{})
	a, b := "service=s,user=user-a", "service=s,user=user-b"
	runSteps(t, r, []step{
		{"example6", []string{b}, "OK; OK 1/2"},
		{"example6", []string{b}, "OK; OK 0/2"},
		{"example6", []string{b}, "OVER; OVER 0/2"},
		{"example6", []string{a, "other=x"}, "OK; OK 1/2; OK 0/1"},
		{"example6", []string{a, "other=x"}, "OVER; OK; OVER 0/1"}, // refused by other: a not asked
		{"example6", []string{a}, "OK; OK 0/2"},
		{"example6", []string{a}, "OK; OK 0/2"}, // over its limit, and admitted
		{"example6", []string{a, "other=y"}, "OK; OK 0/2; OK 0/1"},
	})
}

// TestDecisionsHits: hits_addend is the cost, the descriptor's over the
// request's; 0 looks without taking; more than the limit is refused
// without asking Redis; several costs in one request are all or nothing.
func decisionsHits(t *testing.T, start starter) {
	r := start(map[string]string{"h.yaml": `domain: h
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: j
    rate_limit: {unit: minute, requests_per_unit: 10}
`}, Config{})
	runSteps(t, r, []step{
		{"h#3", []string{"k=a"}, "OK; OK 7/10"},
		{"h#3", []string{"k=a+2"}, "OK; OK 5/10"}, // the descriptor's over the request's
		{"h", []string{"k=a+0"}, "OK; OK 5/10"},
		{"h", []string{"k=a+6"}, "OVER; OVER 5/10"},
		{"h", []string{"k=a+11"}, "OVER; OVER 0/10"},
		{"h", []string{"k=a+18446744073709551615"}, "OVER; OVER 0/10"},
		{"h", []string{"k=a+0"}, "OK; OK 5/10"},
		{"h", []string{"k=b+5", "j=b+3"}, "OK; OK 5/10; OK 7/10"},
		{"h", []string{"k=b+5", "j=b+8"}, "OVER; OK 5/10; OVER 7/10"}, // k's 5 given back, and its status says so
		{"h", []string{"k=b+0", "j=b+0"}, "OK; OK 5/10; OK 7/10"},
		{"h", []string{"k=c", "k=c"}, "OK; OK 8/10; OK 8/10"}, // one key, counted twice
		{"h", []string{"k=d+10"}, "OK; OK 0/10"},
		{"h", []string{"k=d+0"}, "OVER; OVER 0/10"},
		{"h", []string{"k=e+0", "j=e+11"}, "OVER; OK; OVER 0/10"},
	})
}
