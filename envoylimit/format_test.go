package envoylimit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestFormatRefused: every file envoyproxy/ratelimit refuses is refused
// (its test fixtures' cases, written anew), and so are our own checks, each
// with an error that names the file, the line and the problem.
func TestFormatRefused(t *testing.T) {
	for _, tt := range []struct{ name, body, want string }{
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n", `line 5: rate_limit: invalid rate limit unit "foo"`},
		{"bad yaml", "'''\n", "c.yaml: line 2: found unexpected end of stream"},
		{"bad indentation", "domain: r\n  descriptors: [\n", "c.yaml: line 2: mapping values are not allowed"},
		{"empty file", "", "empty file"},
		{"empty domain", "descriptors:\n", "line 1: the file has no domain"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "line 3: descriptor has empty key"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", `line 5: duplicate descriptor composite key "k_v"`},
		{"duplicate default", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: k\n      - key: k\n", `line 6: duplicate descriptor composite key "a.k"`},
		{"duplicate wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v*\n  - key: k\n    value: v*\n", `duplicate descriptor composite key "k_v*"`},
		{"misspelled rate_limit", "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: day\n", `line 4: a descriptor: unknown key "ratelimit"`},
		{"misspelled requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n", `line 6: rate_limit: unknown key "requestsperunit"`},
		{"non-map list", "domain: d\ndescriptors:\n  - a\n  - b\n", "line 3: a descriptor: want a mapping"},
		{"non-string key", "0.25: d\ndescriptors:\n", `line 1: the file: key "0.25" is not a string`},
		{"key given twice", "domain: d\ndomain: e\n", `line 2: the file: key "domain" given twice`},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n", "line 7: should not have an empty replaces entry"},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n", "replaces should not contain name of same descriptor"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n", "should not specify rate limit unit when unlimited"},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", `share_threshold needs a wildcard value (with '*'), not "v"`},
		{"quota_mode", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n", "line 4: quota_mode is not supported"},
		{"two documents", "domain: d\n---\ndomain: e\n", "more than one YAML document"},
		{"negative requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: -1\n", `line 6: requests_per_unit: want a whole number from 0 to 4294967295, not "-1"`},
		{"shadow_mode not a boolean", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes please\n", `line 4: shadow_mode: want true or false, not "yes please"`},
		{"requests_per_unit above 2^32", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 4294967296\n", `line 6: requests_per_unit: want a whole number from 0 to 4294967295, not "4294967296"`},
		{"descriptors not a list", "domain: d\ndescriptors: k\n", "line 2: descriptors: want a list"},
		{"value a mapping", "domain: d\ndescriptors:\n  - key: k\n    value: {a: b}\n", "line 4: value: want a single value"},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      algorithm: gcra\n", `line 5: rate_limit: core: invalid limit: unknown algorithm "gcra"`},
		{"leaky bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      algorithm: leaky_bucket\n", "algorithm leaky_bucket does not fit Envoy"},
		{"concurrency", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      algorithm: concurrency\n", "algorithm concurrency does not fit Envoy"},
		{"burst without a bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      burst: 10\n", "burst is for algorithm token_bucket, not fixed_window"},
		{"burst too large", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      algorithm: token_bucket\n      burst: 2000000000000\n", "burst 2000000000000 is above 2^40"},
		{"calendar of an hour", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 5\n      calendar: UTC\n", "calendar is for units day, week and month"},
		{"calendar of a bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      algorithm: token_bucket\n      calendar: UTC\n", "under fixed_window, not day under token_bucket"},
		{"calendar unknown zone", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      calendar: Mars/Olympus\n", `calendar "Mars/Olympus"`},
		{"unlimited with algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      algorithm: token_bucket\n", "unlimited takes no algorithm"},
		{"unlimited with overdraft", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      overdraft: true\n", "unlimited takes no algorithm, burst, calendar or overdraft"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.yaml")
			writeFile(t, path, tt.body)
			_, err := load(dir, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("load = %v; want an error naming %s and %q", err, path, tt.want)
			}
		})
	}
}

// TestFormatDirectory: every .yaml and .yml file of a directory is read,
// dot files and others are not, and a domain in two files is refused.
func TestFormatDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: a\n")
	writeFile(t, filepath.Join(dir, "b.yml"), "domain: b\n")
	writeFile(t, filepath.Join(dir, ".c.yaml"), "not: read\n")
	writeFile(t, filepath.Join(dir, "README.md"), "not: read\n")
	rs, err := load(dir, nil)
	if err != nil || strings.Join(rs.names(), ",") != "a,b" {
		t.Fatalf("load = %v, %v; want domains a and b", rs, err)
	}
	writeFile(t, filepath.Join(dir, "c.yaml"), "\n\ndomain: a\n")
	if _, err := load(dir, nil); err == nil || !strings.Contains(err.Error(), `c.yaml: line 3: domain "a" is configured in `+filepath.Join(dir, "a.yaml")) {
		t.Errorf("load = %v; want the duplicate domain named with both files", err)
	}
	must(t, os.Remove(filepath.Join(dir, "c.yaml")))
	// a link to nothing (a file deleted, a swap half done) is an error, not
	// a domain that quietly goes unlimited
	must(t, os.Symlink(filepath.Join(dir, "gone.yaml"), filepath.Join(dir, "d.yaml")))
	if _, err := load(dir, nil); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "d.yaml")) {
		t.Errorf("load with a dangling link = %v; want an error naming it", err)
	}
	// A file removed between the directory's listing and its reading is
	// the directory changing, not a bad configuration: reload looks again
	// and counts nothing (TestReload counted a second refusal without
	// this); a link that leads nowhere is the configuration's error.
	if _, err := stampOf([]string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "removed.yaml")}); !errors.Is(err, errChanging) {
		t.Errorf("stampOf with a file removed = %v; want errChanging", err)
	}
	if _, err := stampOf([]string{filepath.Join(dir, "d.yaml")}); err == nil || errors.Is(err, errChanging) {
		t.Errorf("stampOf of a dangling link = %v; want the configuration's error", err)
	}
	empty := t.TempDir()
	if _, err := load(empty, nil); err == nil || !strings.Contains(err.Error(), "no .yaml or .yml file") {
		t.Errorf("load(empty dir) = %v; want an error", err)
	}
	if _, err := load(filepath.Join(dir, "missing.yaml"), nil); err == nil {
		t.Error("load(missing file) succeeded")
	}
}

// reference is a file as envoyproxy/ratelimit's documentation writes
// them, every field of its format used: it loads as is.
const reference = `# every field of envoyproxy/ratelimit's format
domain: ref
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: Second
          requests_per_unit: 10
        shadow_mode: true
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key2
    value: value3
  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1
  - key: key5
    rate_limit:
      replaces:
        - name: key4_rate_limit
      unit: week
      requests_per_unit: 2
  - key: key6
    rate_limit:
      unlimited: true
  - key: key7
    detailed_metric: true
    rate_limit:
      unit: month
      requests_per_unit: 70
  - key: key8
    value_to_metric: true
    metadata:
      name: service_1
      nested: {a: [1, 2]}
    descriptors:
      - key: files
        value: files/*
        share_threshold: true
        rate_limit:
          unit: year
          requests_per_unit: 100
  - key: blocked
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: number
    value: 12
    quota_mode: false
`

func TestFormatReference(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ref.yaml"), reference)
	rs, err := load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	top := rs.domains["ref"].top
	for _, tt := range []struct {
		n    *node
		want core.Limit
	}{
		{top["key1"].exact["value1"].children["subkey1"].any, core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Second}},
		{top["key7"].any, core.Limit{Algorithm: core.FixedWindow, Rate: 70, Period: 30 * 24 * time.Hour}},
		{top["key8"].any.children["files"].wild[0], core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: 365 * 24 * time.Hour}},
		{top["blocked"].exact["50.0.0.5"], core.Limit{Algorithm: core.FixedWindow, Period: time.Second}},
	} {
		if tt.n.limit.rule != tt.want {
			t.Errorf("%s_%s: %+v, want %+v", tt.n.key, tt.n.value, tt.n.limit.rule, tt.want)
		}
	}
	if n := top["number"].exact["12"]; n == nil || n.limit != nil {
		t.Errorf("number_12: %+v; want a value read as text, without a limit", n)
	}
}

