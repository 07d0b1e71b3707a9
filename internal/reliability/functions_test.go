package reliability

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// The tests in this file back core's "the library is loaded with FUNCTION
// LOAD on every node" and "a server that lost the library (a restart,
// FUNCTION FLUSH) is answered by the script at once, while the library is
// loaded again in the background" on Redis Cluster.

// callKinds counts the decisions a client sends, by how: FCALL of the
// library, or a script (EVALSHA, EVAL).
type callKinds struct{ fcall, script atomic.Int64 }

func (c *callKinds) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callKinds) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "fcall":
			c.fcall.Add(1)
		case "evalsha", "eval":
			c.script.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *callKinds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hasLibrary reports whether the node holds a redlimit library.
func hasLibrary(c *redis.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil {
		return false
	}
	for _, l := range libs {
		if strings.HasPrefix(l.Name, "redlimit_") {
			return true
		}
	}
	return false
}

// masterOf returns the address of the master serving key's slot (the slot
// of the Limiter's hash tag, which is the key itself for plain keys).
func masterOf(t *testing.T, rdb *redis.ClusterClient, key string) string {
	t.Helper()
	slot, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := shardOf(rdb, slot)
	return m
}

// viaFCall reports whether a decision on key went through FCALL.
func viaFCall(t *testing.T, lim *core.Limiter, kinds *callKinds, key string, limit core.Limit) bool {
	t.Helper()
	before := kinds.fcall.Load()
	if _, err := lim.Allow(context.Background(), 1, limit.For(key)); err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return kinds.fcall.Load() > before
}

// TestClusterFunctionFlushOnOneNode: on the Cluster of REDIS_CLUSTER_ADDRS,
// decisions on keys of every slot's master go through FCALL once the
// library is loaded, and are exact. After FUNCTION FLUSH on one master,
// the next decision on a key it serves is still right (a script answers
// it, no error), and the library comes back on that master, with decisions
// through FCALL again.
//
// It flushes a master of the shared Cluster: the libraries of any other
// redlimit there are flushed too, and they load theirs again the same way.
func TestClusterFunctionFlushOnOneNode(t *testing.T) {
	rdb := redistest.Cluster(t)
	redistest.NeedFunctions(t, rdb)
	kinds := &callKinds{}
	rdb.AddHook(kinds)
	prefix := unique(t)
	cleanupPrefix(t, rdb, prefix)
	lim := newLimiter(t, rdb, core.WithPrefix(prefix), core.WithTimeout(patient), core.WithBreaker(0, 0))
	limit := core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: time.Hour}

	// One key per master, and the library everywhere.
	perMaster := map[string]string{}
	for i := 0; len(perMaster) < 3 && i < 1000; i++ {
		key := fmt.Sprint("probe:", i)
		if m := masterOf(t, rdb, key); m != "" && perMaster[m] == "" {
			perMaster[m] = key
		}
	}
	if len(perMaster) != 3 {
		t.Fatalf("keys reach masters %v, want 3 masters", perMaster)
	}
	for m, key := range perMaster {
		eventually(t, 10*time.Second, "decisions on "+key+" ("+m+") go through FCALL", func() bool {
			return viaFCall(t, lim, kinds, key, limit)
		})
		if !hasLibrary(node(t, m)) {
			t.Errorf("master %s serves FCALL but FUNCTION LIST shows no redlimit library", m)
		}
	}

	// Many keys across slots, exact.
	for _, a := range algorithms {
		l := core.Limit{Algorithm: a, Rate: 3, Period: time.Hour}
		for i := range 60 {
			key := fmt.Sprintf("many:%v:%d", a, i)
			admitted := 0
			for range 5 {
				r, err := lim.Allow(context.Background(), 1, l.For(key))
				if err != nil {
					t.Fatalf("Allow(%q) under %v: %v", key, a, err)
				}
				if r.Allowed {
					admitted++
				}
			}
			if admitted != 3 {
				t.Errorf("%q under %v: %d of 5 admitted, want 3", key, a, admitted)
			}
		}
	}

	// FUNCTION FLUSH on one master.
	victim := ""
	for m := range perMaster {
		victim = m
		break
	}
	admin := node(t, victim)
	if err := admin.FunctionFlush(context.Background()).Err(); err != nil {
		t.Fatalf("FUNCTION FLUSH on %s: %v", victim, err)
	}
	if hasLibrary(admin) {
		t.Fatalf("%s still lists the library after FUNCTION FLUSH", victim)
	}
	scripts := kinds.script.Load()
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("after:", i); masterOf(t, rdb, k) == victim {
			key = k
		}
	}
	for i := range 5 {
		r, err := lim.Allow(context.Background(), 1, limit.For(key))
		if err != nil {
			t.Fatalf("decision %d on %q after FUNCTION FLUSH on its master: %v, want an answer", i, key, err)
		}
		if want := i < 3; r.Allowed != want {
			t.Errorf("decision %d on %q after FUNCTION FLUSH: allowed %v, want %v (3 per hour)", i, key, r.Allowed, want)
		}
	}
	if kinds.script.Load() == scripts {
		t.Errorf("no script call after FUNCTION FLUSH: the flushed master was not asked, or FCALL did not fail")
	}
	eventually(t, 10*time.Second, "the library is back on "+victim+" and decisions there use FCALL again", func() bool {
		return hasLibrary(admin) && viaFCall(t, lim, kinds, key, limit)
	})
	for m, key := range perMaster {
		if !viaFCall(t, lim, kinds, key, limit) || !hasLibrary(node(t, m)) {
			t.Errorf("master %s: decisions on %q no longer through FCALL, or no library", m, key)
		}
	}
	t.Logf("FCALL %d, scripts %d over the test", kinds.fcall.Load(), kinds.script.Load())
}

