package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// failLoads fails the first n FUNCTION commands (a load's LIST or LOAD)
// as a node that is down would, and passes the rest on.
type failLoads struct{ n atomic.Int32 }

func (h *failLoads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failLoads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "function" && h.n.Add(-1) >= 0 {
			err := errors.New("dial tcp 127.0.0.1:7001: connect: connection refused")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failLoads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFunctionsLoadRetriedAfterAPassingFailure backs loadRetry's "a load
// that failed for a passing reason is tried again after 1s, 2s, 4s ...":
// two loads that fail as a restarting node's would are followed by a
// third, 1s and 2s later, that loads the library, with no request and no
// new connection to prompt it. (Before, a failed load was not tried again
// for a minute, and a Cluster whose master came back empty decided by
// script until then: TestClusterMasterRestartedEmpty failed 1 run in 11.)
func TestFunctionsLoadRetriedAfterAPassingFailure(t *testing.T) {
	rdb := redistest.Real(t)
	redistest.NeedFunctions(t, rdb)
	h := &failLoads{}
	h.n.Store(2)
	rdb.AddHook(h)
	l := opsNew(t, rdb)
	start := time.Now()
	for !l.funcs.on.Load() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the library is not loaded %v after two failed loads; want it within about 3s", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("loaded %v after New, before the retries' 1s and 2s", took)
	}
	if h.n.Load() > -1 {
		t.Errorf("%d FUNCTION commands, want the 2 that failed and a third load's", 2-h.n.Load())
	}
}

// TestFunctionsRefusedWaitAMinute: a server that refuses FUNCTION (here
// miniredis: an unknown command) is not asked again within loadRetry,
// and scripts decide.
func TestFunctionsRefusedWaitAMinute(t *testing.T) {
	_, rdb := redistest.Mini(t)
	// miniredis compiles the script's Lua slowly, beyond the default 100ms
	// on a busy machine; the timeout is not what this test is about.
	l := opsNew(t, rdb, WithTimeout(time.Minute))
	deadline := time.Now().Add(5 * time.Second)
	for l.funcs.next.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if wait := time.Until(time.Unix(0, l.funcs.next.Load())); wait < loadRetry-5*time.Second {
		t.Errorf("after a refused load, the next is %v away, want about %v", wait, loadRetry)
	}
	if l.funcs.on.Load() || l.funcs.fails.Load() != 0 {
		t.Errorf("on %v, fails %d after a refusal; want off, no passing failure counted", l.funcs.on.Load(), l.funcs.fails.Load())
	}
	if r, err := l.Allow(context.Background(), 1, PerSecond(1).For("k")); err != nil || !r.Allowed {
		t.Fatalf("a decision by script: %+v, %v", r, err)
	}
}

// slowStart forwards TCP connections to a Redis, holding what clients send
// until openAt (a server slow to answer its first connections: a busy
// machine, a cold proxy) and while stalled (a Redis that stops answering).
type slowStart struct {
	ln     net.Listener
	target string
	openAt time.Time
	stall  atomic.Bool
}

func startSlowStart(t *testing.T, target string, hold time.Duration) *slowStart {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowStart{ln: ln, target: target, openAt: time.Now().Add(hold)}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *slowStart) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		go func() {
			defer func() { _ = u.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.gate()
					if _, werr := u.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer func() { _ = c.Close() }()
			_, _ = io.Copy(c, u)
		}()
	}
}

// gate holds a client's bytes as the network would: the proxy emulates a
// slow server, it does not synchronise the test.
func (p *slowStart) gate() {
	time.Sleep(time.Until(p.openAt))
	for p.stall.Load() {
		time.Sleep(time.Millisecond)
	}
}

// firstCallBackends are the servers a new Limiter meets: one without
// FUNCTION (miniredis: scripts decide) and a redis-server of its own,
// whose library is not loaded yet.
func firstCallBackends(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"miniredis": func(t *testing.T) string {
			mr, _ := redistest.Mini(t)
			return mr.Addr()
		},
		"redis-server": func(t *testing.T) string { return redistest.StartServer(t).Addr() },
	}
}

