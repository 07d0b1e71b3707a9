package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

func TestWithReplicaAcksOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	tests := []struct {
		name string
		opts []Option
		want string // in the error; "" for none
	}{
		{"no replica", []Option{WithReplicaAcks(0, 10*time.Millisecond)}, "want replicas >= 1"},
		{"no timeout: WAIT 0 would block for ever", []Option{WithReplicaAcks(1, 0)}, "a timeout of 1ms or more"},
		{"below a ms", []Option{WithReplicaAcks(1, 999*time.Microsecond)}, "a timeout of 1ms or more"},
		{"the Limiter's timeout, by default 100ms", []Option{WithReplicaAcks(1, 100*time.Millisecond)}, "below the Limiter's timeout"},
		{"above the Limiter's timeout", []Option{WithTimeout(time.Second), WithReplicaAcks(1, 2*time.Second)}, "below the Limiter's timeout"},
		{"the timeout set after", []Option{WithReplicaAcks(1, 200*time.Millisecond), WithTimeout(100 * time.Millisecond)}, "below the Limiter's timeout"},
		{"below the default timeout", []Option{WithReplicaAcks(2, 20*time.Millisecond)}, ""},
		{"no Limiter timeout", []Option{WithTimeout(0), WithReplicaAcks(1, time.Minute)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(rdb, append([]Option{WithLogger(nil)}, tt.opts...)...)
			if l != nil {
				defer func() { _ = l.Close() }()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("New: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// replicated starts a master and replicas replicas of it, each in sync.
func replicated(t *testing.T, replicas int) (*redistest.Server, []*redistest.Server) {
	return replicatedB(t, replicas)
}

func replicatedB(t testing.TB, replicas ...int) (*redistest.Server, []*redistest.Server) {
	t.Helper()
	master := redistest.StartServer(t)
	var rs []*redistest.Server
	n := 1
	if len(replicas) > 0 {
		n = replicas[0]
	}
	for range n {
		r := redistest.StartServer(t, "--replicaof", "127.0.0.1", master.Port())
		rs = append(rs, r)
		admin := r.Admin(t)
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(admin.Info(context.Background(), "replication").Val(), "master_link_status:up") {
			if time.Now().After(deadline) {
				t.Fatal("the replica is not in sync after 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return master, rs
}

// calls is the calls of each command Redis ran, from INFO commandstats.
func calls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, line := range strings.Split(rdb.Info(context.Background(), "commandstats").Val(), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(n, 10, 64)
	}
	return out
}

// TestReplicaAcks: with WithReplicaAcks, every script call is followed by
// one WAIT, batched calls included (one WAIT per call, not per decision);
// decisions succeed while the replicas acknowledge, and fail as a Redis
// fault (ErrUnavailable) while too few do: a paused replica, or fewer
// replicas than asked. Refunds (sent once) and the script path (a server
// without the library) wait too.
func TestReplicaAcks(t *testing.T) {
	master, replicas := replicated(t, 1)
	admin := master.Admin(t)
	ctx := context.Background()
	limit := Limit{Algorithm: SlidingWindow, Rate: 1_000_000, Period: time.Hour} // counts exactly
	newL := func(t *testing.T, n int, opts ...Option) *Limiter {
		t.Helper()
		l, err := New(master.Client(t, nil), append([]Option{WithLogger(nil), WithTimeout(2 * time.Second),
			WithBreaker(0, 0), WithReplicaAcks(n, time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}

	t.Run("concurrent decisions, batched", func(t *testing.T) {
		l := newL(t, 1)
		before := calls(t, admin)
		var wg sync.WaitGroup
		var failed atomic.Int64
		var first atomic.Value
		for range 32 {
			wg.Go(func() {
				for range 20 {
					if res, err := l.Allow(ctx, 1, limit.For("batched")); err != nil || !res.Allowed {
						failed.Add(1)
						first.CompareAndSwap(nil, fmt.Sprint(res, err))
					}
				}
			})
		}
		wg.Wait()
		after := calls(t, admin)
		scripts := after["fcall"] - before["fcall"] + after["evalsha"] - before["evalsha"] + after["eval"] - before["eval"]
		waits := after["wait"] - before["wait"]
		if failed.Load() != 0 || scripts == 0 || waits != scripts || scripts > 640 {
			t.Fatalf("640 decisions: %d failed, %d script calls, %d WAITs; want none failed, one WAIT per call, at most 640 calls; the first failure: %v", failed.Load(), scripts, waits, first.Load())
		}
		t.Logf("640 decisions in %d calls, %d WAITs", scripts, waits)
		res, err := l.Peek(ctx, limit.For("batched"))
		if err != nil || res.Remaining != 1_000_000-640 {
			t.Fatalf("Peek: %+v, %v; want %d remaining", res, err, 1_000_000-640)
		}
	})

	t.Run("a refund, sent once", func(t *testing.T) {
		l := newL(t, 1, WithBatching(1))
		res, err := l.Allow(ctx, 5, limit.For("refund"))
		if err != nil || !res.Allowed {
			t.Fatalf("Allow: %+v, %v", res, err)
		}
		before := calls(t, admin)["wait"]
		if err := l.Refund(ctx, res); err != nil {
			t.Fatalf("Refund: %v", err)
		}
		if got := calls(t, admin)["wait"] - before; got != 1 {
			t.Fatalf("the refund sent %d WAITs, want 1", got)
		}
	})

	t.Run("the script path, after FUNCTION FLUSH and SCRIPT FLUSH", func(t *testing.T) {
		l := newL(t, 1, WithBatching(1))
		if _, err := l.Allow(ctx, 1, limit.For("script")); err != nil {
			t.Fatal(err)
		}
		if err := admin.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		before := calls(t, admin)
		res, err := l.Allow(ctx, 1, limit.For("script"))
		if err != nil || !res.Allowed {
			t.Fatalf("Allow after the flushes: %+v, %v", res, err)
		}
		after := calls(t, admin)
		if after["eval"]-before["eval"] != 1 || after["wait"]-before["wait"] < 2 {
			t.Fatalf("after the flushes: %d EVAL, %d WAIT; want the script sent once with EVAL, each call with its WAIT",
				after["eval"]-before["eval"], after["wait"]-before["wait"])
		}
	})

	t.Run("more replicas than there are", func(t *testing.T) {
		l := newL(t, 2, WithBatching(1))
		_, err := l.Allow(ctx, 1, limit.For("two"))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "1 of 2") {
			t.Fatalf("Allow with one replica of two: %v, want ErrUnavailable saying 1 of 2", err)
		}
	})

	t.Run("a paused replica", func(t *testing.T) {
		l := newL(t, 1, WithBatching(1))
		replicas[0].Pause()
		_, err := l.Allow(ctx, 1, limit.For("paused"))
		replicas[0].Resume()
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errNotReplicated) {
			t.Fatalf("Allow with the replica paused: %v, want ErrUnavailable, not replicated", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err = l.Allow(ctx, 1, limit.For("paused")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the replica resumed, Allow still fails: %v", err)
			}
		}
	})
}

// TestReplicaAcksCluster: on a Redis Cluster, the WAIT goes to the master
// that ran the script, on its connection: each pipeline a node is sent
// holds a script call, then the WAIT. A keyless WAIT sent through the
// Cluster client would go to any node, where it would count replicas that
// hold nothing of the call.
func TestReplicaAcksCluster(t *testing.T) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	var mu sync.Mutex
	var bad []string
	var waits atomic.Int64
	rdb.OnNewNode(func(c *redis.Client) { c.AddHook(pipelineCheck{&mu, &bad, &waits}) })
	l, err := New(rdb, WithLogger(nil), WithTimeout(2*time.Second), WithReplicaAcks(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	prefix := "replicaacks:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range 30 { // keys in many slots, on every master
		key := prefix + ":" + strconv.Itoa(i)
		res, err := l.Allow(ctx, 1, PerMinute(10).For(key))
		if err != nil || !res.Allowed {
			t.Fatalf("Allow %s: %+v, %v", key, res, err)
		}
		// Several slots: the Rules are decided slot by slot, each with
		// its WAIT on its own master.
		if _, err := l.Allow(ctx, 1, PerMinute(10).For(key+":a"), PerMinute(10).For(key+":b")); err != nil {
			t.Fatalf("Allow of two slots: %v", err)
		}
		_ = l.Reset(ctx, key)
		_ = l.Reset(ctx, key+":a")
		_ = l.Reset(ctx, key+":b")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 || waits.Load() < 90 {
		t.Fatalf("%d WAITs; pipelines where WAIT did not follow the script: %q", waits.Load(), bad)
	}
}

// pipelineCheck is a go-redis hook on a Cluster node that notes each
// WAIT it sees not sent right after a script, in one pipeline.
type pipelineCheck struct {
	mu    *sync.Mutex
	bad   *[]string
	waits *atomic.Int64
}

func (pipelineCheck) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h pipelineCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "wait" {
			h.note("WAIT alone")
		}
		return next(ctx, cmd)
	}
}

func (h pipelineCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for i, c := range cmds {
			if c.Name() != "wait" {
				continue
			}
			h.waits.Add(1)
			if i != 1 || len(cmds) != 2 || !strings.Contains("fcall evalsha eval", cmds[0].Name()) {
				var names []string
				for _, c := range cmds {
					names = append(names, c.Name())
				}
				h.note(strings.Join(names, " "))
			}
		}
		return next(ctx, cmds)
	}
}

func (h pipelineCheck) note(s string) {
	h.mu.Lock()
	*h.bad = append(*h.bad, s)
	h.mu.Unlock()
}

// BenchmarkReplicaAcks: what WithReplicaAcks adds to a decision's latency,
// on a master and a replica of their own (loopback): a lone caller's
// decision (ns/op is its latency), and 16 callers' (ns/op is the time per
// decision of the throughput), without and with the WAIT.
//
//	go test -run '^$' -bench BenchmarkReplicaAcks -benchmem -count 6 ./core
func BenchmarkReplicaAcks(b *testing.B) {
	master, _ := replicatedB(b)
	ctx := context.Background()
	limit := PerSecond(10_000_000)
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"acks=0", nil},
		{"acks=1", []Option{WithReplicaAcks(1, 500*time.Millisecond)}},
	} {
		l, err := New(master.Client(b, nil), append([]Option{WithLogger(nil), WithTimeout(time.Second)}, mode.opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("lone/"+mode.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Allow(ctx, 1, limit.For("bench:lone")); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("parallel16/"+mode.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16 / max(1, runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := l.Allow(ctx, 1, limit.For("bench:p:"+strconv.Itoa(i%1000))); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
		_ = l.Close()
	}
}
