package main

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/internal/redistest"
)

// referenceFiles are the configurations envoyproxy/ratelimit's README and
// test fixtures document, written anew, one domain a file (units made
// longer where a test counts, so that no window ends mid-test).
var referenceFiles = map[string]string{
	// nesting: a placeholder level, a key without a value under it, and
	// the same key alone at the top
	"messaging.yaml": `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`,
	// the most specific match first: a blocked address, and a value
	// with no limit (a whitelist) beside a key's default
	"edge.yaml": `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    value: 10.0.0.1
  - key: depth
    value: one
    rate_limit: {unit: hour, requests_per_unit: 300}
  - key: depth
    value: two
    descriptors:
      - key: sub
        rate_limit: {unit: hour, requests_per_unit: 300}
`,
	"internal.yaml": `domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit: {unit: hour, requests_per_unit: 100}
`,
	"shadow.yaml": `domain: shadow
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1}
      - key: user
        value: user-b
        rate_limit: {unit: hour, requests_per_unit: 2}
`,
	"replaces.yaml": `domain: replaces
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, unit: hour, requests_per_unit: 5}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          unit: hour
          requests_per_unit: 10
`,
	"metrics.yaml": `domain: metrics
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: hour, requests_per_unit: 20}
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: hour, requests_per_unit: 60}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: hour, requests_per_unit: 100}
`,
	"wild.yaml": `domain: wild
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: hour, requests_per_unit: 20}
  - key: path
    value: /api/*/action
    rate_limit: {unit: hour, requests_per_unit: 20}
  - key: route
    value: /api/*/resource/*/action
    rate_limit: {unit: hour, requests_per_unit: 20}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: file
    value: test1
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: nested
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: hour, requests_per_unit: 20}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit: {unit: hour, requests_per_unit: 60}
`,
}

var marketing = []string{"message_type=marketing,to_number=2061111111", "to_number=2061111111"}

// referenceSteps are requests to referenceFiles' domains, in order, and
// the answers envoyproxy/ratelimit's users expect.
var referenceSteps = []struct {
	domain string
	descs  []string
	want   string
}{
	{"messaging", marketing, "OK; OK 4/5; OK 99/100"},
	{"messaging", marketing, "OK; OK 3/5; OK 98/100"},
	{"messaging", marketing, "OK; OK 2/5; OK 97/100"},
	{"messaging", marketing, "OK; OK 1/5; OK 96/100"},
	{"messaging", marketing, "OK; OK 0/5; OK 95/100"},
	// all or nothing: envoyproxy/ratelimit would count this one in to_number too
	{"messaging", marketing, "OVER_LIMIT; OVER_LIMIT 0/5; OK 95/100"},
	{"messaging", []string{"to_number=2062222222"}, "OK; OK 99/100"},
	{"edge", []string{"remote_address=50.0.0.5"}, "OVER_LIMIT; OVER_LIMIT 0/0"},
	{"edge", []string{"remote_address=50.0.0.1"}, "OK; OK 9/10"},
	{"edge", []string{"remote_address=10.0.0.1"}, "OK; OK"},
	// the request's depth must be the configuration's
	{"edge", []string{"depth=one,sub=x"}, "OK; OK"},
	{"edge", []string{"depth=two"}, "OK; OK"},
	{"edge", []string{"depth=two,sub=x"}, "OK; OK 299/300"},
	{"edge", []string{"depth=two,sub=x,deeper=y"}, "OK; OK"},
	{"internal", []string{"ldap=x", "azure=y"}, "OK; OK 4294967295; OK 99/100"},
	{"shadow", []string{"service=auth,user=user-a"}, "OK; OK 0/1"},
	{"shadow", []string{"service=auth,user=user-a"}, "OK; OK 0/1"},
	{"shadow", []string{"service=auth,user=user-b"}, "OK; OK 1/2"},
	{"shadow", []string{"service=auth,user=user-b"}, "OK; OK 0/2"},
	{"shadow", []string{"service=auth,user=user-b"}, "OVER_LIMIT; OVER_LIMIT 0/2"},
	{"replaces", []string{"key_1=value_1,user=bkthomps"}, "OK; OK 4/5"},
	{"replaces", []string{"key_1=value_1,user=bkthomps", "key_2=value_2,user=bkthomps"}, "OK; OK; OK 9/10"},
	{"replaces", []string{"key_1=value_1,user=bkthomps"}, "OK; OK 3/5"},
	{"wild", []string{"key1=value1"}, "OK; OK 19/20"},
	{"wild", []string{"key1=valueXYZ"}, "OK; OK 19/20"}, // each value its own counter
	{"wild", []string{"key1=valu"}, "OK; OK"},
	{"wild", []string{"path=/api/123/action"}, "OK; OK 19/20"},
	{"wild", []string{"path=/api/123/other"}, "OK; OK"},
	{"wild", []string{"route=/api/v1/resource/123/action"}, "OK; OK 19/20"},
	{"wild", []string{"route=/api/v1/resource/action"}, "OK; OK"},
	{"wild", []string{"files=files/a.pdf"}, "OK; OK 9/10"},
	{"wild", []string{"files=files/b.csv"}, "OK; OK 8/10"}, // one shared counter
	{"wild", []string{"files_no_share=files_no_share/a.pdf"}, "OK; OK 9/10"},
	{"wild", []string{"files_no_share=files_no_share/b.csv"}, "OK; OK 9/10"},
	{"wild", []string{"file=test1"}, "OK; OK 49/50"}, // an exact value before a wildcard
	{"wild", []string{"file=test2"}, "OK; OK 99/100"},
	{"wild", []string{"file=test*"}, "OK; OK 98/100"},
	{"wild", []string{"nested=val1,wild=goo2"}, "OK; OK 19/20"},
	{"wild", []string{"tenant=t1prod,resource=resAv2"}, "OK; OK 59/60"},
	{"wild", []string{"tenant=t2prod,resource=resBv2"}, "OK; OK 58/60"},
	{"unknown", []string{"to_number=1"}, "OK; OK"},
	{"metrics", []string{"key1=unspecified_value"}, "OK; OK 9/10"},
	{"metrics", []string{"key1=value1"}, "OK; OK 19/20"},
	{"metrics", []string{"route=api,http_method=GET,subject_id=123"}, "OK; OK 59/60"},
	{"metrics", []string{"user=alice,action=readfile,resource=documents"}, "OK; OK 99/100"},
}

