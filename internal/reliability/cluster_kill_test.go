package reliability

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// startCluster starts a cluster of its own (3 masters, 1 replica each, on
// free loopback ports) that this test alone may break, and returns its
// nodes by address.
func startCluster(t *testing.T) map[string]*redistest.Server {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		redistest.Missing(t, "redis-cli is not on PATH (apt-get install -y redis-tools); this test creates its own Redis Cluster")
	}
	if v := redistest.ServerMajor(t); v > 0 && v < 7 {
		// Before 7 a node's bus is its port + 10000, which a free port
		// may push past 65535; --cluster-port came with Redis 7.
		t.Skipf("the server is Redis %d: these Cluster tests need --cluster-port (Redis 7 or Valkey)", v)
	}
	nodes := map[string]*redistest.Server{}
	var addrs []string
	for range 6 {
		s := redistest.StartServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", redistest.FreePort(t), "--cluster-node-timeout", "1000")
		nodes[s.Addr()] = s
		addrs = append(addrs, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range nodes {
		c := s.Admin(t)
		eventually(t, 30*time.Second, s.Addr()+" is in a healthy cluster", func() bool {
			if infoField(c, "cluster", "cluster_state") != "ok" {
				return false
			}
			return role(c) == "master" || infoField(c, "replication", "master_link_status") == "up"
		})
	}
	return nodes
}

// TestClusterMasterKilled: a master is killed (-9) under traffic on two
// keys, one on its slots and one on another master's. The Cluster promotes
// the replica, and decisions for the dead master's key succeed again soon
// after: go-redis learns of a new master only from a MOVED reply (a dead
// master sends none) or its reload every minute, so the Limiter asks it to
// reload its slot map on failures. The outage is logged once, although
// failures and successes alternate request by request, and limits are exact
// on the new master.
func TestClusterMasterKilled(t *testing.T) {
	nodes := startCluster(t)
	var seeds []string
	for addr := range nodes {
		seeds = append(seeds, addr)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	logs := &logRecorder{}
	lim := newLimiter(t, rdb, core.WithLogger(slog.New(logs)))

	// Two keys on different masters: the slot is the hash tag's, that is the
	// caller's key.
	ctx := context.Background()
	slotOf := func(key string) int64 {
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return slot
	}
	const doomed = "doomed"
	var victim, heir string
	eventually(t, 30*time.Second, "a master with a replica serves "+doomed, func() bool {
		victim, heir = shardOf(rdb, slotOf(doomed))
		return nodes[victim] != nil && nodes[heir] != nil
	})
	survivor := ""
	for i := 0; survivor == ""; i++ {
		if m, _ := shardOf(rdb, slotOf(fmt.Sprint("k", i))); m != victim && m != "" {
			survivor = fmt.Sprint("k", i)
		}
	}

	limit := core.PerSecond(1000)
	tr := startTraffic(lim, 8, limit, func(g, i int) string {
		if (g+i)%2 == 0 {
			return doomed
		}
		return survivor
	})
	defer tr.halt()
	tr.waitServed(t, 500, "before the kill")

	nodes[victim].Kill()
	killed := time.Now()
	heirClient := nodes[heir].Admin(t)
	eventually(t, 20*time.Second, heir+" takes over from the killed "+victim, func() bool {
		return role(heirClient) == "master"
	})
	promoted := time.Now()
	t.Logf("%s promoted %v after %s was killed", heir, promoted.Sub(killed).Round(time.Millisecond), victim)

	// The bound: a few of go-redis' reloads (one per 200 ms at most) and
	// gossip reaching the node that answers CLUSTER SLOTS. Without the
	// reload this takes up to a minute.
	const bound = 5 * time.Second
	var err error
	for {
		if _, err = lim.Allow(ctx, 1, limit.For(doomed)); err == nil {
			break
		}
		if time.Since(promoted) > bound {
			t.Fatalf("%v after %s took over, decisions on %q still fail: %v", bound, heir, doomed, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("decisions on %q succeed again %v after the promotion", doomed, time.Since(promoted).Round(time.Millisecond))
	tr.halt()

	// Logged by time, never per request: "redis call failed" at most once
	// per 10 s, "redis did not decide a request" at most once a second per
	// reason (fallback, unavailable), and a circuit that opens or closes a
	// line each. The whole Cluster says CLUSTERDOWN for a moment around the
	// promotion, so the circuit may open, close and open again: allow two
	// such rounds. Per request there would be thousands of lines.
	got := logs.records()
	outage := time.Since(killed)
	failed := count(got, "WARN redlimit: redis call failed")
	undecided := count(got, "WARN redlimit: redis did not decide a request")
	circuit := count(got, "WARN redlimit: circuit open") + count(got, "INFO redlimit: redis answers again")
	t.Logf("log records over %v and %d calls:\n%s", outage.Round(time.Millisecond), tr.calls(), strings.Join(got, "\n"))
	maxFailed := 1 + int(outage/(10*time.Second))
	maxUndecided := 2 * (1 + int(outage/time.Second))
	if failed < 1 || failed > maxFailed || undecided > maxUndecided || circuit > 4 {
		t.Errorf("%d 'redis call failed' (want 1 to %d), %d 'did not decide' (want at most %d), %d circuit lines (want at most 4): want the outage logged by time, not per request",
			failed, maxFailed, undecided, maxUndecided, circuit)
	}

	exactly(t, lim, doomed+":after", core.Limit{Rate: 40, Period: time.Hour})
}