// TestFirstDecisionWaitsForTheLoad: a Limiter made while its Redis is slow
// to answer (the first 600ms of every connection held) decides its first
// request within the caller's context, not the 150ms timeout; once warm,
// a decision that meets a stalled Redis fails after its 150ms as before.
// (150ms, not the default 100ms, so that a busy machine does not fail the
// decisions that are meant to pass.)
// Guards: "dialling Redis and loading the library do not make a new
// Limiter's first decisions fail" (New's godoc). Before, the first
// decision failed with "context deadline exceeded" on both servers.
func TestFirstDecisionWaitsForTheLoad(t *testing.T) {
	const hold, timeout = 600 * time.Millisecond, 150 * time.Millisecond
	for name, addr := range firstCallBackends(t) {
		t.Run(name, func(t *testing.T) {
			p := startSlowStart(t, addr(t), hold)
			rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			l := opsNew(t, rdb, WithTimeout(timeout))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			key := "first-call-" + t.Name()
			r, err := l.Allow(ctx, 1, PerMinute(10).For(key))
			if err != nil || !r.Allowed {
				t.Fatalf("first decision, Redis held %v: %+v, %v; want it admitted within the caller's 5s", hold, r, err)
			}
			if r, err := l.Allow(ctx, 1, PerMinute(10).For(key)); err != nil || r.Remaining != 8 {
				t.Fatalf("second decision: %+v, %v", r, err)
			}
			p.stall.Store(true)
			defer p.stall.Store(false)
			start := time.Now()
			_, err = l.Allow(ctx, 1, PerMinute(10).For(key))
			if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
				t.Errorf("a warm Limiter on a stalled Redis: %v after %v; want the %v timeout to end it", err, took, timeout)
			}
		})
	}
}

// TestFirstWaitEndsWithinItsBound: a Redis that never answers holds a new
// Limiter's first decision at most warmWait after New (plus its timeout),
// and a caller whose context ends first is let go at once.
// Guards: "at most a second after New" (New's godoc).
func TestFirstWaitEndsWithinItsBound(t *testing.T) {
	_, mrdb := redistest.Mini(t)
	p := startSlowStart(t, mrdb.Options().Addr, time.Hour)
	rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	l := opsNew(t, rdb)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.Allow(short, 1, PerMinute(10).For("k")); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 500*time.Millisecond {
		t.Errorf("a caller whose 20ms end during the first load: %v after %v; want its own deadline", err, time.Since(start))
	}
	_, err := l.Allow(context.Background(), 1, PerMinute(10).For("k"))
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 3*time.Second {
		t.Errorf("first decisions on a silent Redis: %v after %v; want a timeout about 1s after New", err, took)
	}
}

// commands counts the commands a client sends, by name, and those that
// fail with a reply of the server.
type commands struct {
	mu     sync.Mutex
	sent   map[string]int
	failed map[string]int
}

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := cmd.Name()
		if (name == "function" || name == "client") && len(cmd.Args()) > 1 {
			name += " " + strings.ToLower(fmt.Sprint(cmd.Args()[1]))
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sent[name]++
		var re redis.Error
		// CLIENT SETINFO and MAINT_NOTIFICATIONS are go-redis' handshake
		// on each connection, which Redis before 7.2 and 8 refuses: not
		// the Limiter's to answer for.
		if errors.As(err, &re) && !strings.HasPrefix(name, "client") {
			c.failed[name]++
		}
		return err
	}
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestNewLimitersDoNotFailLoads: 20 Limiters made one after another on a
// Redis send one FUNCTION LOAD between them and no command that fails.
// Guards: "unless Redis holds them already" (New's godoc). Before, each
// Limiter sent a FUNCTION LOAD, and 19 of 20 failed ("already exists").
func TestNewLimitersDoNotFailLoads(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t, nil)
	redistest.NeedFunctions(t, rdb) // Redis 6.2: no library to load, each Limiter decides by script
	cmds := &commands{sent: map[string]int{}, failed: map[string]int{}}
	rdb.AddHook(cmds)
	for i := range 20 {
		l := opsNew(t, rdb, WithTimeout(5*time.Second)) // counting, not timing
		if _, err := l.Allow(context.Background(), 1, PerMinute(100).For("loads")); err != nil {
			t.Fatalf("Limiter %d: %v", i, err)
		}
		if !l.funcs.on.Load() {
			t.Fatalf("Limiter %d decided before its library was known to be loaded", i)
		}
		_ = l.Close()
	}
	cmds.mu.Lock()
	defer cmds.mu.Unlock()
	if cmds.sent["function load"] != 1 || len(cmds.failed) != 0 {
		t.Errorf("20 new Limiters sent %d FUNCTION LOADs, and these failed: %v; want 1 and none", cmds.sent["function load"], cmds.failed)
	}
}