// referenceSeries are the series envoyproxy/ratelimit's Prometheus mapping
// gives referenceSteps' requests (the first two parts of a stat's name).
var referenceSeries = []string{
	`ratelimit_service_rate_limit_total_hits{domain="metrics",key1="key1_unspecified_value",key2=""} 1`,
	`ratelimit_service_rate_limit_total_hits{domain="metrics",key1="key1_value1",key2=""} 1`,
	`ratelimit_service_rate_limit_total_hits{domain="metrics",key1="route_api",key2="http_method_GET"} 1`,
	`ratelimit_service_rate_limit_total_hits{domain="metrics",key1="user_alice",key2="action_readfile"} 1`,
	`ratelimit_service_rate_limit_over_limit{domain="messaging",key1="message_type_marketing",key2="to_number"} 1`,
	`ratelimit_service_rate_limit_near_limit{domain="messaging",key1="message_type_marketing",key2="to_number"} 1`,
	`ratelimit_service_rate_limit_within_limit{domain="messaging",key1="to_number",key2=""} 6`,
	`ratelimit_service_rate_limit_shadow_mode{domain="shadow",key1="service",key2="user_user-a"} 1`,
	`ratelimit_service_rate_limit_total_hits{domain="wild",key1="files_files/*",key2=""} 2`,
	`ratelimit_service_rate_limit_total_hits{domain="wild",key1="key1_value*",key2=""} 2`,
}

// outsideReference runs envoyproxy/ratelimit's documented configurations
// and matching rules through `redlimit serve`, with the answers its
// users get from envoyproxy/ratelimit; where ours differ on purpose, the
// comment names the item of docs/envoy.md's "Compared with
// envoyproxy/ratelimit" that says why.
func outsideReference(t *testing.T, bin string) {
	rs := redistest.StartServer(t)
	dir := t.TempDir()
	for name, body := range referenceFiles {
		configFile(t, dir, name, body)
	}
	s := serveProcess(t, bin, "redis://"+rs.Addr()+"/0", dir)
	for i, st := range referenceSteps {
		if got := says(s.ask(t, request(st.domain, st.descs...))); got != st.want {
			t.Errorf("step %d %s %v: %s; want %s", i, st.domain, st.descs, got, st.want)
		}
	}
	metrics := get(t, "http://"+s.http+"/metrics")
	for _, want := range referenceSeries {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if keys := rs.Admin(t).Keys(context.Background(), "*ldap*").Val(); len(keys) != 0 {
		t.Errorf("an unlimited descriptor reached Redis: %v", keys)
	}
	referenceRequests(t, s)
}

// referenceRequests: the request's own fields, as envoyproxy/ratelimit
// reads them: hits_addend absent, 0 and set, on the request and on a
// descriptor; a limit sent with a descriptor; malformed requests.
func referenceRequests(t *testing.T, s *served) {
	cost := func(hits uint32, descs ...string) string {
		req := request("internal", descs...)
		req.HitsAddend = hits
		return says(s.ask(t, req))
	}
	for i, tt := range []struct {
		hits  uint32
		descs []string
		want  string
	}{
		{0, []string{"azure=h"}, "OK; OK 99/100"},                  // absent: 1
		{5, []string{"azure=h"}, "OK; OK 94/100"},                  // the request's
		{5, []string{"azure=h+2"}, "OK; OK 92/100"},                // the descriptor's before the request's
		{5, []string{"azure=h+0"}, "OK; OK 92/100"},                // 0: a look
		{0, []string{"azure=h+92"}, "OK; OK 0/100"},                //
		{0, []string{"azure=h+0"}, "OVER_LIMIT; OVER_LIMIT 0/100"}, // "hits_addend 0 at exactly 0 left"
		{0, []string{"azure=i+18446744073709551615"}, "OVER_LIMIT; OVER_LIMIT 0/100"},
	} {
		if got := cost(tt.hits, tt.descs...); got != tt.want {
			t.Errorf("hits %d, %v, step %d: %s; want %s", tt.hits, tt.descs, i, got, tt.want)
		}
	}
	override := request("internal", "route=r")
	override.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	for i, want := range []string{"OK; OK 0/1", "OVER_LIMIT; OVER_LIMIT 0/1"} {
		if got := says(s.ask(t, override)); got != want {
			t.Errorf("a limit in the request, %d: %s; want %s", i, got, want)
		}
	}
	resp := s.ask(t, override)
	if d := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(); d <= 0 || d.Hours() > 1 {
		t.Errorf("duration_until_reset %v; want the rest of the hour", d)
	}
	for _, bad := range []*rlsv3.RateLimitRequest{
		{Descriptors: request("internal", "azure=x").Descriptors},
		{Domain: "internal"},
	} {
		if _, err := s.try(bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v; want INVALID_ARGUMENT", bad, err)
		}
	}
	if got := says(s.ask(t, &rlsv3.RateLimitRequest{Domain: "internal", Descriptors: []*rlv3.RateLimitDescriptor{{}}})); got != "OK; OK" {
		t.Errorf("a descriptor without entries: %s", got)
	}
}
