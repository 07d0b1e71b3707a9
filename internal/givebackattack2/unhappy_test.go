package givebackattack2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// cutProxy forwards TCP to a Redis; when armed, it forwards the next
// script call (FCALL, EVALSHA, EVAL) to Redis, drops Redis' reply, and
// closes both ends: the script ran, its caller sees the connection fail,
// as when Redis restarts or the network breaks after the call arrived.
type cutProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int32
	calls  atomic.Int32 // script calls seen
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.conn(c)
	}
}

func isScript(b []byte) bool {
	l := bytes.ToLower(b)
	return bytes.Contains(l, []byte("fcall")) || bytes.Contains(l, []byte("evalsha")) || bytes.Contains(l, []byte("\r\neval\r\n"))
}

func (p *cutProxy) conn(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	var dropping atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && !dropping.Load() {
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = c.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if isScript(chunk) {
				p.calls.Add(1)
				if p.armed.CompareAndSwap(true, false) {
					dropping.Store(true)
					_, _ = s.Write(chunk)
					time.Sleep(100 * time.Millisecond) // the script runs; its reply is dropped
					p.cuts.Add(1)
					_ = c.Close()
					_ = s.Close()
					return
				}
			}
			if _, werr := s.Write(chunk); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = s.Close()
	_ = c.Close()
}

// realEnv is a redis-server of the test's own, a direct Limiter on it
// (reads), and an admin client.
type realEnv struct {
	t     *testing.T
	s     *redistest.Server
	admin *redis.Client
	ld    *core.Limiter
}

func newRealEnv(t *testing.T) *realEnv {
	t.Helper()
	s := redistest.StartServer(t)
	r := &realEnv{t: t, s: s, admin: s.Admin(t)}
	var err error
	if r.ld, err = core.New(s.Client(t, nil), core.WithPrefix("gb2"), core.WithLogger(nil), core.WithLocalFallback(0, 0), core.WithBreaker(0, 0)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.ld.Close() })
	return r
}

func (r *realEnv) remaining(rule core.Rule) int {
	r.t.Helper()
	res, err := r.ld.Peek(context.Background(), rule)
	if err != nil {
		r.t.Fatal(err)
	}
	return res.Remaining
}

// noPersistentKeys fails the test on a key without a TTL (PTTL -1).
func (r *realEnv) noPersistentKeys(what string) {
	r.t.Helper()
	ctx := context.Background()
	keys, err := r.admin.Keys(ctx, "gb2*").Result()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, k := range keys {
		if typ, _ := r.admin.Type(ctx, k).Result(); typ == "zset" && bytes.HasSuffix([]byte(k), []byte("fleet")) {
			continue
		}
		if ttl, err := r.admin.PTTL(ctx, k).Result(); err == nil && ttl == -1 {
			r.t.Errorf("%s: key %s has no TTL (PTTL %v)", what, k, ttl)
		}
	}
}

// TestRefundReplyLostNotRetried: the refund's script runs in Redis and
// its reply is lost (the connection breaks after the call arrived). The
// client is go-redis with its default retries (3): a refund must not be
// sent again, so the units come back once. Then the caller retries the
// Refund after the error: a receipt of several Rules gives nothing twice
// (docs/limits.md#receipts); a receipt of one Rule may (documented: "a
// retry could give them back again"), which the test measures and logs.
// Under a Limit of 10 per hour, so the refill (a unit per 6 min) plays no
// part: Remaining is exact.
func TestRefundReplyLostNotRetried(t *testing.T) {
	ctx := context.Background()
	r := newRealEnv(t)
	p := newCutProxy(t, r.s.Addr())
	for _, alg := range buckets {
		for _, batching := range []bool{false, true} {
			for _, several := range []bool{false, true} {
				for _, verb := range []string{"refund", "settle"} {
					name := fmt.Sprintf("%s/batching=%v/several=%v/%s", alg, batching, several, verb)
					t.Run(name, func(t *testing.T) {
						opts := []core.Option{core.WithPrefix("gb2"), core.WithLogger(nil), core.WithLocalFallback(0, 0),
							core.WithBreaker(0, 0), core.WithTimeout(2 * time.Second)}
						if batching {
							opts = append(opts, core.WithBatching(8))
						}
						c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true}) // default retries
						defer func() { _ = c.Close() }()
						l, err := core.New(c, opts...)
						if err != nil {
							t.Fatal(err)
						}
						defer func() { _ = l.Close() }()
						lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Hour}
						user := lim.For("user-" + name)
						rules := []core.Rule{user}
						if several {
							rules = append(rules, lim.For("other-"+name))
						}
						if res, err := l.Allow(ctx, 5, rules...); err != nil || !res.Allowed {
							t.Fatal(res, err)
						}
						a, err := l.Allow(ctx, 3, rules...)
						if err != nil || !a.Allowed {
							t.Fatal(a, err)
						}
						before := r.remaining(user) // 2
						p.armed.Store(true)
						start := time.Now()
						if verb == "refund" {
							err = l.Refund(ctx, a)
						} else {
							_, err = l.Settle(ctx, a, 0)
						}
						took := time.Since(start)
						if p.cuts.Load() == 0 {
							t.Fatalf("the proxy cut nothing (err %v)", err)
						}
						p.cuts.Store(0)
						after := r.remaining(user)
						t.Logf("%s: %s with its reply lost: err %v after %v; Remaining %d -> %d", name, verb, err, took.Round(time.Millisecond), before, after)
						if err == nil {
							t.Errorf("%s: the lost reply was not reported", name)
						}
						if after-before > 3 {
							t.Errorf("%s: %d units came back for a take of 3: the call was sent again", name, after-before)
						}
						if took > 4*time.Second { // (the timeout plus 2 s of a busy machine)
							t.Errorf("%s: %v, far past the 2 s timeout", name, took)
						}
						// The caller retries.
						if verb == "refund" {
							err = l.Refund(ctx, a)
						} else {
							_, err = l.Settle(ctx, a, 0)
						}
						again := r.remaining(user)
						t.Logf("%s: the retry: err %v; Remaining %d -> %d (%d given back in all for a take of 3)", name, err, after, again, again-before)
						if several && again-before > 3 {
							t.Errorf("%s: a receipt of several Rules gave back %d for a take of 3 after a retry", name, again-before)
						}
						r.noPersistentKeys(name)
					})
				}
			}
		}
	}
}

