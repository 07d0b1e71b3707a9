package reliability

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// startSentinel starts a Redis Sentinel (redis-sentinel, or redis-server
// --sentinel, the same program) that monitors master as "mymaster" with a
// quorum of 1 and a 1 s down-after.
func startSentinel(t *testing.T, master *redistest.Server) *redistest.Server {
	t.Helper()
	bin, argv0 := "", []string(nil)
	if b, err := exec.LookPath("redis-sentinel"); err == nil {
		bin = b
	} else {
		bin, argv0 = redistest.RedisServer(t), []string{"--sentinel"}
	}
	return redistest.StartProgram(t, bin, func(port, dir string) []string {
		// Sentinel rewrites its file: a fresh one for each port.
		conf := filepath.Join(dir, "sentinel-"+port+".conf")
		text := fmt.Sprintf(`port %s
bind 127.0.0.1
dir %s
logfile redis.log
sentinel monitor mymaster 127.0.0.1 %s 1
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 10000
`, port, dir, master.Port())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return append([]string{conf}, argv0...)
	})
}

// TestSentinel: core.New takes a Sentinel-backed failover client (made as
// a redis.UniversalClient), limits exactly through it, and carries on after
// Sentinel promotes the replica of a killed master.
func TestSentinel(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartServer(t, "--replicaof", "127.0.0.1", master.Port())
	rc := replica.Admin(t)
	eventually(t, 10*time.Second, "the replica is in sync", func() bool {
		return infoField(rc, "replication", "master_link_status") == "up"
	})
	// Started after the replica is attached, so that Sentinel's first INFO
	// of the master already lists it.
	sentinel := startSentinel(t, master)

	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		MasterName:            "mymaster",
		Addrs:                 []string{sentinel.Addr()},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	lim := newLimiter(t, rdb, core.WithBreaker(3, 200*time.Millisecond), core.WithTimeout(patient))
	exactly(t, lim, "before", core.Limit{Algorithm: core.SlidingWindow, Rate: 20, Period: time.Hour})

	// Failover: Sentinel must know the replica before the master dies.
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	t.Cleanup(func() { _ = sc.Close() })
	eventually(t, 15*time.Second, "Sentinel lists the replica", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rs, err := sc.Replicas(ctx, "mymaster").Result()
		return err == nil && len(rs) == 1
	})
	killed := time.Now()
	master.Kill()
	ctx := context.Background()
	eventually(t, 30*time.Second, "Sentinel promotes the replica", func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		return err == nil && len(addr) == 2 && addr[1] == replica.Port() && role(rc) == "master"
	})
	promoted := time.Since(killed)
	var failures int
	eventually(t, 10*time.Second, "Allow succeeds on the new master", func() bool {
		_, err := lim.Allow(ctx, 1, core.PerMinute(100).For("probe"))
		if err != nil {
			failures++
		}
		return err == nil
	})
	t.Logf("Sentinel failover: replica promoted %v after the kill; %d calls failed after that, then Allow worked again (%v after the kill)",
		promoted.Round(time.Millisecond), failures, time.Since(killed).Round(time.Millisecond))
	exactly(t, lim, "after", core.Limit{Algorithm: core.SlidingWindow, Rate: 20, Period: time.Hour})
}
