package redistest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartCluster starts a Redis Cluster of the test's own, three masters
// with a replica each (redis-server, or REDIS_SERVER), and returns its
// nodes, masters first; they are killed when the test ends. Tests may
// kill its nodes, which they must never do to the shared Cluster.
// Without the server program the test is skipped (failed under CI).
func StartCluster(t testing.TB) []*Server {
	t.Helper()
	nodes := make([]*Server, 6)
	admins := make([]*redis.Client, 6)
	for i := range nodes {
		nodes[i] = StartServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		admins[i] = nodes[i].Admin(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const masters = 3
	for i := range masters {
		args := []any{"CLUSTER", "ADDSLOTS"}
		for slot := i * 16384 / masters; slot < (i+1)*16384/masters; slot++ {
			args = append(args, slot)
		}
		must(t, admins[i].Do(ctx, args...).Err(), "CLUSTER ADDSLOTS")
	}
	for i := 1; i < len(nodes); i++ {
		must(t, admins[i].ClusterMeet(ctx, "127.0.0.1", nodes[0].Port()).Err(), "CLUSTER MEET")
	}
	waitCluster(ctx, t, "every node to know the others", func() bool {
		for _, a := range admins {
			if n, err := a.ClusterNodes(ctx).Result(); err != nil || strings.Count(n, "\n") < len(nodes) {
				return false
			}
		}
		return true
	})
	for i := masters; i < len(nodes); i++ {
		id, err := admins[i-masters].Do(ctx, "CLUSTER", "MYID").Text()
		must(t, err, "CLUSTER MYID")
		waitCluster(ctx, t, "CLUSTER REPLICATE", func() bool {
			return admins[i].Do(ctx, "CLUSTER", "REPLICATE", id).Err() == nil
		})
	}
	// A replica counts for WAIT once its first sync is done (state=online),
	// not when it connects (TestReplicaAcksCluster failed in between).
	waitCluster(ctx, t, "the Cluster's state to be ok, each master with its replica online", func() bool {
		for i, a := range admins {
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			if i < masters {
				if r, err := a.Info(ctx, "replication").Result(); err != nil || !strings.Contains(r, "connected_slaves:1") || !strings.Contains(r, "state=online") {
					return false
				}
			}
		}
		return true
	})
	return nodes
}

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("redistest: starting a Cluster: %s: %v", what, err)
	}
}

// waitCluster polls ok until it holds, or fails the test when ctx ends.
func waitCluster(ctx context.Context, t testing.TB, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: starting a Cluster: waited in vain for %s", what)
		case <-time.After(50 * time.Millisecond): // polling a condition with a deadline
		}
	}
}

// ownCluster reports whether ClusterAddrs may start a Cluster of the
// test's own: REDIS_CLUSTER_ADDRS is unset and the server program is there.
func ownCluster() bool {
	if os.Getenv("REDIS_CLUSTER_ADDRS") != "" {
		return false
	}
	name := os.Getenv("REDIS_SERVER")
	if name == "" {
		name = "redis-server"
	}
	_, err := exec.LookPath(name)
	return err == nil
}

// owned holds each test's own Cluster, so that a test that asks for its
// client and its addresses gets one Cluster.
var owned sync.Map // testing.TB -> []string

// ownClusterAddrs are the addresses of t's own Cluster, started on first use.
func ownClusterAddrs(t testing.TB) []string {
	t.Helper()
	if addrs, ok := owned.Load(t); ok {
		return addrs.([]string)
	}
	nodes := StartCluster(t)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	owned.Store(t, addrs)
	t.Cleanup(func() { owned.Delete(t) })
	return addrs
}
