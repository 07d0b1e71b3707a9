package exampleapp

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseConfig(t *testing.T) {
	defaults := Config{Addr: ":8080", Limit: 10, Period: time.Second, Key: "ip", Timeout: 100 * time.Millisecond,
		Headers: httplimit.Headers{httplimit.XRateLimit{}}, ConcurrencyLease: 10 * time.Second}
	with := func(f func(*Config)) Config {
		c := defaults
		f(&c)
		return c
	}
	tests := []struct {
		name string
		args []string
		env  func(string) string
		want Config
	}{
		{"defaults", nil, env(), defaults},
		{"flags", []string{"-addr", "127.0.0.1:0", "-redis", "redis://h:1/2", "-algorithm", "leaky_bucket",
			"-limit", "5", "-period", "2s", "-burst", "7", "-key", "header:X-API-Key", "-fail", "closed",
			"-timeout", "50ms", "-headers", "both", "-max-wait", "300ms", "-metrics", "-concurrency", "3", "-concurrency-lease", "2s"}, env(),
			with(func(c *Config) {
				c.Addr, c.RedisURL, c.Algorithm, c.Limit, c.Period, c.Burst = "127.0.0.1:0", "redis://h:1/2", core.LeakyBucket, 5, 2*time.Second, 7
				c.Key, c.FailClosed, c.Timeout, c.Headers, c.MaxWait, c.Metrics = "header:X-API-Key", true, 50*time.Millisecond, httplimit.Headers{httplimit.XRateLimit{}, httplimit.IETF{}}, 300*time.Millisecond, true
				c.Concurrency, c.ConcurrencyLease = 3, 2*time.Second
			})},
		{"env", nil, env("ADDR", ":1", "REDIS_CLUSTER_ADDRS", "a:1, b:2,", "ALGORITHM", "fixed_window", "LIMIT", "3",
			"PERIOD", "1m", "BURST", "4", "KEY", "header:x-key", "FAIL", "closed", "TIMEOUT", "1s", "HEADERS", "ietf",
			"MAX_WAIT", "2s", "METRICS", "true", "CONCURRENCY", "4", "CONCURRENCY_LEASE", "1m"),
			with(func(c *Config) {
				c.Addr, c.RedisCluster, c.Algorithm, c.Limit, c.Period, c.Burst = ":1", []string{"a:1", "b:2"}, core.FixedWindow, 3, time.Minute, 4
				c.Key, c.FailClosed, c.Timeout, c.Headers, c.MaxWait, c.Metrics = "header:x-key", true, time.Second, httplimit.Headers{httplimit.IETF{}}, 2*time.Second, true
				c.Concurrency, c.ConcurrencyLease = 4, time.Minute
			})},
		{"flag wins over env", []string{"-limit", "2", "-headers", "none", "-metrics=false", "-concurrency", "0"},
			env("LIMIT", "3", "HEADERS", "ietf", "METRICS", "1", "CONCURRENCY", "5"),
			with(func(c *Config) { c.Limit, c.Headers = 2, httplimit.Headers{} })},
		{"concurrency limit", []string{"-concurrency", "1048576", "-concurrency-lease", "1ms"}, env(),
			with(func(c *Config) { c.Concurrency, c.ConcurrencyLease = 1<<20, time.Millisecond })},
		{"invalid env ignored when the flag is given", []string{"-limit", "2"}, env("LIMIT", "many"),
			with(func(c *Config) { c.Limit = 2 })},
		{"-redis flag beats $REDIS_CLUSTER_ADDRS", []string{"-redis", "redis://h:1"}, env("REDIS_CLUSTER_ADDRS", "a:1"),
			with(func(c *Config) { c.RedisURL = "redis://h:1" })},
		{"-redis-cluster flag beats $REDIS_URL", []string{"-redis-cluster", "a:1"}, env("REDIS_URL", "redis://h:1"),
			with(func(c *Config) { c.RedisCluster = []string{"a:1"} })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig("test", tt.args, tt.env, &bytes.Buffer{})
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  func(string) string
		want string // in the error
	}{
		{"unknown flag", []string{"-nope"}, env(), "-nope"},
		{"limit not a number", []string{"-limit", "x"}, env(), "-limit"},
		{"limit zero", []string{"-limit", "0"}, env(), "invalid -limit"},
		{"limit from env", nil, env("LIMIT", "x"), "$LIMIT (flag -limit)"},
		{"limit zero from env", nil, env("LIMIT", "0"), "-limit ($LIMIT)"},
		{"period", []string{"-period", "0s"}, env(), "invalid -period"},
		{"period unit", []string{"-period", "5"}, env(), "-period"},
		{"burst", []string{"-burst", "0"}, env(), "invalid -burst"},
		{"algorithm", []string{"-algorithm", "gcra"}, env(), `"gcra" for flag -algorithm`},
		{"fail", []string{"-fail", "maybe"}, env(), `"maybe" for flag -fail`},
		{"headers", []string{"-headers", "x"}, env(), `"x" for flag -headers`},
		{"headers from env", nil, env("HEADERS", "x"), "$HEADERS (flag -headers)"},
		{"timeout", []string{"-timeout", "-1s"}, env(), "invalid -timeout"},
		{"max-wait", []string{"-max-wait", "0s"}, env(), "invalid -max-wait"},
		{"metrics", nil, env("METRICS", "yes please"), "$METRICS (flag -metrics)"},
		{"concurrency negative", []string{"-concurrency", "-1"}, env(), "invalid -concurrency"},
		{"concurrency too many", []string{"-concurrency", "1048577"}, env(), "invalid -concurrency"},
		{"concurrency not a number", []string{"-concurrency", "two"}, env(), "-concurrency"},
		{"concurrency from env", nil, env("CONCURRENCY", "x"), "$CONCURRENCY (flag -concurrency)"},
		{"concurrency negative from env", nil, env("CONCURRENCY", "-2"), "-concurrency ($CONCURRENCY)"},
		{"concurrency lease", []string{"-concurrency-lease", "0s"}, env(), "invalid -concurrency-lease"},
		{"concurrency lease below 1ms", []string{"-concurrency-lease", "999us"}, env(), "invalid -concurrency-lease"},
		{"concurrency lease from env", nil, env("CONCURRENCY_LEASE", "10"), "$CONCURRENCY_LEASE (flag -concurrency-lease)"},
		{"key", []string{"-key", "cookie:x"}, env(), "invalid -key"},
		{"key header name", []string{"-key", "header:"}, env(), "invalid -key"},
		{"key header name space", []string{"-key", "header:X Key"}, env(), "invalid -key"},
		{"cluster addr", []string{"-redis-cluster", "a:1,b"}, env(), "invalid -redis-cluster"},
		{"cluster empty", []string{"-redis-cluster", ","}, env(), "invalid -redis-cluster"},
		{"redis and cluster", []string{"-redis", "redis://h:1", "-redis-cluster", "a:1"}, env(), "exclusive"},
		{"redis and cluster from env", nil, env("REDIS_URL", "redis://h:1", "REDIS_CLUSTER_ADDRS", "a:1"), "exclusive"},
		{"positional", []string{"serve"}, env(), `unexpected argument "serve"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("test", tt.args, tt.env, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestParseConfigHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseConfig("test", []string{"-h"}, env(), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("got %v, want flag.ErrHelp", err)
	}
	for _, o := range options {
		if !strings.Contains(out.String(), "-"+o.flag) || !strings.Contains(out.String(), "$"+o.env) {
			t.Errorf("usage lacks -%s or $%s:\n%s", o.flag, o.env, out.String())
		}
	}
}

func TestConfigLimit(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		wantLimit   core.Limit
		wantMaxWait time.Duration
	}{
		{"token bucket, burst = limit", nil, core.Limit{Rate: 10, Period: time.Second}, 0},
		{"token bucket burst", []string{"-burst", "20"}, core.Limit{Rate: 10, Period: time.Second, Burst: 20}, 0},
		{"window ignores burst", []string{"-algorithm", "sliding_window", "-burst", "20"},
			core.Limit{Algorithm: core.SlidingWindow, Rate: 10, Period: time.Second}, 0},
		{"leaky max-wait = period", []string{"-algorithm", "leaky_bucket", "-period", "2s"},
			core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: 2 * time.Second}, 2 * time.Second},
		{"leaky max-wait", []string{"-algorithm", "leaky_bucket", "-max-wait", "50ms", "-burst", "3"},
			core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Second, Burst: 3}, 50 * time.Millisecond},
		{"max-wait is leaky only", []string{"-max-wait", "50ms"}, core.Limit{Rate: 10, Period: time.Second}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig("test", tt.args, env(), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.CoreLimit(); got != tt.wantLimit {
				t.Errorf("CoreLimit() = %+v, want %+v", got, tt.wantLimit)
			}
			if got := cfg.LeakyMaxWait(); got != tt.wantMaxWait {
				t.Errorf("LeakyMaxWait() = %v, want %v", got, tt.wantMaxWait)
			}
		})
	}
}