// TestClusterMasterRestartedEmpty: a master of a Cluster of this test's own
// is killed (-9) and started again at once, without persistence: it comes
// back empty (the replica may take over first; then the restarted node
// rejoins as its replica). Either way, decisions on its keys answer again
// within a bound, every master holds the library again, decisions go
// through FCALL, and limits are exact.
func TestClusterMasterRestartedEmpty(t *testing.T) {
	nodes := startCluster(t)
	var seeds []string
	for addr := range nodes {
		seeds = append(seeds, addr)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	redistest.NeedFunctions(t, rdb)
	kinds := &callKinds{}
	rdb.AddHook(kinds)
	lim := newLimiter(t, rdb, core.WithTimeout(patient), core.WithBreaker(0, 0))
	limit := core.Limit{Algorithm: core.SlidingWindow, Rate: 40, Period: time.Hour}
	const key = "restarted"
	var victim string
	eventually(t, 30*time.Second, "a master serves "+key, func() bool {
		victim = masterOf(t, rdb, key)
		return nodes[victim] != nil
	})
	eventually(t, 10*time.Second, "decisions on "+key+" go through FCALL", func() bool {
		return viaFCall(t, lim, kinds, key+":warm", limit)
	})
	// The probe is a key of the victim's slots, so that decisions on it
	// meet the restarted node (or the replica that took its slots over).
	probe := ""
	for i := 0; probe == ""; i++ {
		if k := fmt.Sprint(key, ":probe:", i); masterOf(t, rdb, k) == victim {
			probe = k
		}
	}

	scripts := kinds.script.Load()
	nodes[victim].Kill()
	nodes[victim].Restart()
	restarted := time.Now()
	lost := !hasLibrary(nodes[victim].Admin(t))
	// Polled with a deadline: a restarted master may refuse while it
	// loads, or the Cluster may fail over in between.
	var err error
	for {
		if _, err = lim.Allow(context.Background(), 1, limit.For(probe)); err == nil {
			break
		}
		if time.Since(restarted) > 20*time.Second {
			t.Fatalf("20s after restarting %s, decisions on %q still fail: %v", victim, key, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("decisions on %q answer again %v after the restart; %s came back without the library: %v, and is now a %s", key,
		time.Since(restarted).Round(time.Millisecond), victim, lost, role(nodes[victim].Admin(t)))
	eventually(t, 20*time.Second, "every master holds the library, and decisions on "+key+" use FCALL", func() bool {
		ok := true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if !hasLibrary(c) {
				ok = false
			}
			return nil
		})
		return ok && viaFCall(t, lim, kinds, probe, limit)
	})
	exactly(t, lim, key+":after", limit)
	t.Logf("%d decisions by script since the kill (a master without the library answers FCALL with an error)", kinds.script.Load()-scripts)
}
