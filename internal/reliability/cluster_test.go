package reliability

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

var algorithms = []core.Algorithm{core.TokenBucket, core.SlidingWindow, core.SlidingWindowCounter, core.FixedWindow, core.LeakyBucket}

// cleanupPrefix deletes, on every master, the keys under prefix.
func cleanupPrefix(t *testing.T, rdb *redis.ClusterClient, prefix string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
			for iter.Next(ctx) {
				c.Unlink(ctx, iter.Val())
			}
			return iter.Err()
		})
	})
}

// TestClusterEveryAlgorithmExact: on Redis Cluster, 8 goroutines sharing
// one key are admitted exactly each algorithm's bound, for plain and
// hostile keys; layered limits (a multi-key script) work on one slot.
func TestClusterEveryAlgorithmExact(t *testing.T) {
	rdb := redistest.Cluster(t)
	prefix := unique(t)
	cleanupPrefix(t, rdb, prefix)
	// No breaker: a failure in one subtest must not fail the next ones.
	lim := newLimiter(t, rdb, core.WithPrefix(prefix), core.WithTimeout(patient), core.WithBreaker(0, 0))
	for _, a := range algorithms {
		for _, key := range []string{"plain", "x}{y", "{evil}", "nul\x00\xff"} {
			t.Run(fmt.Sprintf("%v/%q", a, key), func(t *testing.T) {
				// An hour: no refill, and no window boundary, during the test.
				exactly(t, lim, key, core.Limit{Algorithm: a, Rate: 40, Period: time.Hour})
			})
		}
	}
	t.Run("layers", func(t *testing.T) {
		ctx := context.Background()
		limits := []core.Limit{
			{Rate: 10, Period: time.Hour},
			{Algorithm: core.SlidingWindow, Rate: 100, Period: time.Hour},
			{Algorithm: core.FixedWindow, Rate: 1000, Period: 24 * time.Hour},
		}
		for _, key := range []string{"layers", "la}{yers"} {
			rules := make([]core.Rule, len(limits))
			for i, l := range limits {
				rules[i] = l.For(key)
			}
			admitted := 0
			for i := range 15 {
				res, err := lim.Allow(ctx, 1, rules...)
				if err != nil {
					t.Fatalf("Allow(%q) under %d Limits, call %d: %v", key, len(rules), i, err)
				}
				if res.Granted > 0 {
					admitted++
				}
			}
			if admitted != 10 {
				t.Errorf("Allow(%q) under %d Limits: %d of 15 admitted, want 10", key, len(rules), admitted)
			}
		}
	})
}

// TestClusterKeysSpreadOverAllMasters: 1000 distinct keys land on all three
// masters, each key in the slot of its own tag.
func TestClusterKeysSpreadOverAllMasters(t *testing.T) {
	rdb := redistest.Cluster(t)
	ctx := context.Background()
	limit := core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Hour}
	const keys = 1000
	// A fixed window's key goes when its window ends, on the hour (the
	// window is aligned on Redis' clock): a run that crosses one loses the
	// keys it made before, so it is done again, under a prefix of its own.
	var (
		prefix    string
		lim       *core.Limiter
		perMaster map[string]int
		sizes     map[string]int64
	)
	for attempt := 0; ; attempt++ {
		t0 := redistest.Now(t, rdb).Truncate(time.Hour)
		prefix, lim, perMaster, sizes = spread(t, rdb, limit, keys)
		if attempt > 0 || redistest.Now(t, rdb).Truncate(time.Hour).Equal(t0) {
			break
		}
	}
	total := 0
	for addr, n := range perMaster {
		total += n
		if n == 0 || sizes[addr] == 0 {
			t.Errorf("master %s holds %d of the keys (DBSIZE %d), want > 0", addr, n, sizes[addr])
		}
	}
	if len(perMaster) != 3 || total != keys {
		t.Errorf("keys per master %v: %d masters, %d keys, want 3 masters and %d keys", perMaster, len(perMaster), total, keys)
	}
	t.Logf("%d keys per master: %v (DBSIZE %v)", keys, perMaster, sizes)

	// Each key lives in the slot of its tag: the key itself, or the hash
	// tag it holds ("b" of "a{b}c", as Redis reads a key), the key then
	// following in braces of its own.
	esc := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D", "#", "%23").Replace
	for _, tt := range []struct{ key, slotOf, tag string }{
		{"user:7", "user:7", "user:7"},
		{"a{b}c", "b", "b}{" + esc("a{b}c")},
		{"}{", esc("}{"), esc("}{")},
		{"{}x", esc("{}x"), esc("{}x")},
	} {
		key, tag := tt.key, tt.tag
		if _, err := lim.Allow(ctx, 1, limit.For(key)); err != nil {
			t.Fatal(err)
		}
		want, _ := rdb.ClusterKeySlot(ctx, tt.slotOf).Result()
		got, _ := rdb.ClusterKeySlot(ctx, prefix+":{"+tag+"}"+fwKey).Result()
		if got != want {
			t.Errorf("key %q: slot %d, want %d (the slot of its tag %q)", key, got, want, tag)
		}
		if n, _ := rdb.Exists(ctx, prefix+":{"+tag+"}"+fwKey).Result(); n != 1 {
			t.Errorf("key %q: %s:{%s}%s does not exist", key, prefix, tag, fwKey)
		}
	}
}

