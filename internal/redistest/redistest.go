// Package redistest gives tests their Redis: a miniredis with a controlled
// clock, the real Redis named by REDIS_URL, or the real Redis Cluster named
// by REDIS_CLUSTER_ADDRS.
//
// A real-Redis test without its variable is skipped with a message that
// says so, except under CI (CI=true), where a missing Redis fails the test:
// a green CI run must never mean the real-Redis suites did not run.
package redistest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Epoch is the time miniredis starts at in Mini: a fixed, recent instant, so
// runs are reproducible.
var Epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Mini starts a miniredis whose TIME is Epoch until the test moves it with
// SetTime, and a client for it. Both are closed when the test ends.
func Mini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(Epoch)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return mr, rdb
}

// Real returns a client for REDIS_URL, or skips the test when it is unset
// (fails it under CI). The caller should use keys unique to the test, or
// FlushDB: the database is shared with whatever else runs.
func Real(t testing.TB) *redis.Client {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		missing(t, "REDIS_URL", "a real Redis, e.g. REDIS_URL=redis://127.0.0.1:6379/0")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("REDIS_URL=%q: %v", url, err)
	}
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ping(t, rdb, url)
	return rdb
}

// ClusterAddrs returns the seed addresses in REDIS_CLUSTER_ADDRS, or skips
// the test when it is unset (fails it under CI).
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		missing(t, "REDIS_CLUSTER_ADDRS", "a Redis Cluster, e.g. REDIS_CLUSTER_ADDRS=127.0.0.1:7001,127.0.0.1:7002 (.ci/run starts one)")
	}
	return strings.Split(addrs, ",")
}

// Cluster returns a ClusterClient for REDIS_CLUSTER_ADDRS, or skips the test
// when it is unset (fails it under CI).
func Cluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ping(t, rdb, strings.Join(addrs, ","))
	return rdb
}

func missing(t testing.TB, env, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not set under CI: this test needs %s and must not be skipped there", env, what)
	}
	t.Skipf("SKIPPED: %s is not set; this test needs %s", env, what)
}

func ping(t testing.TB, rdb redis.UniversalClient, where string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s does not answer: %v", where, err)
	}
}