// TestRefundRedisPausedBeyondTimeout: Redis stops (SIGSTOP) with the
// refund in its socket: the call returns within the Limiter's timeout (200
// ms) with an error; Redis, resumed, runs the refund it received; a retry
// of a receipt of several Rules gives nothing more. No key is left without
// a TTL. Then Redis is killed: Refund and Settle fail at once (no panic, no
// hang); restarted empty, the retry gives nothing to the fresh state.
func TestRefundRedisPausedBeyondTimeout(t *testing.T) {
	ctx := context.Background()
	r := newRealEnv(t)
	for _, alg := range buckets {
		for _, several := range []bool{false, true} {
			name := fmt.Sprintf("%s/several=%v", alg, several)
			l, err := core.New(r.s.Client(t, nil), core.WithPrefix("gb2"), core.WithLogger(nil), core.WithLocalFallback(0, 0),
				core.WithBreaker(0, 0), core.WithTimeout(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Hour}
			user := lim.For("paused-" + name)
			rules := []core.Rule{user}
			if several {
				rules = append(rules, lim.For("paused-other-"+name))
			}
			if res, err := l.Allow(ctx, 5, rules...); err != nil || !res.Allowed {
				t.Fatal(res, err)
			}
			a, err := l.Allow(ctx, 3, rules...)
			if err != nil || !a.Allowed {
				t.Fatal(a, err)
			}
			before := r.remaining(user)
			r.s.Pause()
			start := time.Now()
			err = l.Refund(ctx, a)
			took := time.Since(start)
			r.s.Resume()
			if err := r.admin.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			after := r.remaining(user)
			t.Logf("%s: Refund with Redis paused: %v after %v; Remaining %d -> %d once resumed", name, err, took.Round(time.Millisecond), before, after)
			if err == nil || took > 2*time.Second { // (10 × the timeout: a busy 2-core machine under -race; a hang never returns)
				t.Errorf("%s: Refund with Redis paused: err %v after %v, want an error within about 200ms", name, err, took)
			}
			err = l.Refund(ctx, a)
			again := r.remaining(user)
			t.Logf("%s: retry: %v; Remaining %d -> %d (%d in all for a take of 3)", name, err, after, again, again-before)
			if several && again-before > 3 {
				t.Errorf("%s: the retry of a receipt of several Rules gave back again: %d for a take of 3", name, again-before)
			}
			r.noPersistentKeys(name)
			_ = l.Close()
		}
	}

	// Redis down, then restarted empty.
	l, err := core.New(r.s.Client(t, nil), core.WithPrefix("gb2"), core.WithLogger(nil), core.WithLocalFallback(0, 0),
		core.WithBreaker(0, 0), core.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	lim := core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Hour}
	a, err := l.Allow(ctx, 3, lim.For("down"))
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	r.s.Kill()
	start := time.Now()
	err = l.Refund(ctx, a)
	_, serr := l.Settle(ctx, a, 1)
	if took := time.Since(start); err == nil || serr == nil || took > 2*time.Second {
		t.Errorf("Refund and Settle with Redis down: %v, %v after %v", err, serr, took)
	}
	t.Logf("Redis down: Refund %v; Settle %v (unavailable: %v)", err, serr, errors.Is(err, core.ErrUnavailable))
	r.s.Restart()
	if err := l.Refund(ctx, a); err != nil {
		t.Logf("refund after the restart: %v", err)
	}
	if got := r.remaining(lim.For("down")); got != 10 {
		t.Errorf("the fresh key after the restart at Remaining %d, want 10", got)
	}
	keys, _ := r.admin.Keys(ctx, "gb2*").Result()
	t.Logf("after a refund into the restarted Redis, its keys: %v", keys)
	r.noPersistentKeys("after the restart")
}