// TestFunctionsRefusedLoggedOnce: a server without FUNCTION (miniredis)
// is reported once, at Info, however often the load is tried again.
// Guards: "which is logged once at Info level" (New's godoc).
func TestFunctionsRefusedLoggedOnce(t *testing.T) {
	_, rdb := redistest.Mini(t)
	var logs redistest.LogBuffer // the health check logs from its own goroutine
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l, err := New(rdb, WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	for range 3 {
		if _, err := l.Allow(context.Background(), 1, PerMinute(10).For("k")); err != nil {
			t.Fatal(err)
		}
		for l.funcs.loading.Load() {
			time.Sleep(time.Millisecond)
		}
		l.funcs.next.Store(0)
		l.funcs.load(l)
	}
	for l.funcs.loading.Load() {
		time.Sleep(time.Millisecond)
	}
	if n := strings.Count(logs.String(), "refused FUNCTION"); n != 1 || !strings.Contains(logs.String(), "level=INFO") {
		t.Errorf("%d records of the refusal in 4 loads, want 1 at Info:\n%s", n, logs.String())
	}
}

// TestFirstDecisionOnARefusingRedis: a new Limiter whose Redis refuses
// connections fails its first decision as fast as a later one, not after
// waiting out the first load. Guards: "A Redis that refuses the connection
// ends the wait at once" (New's godoc); without it the decision took 1s.
func TestFirstDecisionOnARefusingRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + redistest.FreePort(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	l := opsNew(t, rdb)
	start := time.Now()
	_, err := l.Allow(context.Background(), 1, PerMinute(10).For("k"))
	if took := time.Since(start); err == nil || took > 500*time.Millisecond {
		t.Errorf("first decision on a Redis that refuses connections: %v after %v; want an error within 500ms", err, took)
	}
}

// TestFirstDecisionSweep walks a new Limiter's first decision over the
// servers (with and without FUNCTION), how long the server holds its
// first connections, and the caller's deadline: held less than the first
// load's bound (1s), the first decision is admitted whenever the caller
// waits long enough; held longer, it fails at about that bound; a caller
// whose deadline comes first fails at its deadline, never later. Either
// way, once the server answers, decisions are admitted within the timeout.
func TestFirstDecisionSweep(t *testing.T) {
	const timeout = 150 * time.Millisecond // not 50ms: a busy machine must not fail the admissions
	for name, addr := range firstCallBackends(t) {
		for _, hold := range []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond} {
			for _, caller := range []time.Duration{50 * time.Millisecond, 5 * time.Second} {
				t.Run(fmt.Sprintf("%s/hold=%v/caller=%v", name, hold, caller), func(t *testing.T) {
					t.Parallel()
					p := startSlowStart(t, addr(t), hold)
					rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true})
					t.Cleanup(func() { _ = rdb.Close() })
					l := opsNew(t, rdb, WithTimeout(timeout), WithBreaker(0, 0))
					ctx, cancel := context.WithTimeout(context.Background(), caller)
					defer cancel()
					start := time.Now()
					r, err := l.Allow(ctx, 1, PerMinute(10).For("sweep"))
					took := time.Since(start)
					// A caller of 50ms may meet its own deadline on a busy
					// machine whatever the hold: that is not the Limiter's.
					mustAdmit := caller > time.Second && hold < warmWait-timeout
					mustFail := hold > caller || hold > warmWait+timeout
					switch {
					case err == nil && r.Allowed && !mustFail:
					case mustAdmit:
						t.Errorf("first decision: %+v, %v after %v; want admitted", r, err, took)
					case !errors.Is(err, context.DeadlineExceeded):
						t.Errorf("first decision: %+v, %v after %v; want a deadline", r, err, took)
					case took > min(caller, warmWait+timeout)+time.Second:
						t.Errorf("first decision failed after %v; want about %v", took, min(caller, warmWait+timeout))
					}
					time.Sleep(time.Until(p.openAt)) // the server answers from now on
					if r, err := l.Allow(context.Background(), 1, PerMinute(10).For("sweep")); err != nil || !r.Allowed {
						t.Errorf("a decision once the server answers: %+v, %v", r, err)
					}
				})
			}
		}
	}
}