// TestFormatExtensions: algorithm, burst and calendar become the Limit.
func TestFormatExtensions(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "x.yaml"), `domain: x
descriptors:
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 10}
  - key: sw
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window}
  - key: swc
    rate_limit: {unit: day, requests_per_unit: 1000, algorithm: sliding_window_counter}
  - key: cal
    rate_limit: {unit: month, requests_per_unit: 10000, calendar: Europe/Berlin}
  - key: week
    rate_limit: {unit: WEEK, requests_per_unit: 7, calendar: UTC, algorithm: fixed_window}
`)
	rs, err := load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	top := rs.domains["x"].top
	for k, want := range map[string]core.Limit{
		"tb":   {Algorithm: core.TokenBucket, Rate: 60, Period: time.Minute, Burst: 10},
		"sw":   {Algorithm: core.SlidingWindow, Rate: 100, Period: time.Hour},
		"swc":  {Algorithm: core.SlidingWindowCounter, Rate: 1000, Period: 24 * time.Hour},
		"cal":  {Algorithm: core.FixedWindow, Rate: 10000, Calendar: core.Monthly, Location: berlin},
		"week": {Algorithm: core.FixedWindow, Rate: 7, Calendar: core.Weekly, Location: time.UTC},
	} {
		got := top[k].any.limit.rule
		if got.Location != nil && want.Location != nil && got.Location.String() == want.Location.String() {
			got.Location = want.Location
		}
		if got != want {
			t.Errorf("%s: %+v, want %+v", k, got, want)
		}
	}
}