// spread decides once for each of n keys under limit, on a Limiter of a
// fresh prefix, and counts the prefix's keys on each master (and its
// DBSIZE).
func spread(t *testing.T, rdb *redis.ClusterClient, limit core.Limit, n int) (prefix string, lim *core.Limiter, perMaster map[string]int, sizes map[string]int64) {
	ctx := context.Background()
	prefix = unique(t)
	cleanupPrefix(t, rdb, prefix)
	lim = newLimiter(t, rdb, core.WithPrefix(prefix), core.WithTimeout(patient))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if _, err := lim.Allow(ctx, 1, limit.For(fmt.Sprint("user:", i))); err != nil {
					t.Errorf("Allow(user:%d): %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()

	var mu sync.Mutex
	perMaster, sizes = map[string]int{}, map[string]int64{}
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n := 0
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		if err := iter.Err(); err != nil {
			return err
		}
		size, err := c.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		perMaster[c.Options().Addr], sizes[c.Options().Addr] = n, size
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatalf("ForEachMaster: %v", err)
	}
	return prefix, lim, perMaster, sizes
}

// shardOf returns the master serving slot and its first replica ("" if
// none), as the node rdb asks sees it.
func shardOf(rdb *redis.ClusterClient, slot int64) (master, replica string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	master, replicas := slotNodes(ctx, rdb, slot)
	if len(replicas) > 0 {
		replica = replicas[0]
	}
	return master, replica
}

// slotNodes returns the addresses of the master serving slot and of its
// replicas as c sees them, from CLUSTER SHARDS (go-redis deprecates
// CLUSTER SLOTS for it). A node counts only while it is online or loading:
// CLUSTER SHARDS also lists failed nodes, which CLUSTER SLOTS left out as
// replicas, and a Redis that groups nodes by shard id may list a failed
// old master beside the replica that took over from it. Redis 6.2 has no
// CLUSTER SHARDS (it came with 7.0): there CLUSTER SLOTS answers.
func slotNodes(ctx context.Context, c redis.Cmdable, slot int64) (master string, replicas []string) {
	shards, err := c.ClusterShards(ctx).Result()
	var refused redis.Error
	if errors.As(err, &refused) {
		return slotNodesBefore7(ctx, c, slot)
	}
	for _, sh := range shards {
		if !slices.ContainsFunc(sh.Slots, func(r redis.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
			continue
		}
		for _, n := range sh.Nodes {
			if n.Health != "online" && n.Health != "loading" {
				continue
			}
			addr := net.JoinHostPort(n.Endpoint, strconv.FormatInt(n.Port, 10))
			if n.Role == "master" {
				master = addr
			} else {
				replicas = append(replicas, addr)
			}
		}
	}
	return master, replicas
}

// slotNodesBefore7 is slotNodes from CLUSTER SLOTS, which lists the
// master of each range first and leaves failed replicas out.
func slotNodesBefore7(ctx context.Context, c redis.Cmdable, slot int64) (master string, replicas []string) {
	ranges, _ := c.ClusterSlots(ctx).Result()
	for _, r := range ranges {
		if int64(r.Start) > slot || slot > int64(r.End) || len(r.Nodes) == 0 {
			continue
		}
		master = r.Nodes[0].Addr
		for _, n := range r.Nodes[1:] {
			replicas = append(replicas, n.Addr)
		}
	}
	return master, replicas
}

// agreed waits until every node of the cluster says that master serves
// slot with replica as its replica: gossip has spread the topology.
func agreed(t *testing.T, slot int64, master, replica string) {
	t.Helper()
	for _, addr := range redistest.ClusterAddrs(t) {
		c := node(t, addr)
		var m string
		var replicas []string
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			m, replicas = slotNodes(ctx, c, slot)
			cancel()
			if m == master && slices.Equal(replicas, []string{replica}) {
				break
			}
			if time.Now().After(deadline) {
				// (What it saw, and the roles now: a failover of the
				// Cluster's own, on a loaded machine, reads differently
				// from gossip that did not arrive.)
				t.Fatalf("not within 30s: %s sees %s (replicas %v) serve slot %d, not %s (replica %s); ROLE now: %s is %q, %s is %q",
					addr, m, replicas, slot, master, replica, master, role(node(t, master)), replica, role(node(t, replica)))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// node returns a plain client of one cluster node, for admin commands.
func node(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func role(c *redis.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(v) == 0 {
		return ""
	}
	s, _ := v[0].(string)
	return s
}

// infoField reads a field of INFO section, or of CLUSTER INFO when section
// is "cluster".
func infoField(c *redis.Client, section, field string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var info string
	if section == "cluster" {
		info, _ = c.ClusterInfo(ctx).Result()
	} else {
		info, _ = c.Info(ctx, section).Result()
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// shardHealthy reports whether master is a master with one online replica,
// replica follows it with its link up, and both see cluster_state:ok; the
// string says what was seen.
func shardHealthy(master, replica *redis.Client) (bool, string) {
	seen := fmt.Sprintf("%s: role %s, connected_slaves %s, slave0 %s, cluster_state %s; %s: role %s, master_link_status %s, cluster_state %s",
		master.Options().Addr, role(master), infoField(master, "replication", "connected_slaves"),
		infoField(master, "replication", "slave0"), infoField(master, "cluster", "cluster_state"),
		replica.Options().Addr, role(replica), infoField(replica, "replication", "master_link_status"),
		infoField(replica, "cluster", "cluster_state"))
	ok := role(master) == "master" && role(replica) == "slave" &&
		infoField(master, "replication", "connected_slaves") == "1" &&
		strings.Contains(infoField(master, "replication", "slave0"), "state=online") &&
		infoField(replica, "replication", "master_link_status") == "up" &&
		infoField(master, "cluster", "cluster_state") == "ok" &&
		infoField(replica, "cluster", "cluster_state") == "ok"
	return ok, seen
}

// waitHealthy waits until shardHealthy(master, replica).
func waitHealthy(t *testing.T, master, replica *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, seen := shardHealthy(master, replica)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard not healthy 30s on: %s", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failover makes replica the master of its shard with CLUSTER FAILOVER
// (the coordinated, lossless kind), and waits until the shard is healthy
// the other way round and every node agrees. It returns when the replica
// took over. Redis Cluster masters vote for a shard at most once per
// 2 × cluster-node-timeout, so a failover attempted sooner after another
// one times out (after 5 s) and is tried again.
func failover(t *testing.T, slot int64, replica, master *redis.Client) time.Time {
	t.Helper()
	var promoted time.Time
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := replica.Do(ctx, "CLUSTER", "FAILOVER").Err()
		cancel()
		if err != nil {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", replica.Options().Addr, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		var ok bool
		var seen string
		for time.Now().Before(deadline) {
			if promoted.IsZero() && role(replica) == "master" {
				promoted = time.Now()
			}
			if ok, seen = shardHealthy(replica, master); ok {
				if promoted.IsZero() {
					promoted = time.Now()
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if ok {
			break
		}
		if attempt == 3 {
			t.Fatalf("%s did not take over 10s after CLUSTER FAILOVER, 3 times: %s", replica.Options().Addr, seen)
		}
		t.Logf("CLUSTER FAILOVER on %s, attempt %d, did not take: %s", replica.Options().Addr, attempt, seen)
		promoted = time.Time{}
	}
	agreed(t, slot, replica.Options().Addr, master.Options().Addr)
	return promoted
}

// voteGap is how long after a failover the masters will vote for the same
// shard again: 2 × cluster-node-timeout, plus a second.
func voteGap(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	v, err := c.ConfigGet(context.Background(), "cluster-node-timeout").Result()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := strconv.Atoi(v["cluster-node-timeout"])
	if err != nil {
		t.Fatalf("cluster-node-timeout %q: %v", v["cluster-node-timeout"], err)
	}
	return 2*time.Duration(ms)*time.Millisecond + time.Second
}

// TestClusterFailoverUnderTraffic: 16 goroutines hammer one key while the
// replica of the master owning it takes over (CLUSTER FAILOVER). Calls fail
// only in a short window around the failover, the token bucket never
// admits more than Burst + Rate*T over the whole run, and limiting is
// exact on the new master.
//
// It runs twice, failing over and then back, so the cluster is left as it
// was found. First with the defaults (100ms timeout, breaker): the failover
// costs some timeouts, which the breaker turns into a cool-down of fast
// failures; on a loaded machine the timeout fires now and then anyway,
// so this run only logs its error window. Then with a 1s timeout and no
// breaker, where every call must succeed except, at most, during a short
// window around the failover (in practice none fails: the failover blocks
// writes for tens of milliseconds).
func TestClusterFailoverUnderTraffic(t *testing.T) {
	rdb := redistest.Cluster(t)
	const key = "hot"
	slot, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var masterAddr, replicaAddr string
	eventually(t, 30*time.Second, fmt.Sprintf("a master with a replica serves slot %d", slot), func() bool {
		masterAddr, replicaAddr = shardOf(rdb, slot)
		return replicaAddr != ""
	})
	master, replica := node(t, masterAddr), node(t, replicaAddr)
	gap := voteGap(t, master)
	var last time.Time // of the last failover
	t.Cleanup(func() {
		if role(master) == "master" {
			return
		}
		for time.Since(last) < gap {
			time.Sleep(50 * time.Millisecond) // Redis will not vote before
		}
		failover(t, slot, master, replica)
		t.Logf("failed back: %s is master again", masterAddr)
	})

	if !t.Run("defaults", func(t *testing.T) {
		last = clusterFailover(t, rdb, key, slot, master, replica, false)
	}) {
		return
	}
	// The masters vote for this shard again only after the gap: a real
	// cluster's constraint, waited out with a bounded loop.
	for time.Since(last) < gap {
		time.Sleep(50 * time.Millisecond)
	}
	t.Run("1s timeout, no breaker", func(t *testing.T) {
		last = clusterFailover(t, rdb, key, slot, replica, master, true, core.WithTimeout(patient), core.WithBreaker(0, 0))
	})
}

// clusterFailover runs traffic on key while replica takes over from master.
// strict: calls may fail only in a short window around the failover.
func clusterFailover(t *testing.T, rdb *redis.ClusterClient, key string, slot int64, master, replica *redis.Client, strict bool, opts ...core.Option) time.Time {
	prefix := unique(t)
	cleanupPrefix(t, rdb, prefix)
	waitHealthy(t, master, replica)
	agreed(t, slot, master.Options().Addr, replica.Options().Addr)

	lim := newLimiter(t, rdb, append(opts, core.WithPrefix(prefix))...)
	limit := core.Limit{Rate: 200, Period: time.Second, Burst: 50}
	begin := time.Now()
	tr := startTraffic(lim, 16, limit, func(int, int) string { return key })
	defer tr.halt()
	tr.waitServed(t, 500, "before the failover")
	started := time.Now()
	promoted := failover(t, slot, replica, master)
	t.Logf("slot %d: %s took over from %s in %v", slot, replica.Options().Addr, master.Options().Addr, promoted.Sub(started).Round(time.Millisecond))
	tr.waitServed(t, 1000, "after the failover")
	tr.halt()
	end := time.Now()

	failures := tr.failuresAfter(time.Time{})
	kinds := map[string]int{}
	var before, late int
	var first, lastFailure time.Time
	for _, f := range failures {
		switch {
		case f.start.Before(started.Add(-100 * time.Millisecond)):
			before++
		case f.start.After(promoted.Add(2 * time.Second)):
			late++
		default:
			if first.IsZero() {
				first = f.start
			}
			lastFailure = f.start
		}
		var msg string
		switch {
		case circuitOpen(f.err):
			msg = "circuit open"
		case isTimeout(f.err):
			msg = "timeout"
		default:
			msg = f.err.Error()
			if len(msg) > 80 {
				msg = msg[:80]
			}
			t.Errorf("a call failed with %v: want only timeouts (or an open circuit) during a failover", f.err)
		}
		kinds[msg]++
	}
	window := lastFailure.Sub(first)
	var during string
	if !first.IsZero() {
		during = fmt.Sprintf(" in a window of %v from %v after CLUSTER FAILOVER", window.Round(time.Millisecond), first.Sub(started).Round(time.Millisecond))
	}
	t.Logf("failover under 16 goroutines: %d of %d calls failed: %d around the failover%s, %d before it, %d more than 2s after the promotion; %v",
		len(failures), tr.calls(), len(failures)-before-late, during, before, late, kinds)
	if strict && (before > 0 || late > 0 || window > 3*time.Second) {
		t.Errorf("%d calls failed before the failover, %d more than 2s after it, and the rest within %v: want failures only in a window (< 3s) around it",
			before, late, window)
	}

	elapsed := end.Sub(begin)
	bound := int64(limit.Burst) + int64(float64(limit.Rate)*elapsed.Seconds()/limit.Period.Seconds())
	admitted := tr.admitted.Load()
	t.Logf("admitted %d in %v (bound Burst + Rate*T = %d; %.1f%% of it); %d denied",
		admitted, elapsed.Round(time.Millisecond), bound, 100*float64(admitted)/float64(bound), tr.denied.Load())
	if admitted > bound {
		t.Errorf("admitted %d over %v, want <= Burst + Rate*T = %d", admitted, elapsed, bound)
	}

	// On the new master, every algorithm is exact (on fresh keys of the
	// same slot: the slot depends on the tag alone).
	after := newLimiter(t, rdb, append(opts, core.WithPrefix(prefix+":after"), core.WithTimeout(patient))...)
	for _, a := range algorithms {
		exactly(t, after, key, core.Limit{Algorithm: a, Rate: 40, Period: time.Hour})
	}
	return promoted
}
