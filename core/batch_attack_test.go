package core_test

// Attacks on batched decisions (many goroutines calling one Limiter, whose
// calls share script calls), above all the period FixedWindow's batch of
// one-unit takes (fw.takes: INCRBY per key, packed replies), from outside
// the package: on the real Redis (REDIS_URL) and on miniredis where a
// controlled clock helps.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// batchGate is a go-redis hook that holds every script call (FCALL,
// EVALSHA, EVAL) while it is closed, so that the callers that come next
// queue in the Limiter's batcher and go together into one call once it
// opens. It records every script call it sees: its caller keys and what
// its context carries.
type batchGate struct {
	mu    sync.Mutex
	ch    chan struct{} // nil: open
	held  atomic.Int64
	calls []gateCall
}

type gateCall struct {
	name     string
	keys     []string
	val      any
	deadline time.Time
	hasDL    bool
	at       time.Time
}

type gateValKey struct{}

func newGate(rdb *redis.Client) *batchGate {
	g := &batchGate{}
	rdb.AddHook(g)
	return g
}

func (g *batchGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *batchGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *batchGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if name != "fcall" && name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		args := cmd.Args()
		var keys []string
		if len(args) >= 3 {
			if n, err := strconv.Atoi(fmt.Sprint(args[2])); err == nil {
				for i := 0; i < n && 3+i < len(args); i++ {
					keys = append(keys, fmt.Sprint(args[3+i]))
				}
			}
		}
		dl, ok := ctx.Deadline()
		g.mu.Lock()
		g.calls = append(g.calls, gateCall{name: name, keys: keys, val: ctx.Value(gateValKey{}), deadline: dl, hasDL: ok, at: time.Now()})
		ch := g.ch
		g.mu.Unlock()
		if ch != nil {
			g.held.Add(1)
			select {
			case <-ch:
			case <-ctx.Done():
				g.held.Add(-1)
				return ctx.Err()
			}
			g.held.Add(-1)
		}
		return next(ctx, cmd)
	}
}

func (g *batchGate) close() {
	g.mu.Lock()
	g.ch = make(chan struct{})
	g.mu.Unlock()
}

func (g *batchGate) open() {
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}

// mark is the number of script calls seen so far.
func (g *batchGate) mark() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}

// since is the script calls seen after mark m.
func (g *batchGate) since(m int) []gateCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gateCall(nil), g.calls[m:]...)
}

// widest is the most caller keys of one script call after mark m.
func (g *batchGate) widest(m int) int {
	most := 0
	for _, c := range g.since(m) {
		most = max(most, len(c.keys))
	}
	return most
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// gated runs callers so that they are decided in one batch: four fillers
// (decisions under the same plan, on keys of their own) take the group's
// four slots and are held at the gate; the callers, started one after
// another, each once the one before it has queued on l (or is held at
// the gate, or has returned), queue behind them in that order; the gate
// opens, and the first filler to return takes the queue into one call. It
// returns the widest script call (caller keys) made after the gate opened.
func gated(t *testing.T, g *batchGate, l *core.Limiter, fill func(i int), callers ...func()) int {
	t.Helper()
	g.close()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { fill(i) })
	}
	waitUntil(t, "4 fillers held at the gate", func() bool { return g.held.Load() >= 4 })
	for i, c := range callers {
		before := core.Waiting(l) + int(g.held.Load())
		var returned atomic.Bool
		wg.Go(func() {
			c()
			returned.Store(true)
		})
		waitUntil(t, fmt.Sprintf("caller %d queued", i), func() bool {
			return returned.Load() || core.Waiting(l)+int(g.held.Load()) > before
		})
	}
	m := g.mark()
	g.open()
	wg.Wait()
	return g.widest(m)
}

// batchRDB is the real Redis for where "real", else a miniredis.
func batchRDB(t *testing.T, where string) *redis.Client {
	if where == "real" {
		return redistest.Real(t)
	}
	_, rdb := redistest.Mini(t)
	return rdb
}

// TestBatchAttackRulesOfSeveralKeys: concurrent Allows under two Rules of
// different keys on one Redis node (a user's and an organisation's): one
// plan, the same first key ("u"), different second keys. org0 is fresh;
// org1..org7 have spent their Rate. Batched, each request must be decided
// on its own organisation's key, as alone: org1..org7 refuse. (The batch
// groups requests by their first state key only, so all eight are decided
// on u and org0: seven admitted past full windows, and org0 charged 8.)
func TestBatchAttackRulesOfSeveralKeys(t *testing.T) {
	for _, where := range []string{"mini", "real"} {
		t.Run(where, func(t *testing.T) {
			rdb := batchRDB(t, where)
			prefix := fwPrefix(t)
			fwCleanup(t, rdb, prefix)
			g := newGate(rdb)
			ctx := context.Background()
			l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(10*time.Second))
			user, org := fwLimit(1000, time.Hour), fwLimit(8, time.Hour)
			if where == "real" {
				clearOfPeriodEnd(t, rdb, time.Hour, 10*time.Second)
			}
			const n = 8
			orgKey := func(i int) string { return fmt.Sprintf("org%d", i) }
			for i := 1; i < n; i++ {
				if r, err := l.Allow(ctx, org.Rate, org.For(orgKey(i))); err != nil || !r.Allowed {
					t.Fatal(r, err)
				}
			}
			res := make([]core.Result, n)
			errs := make([]error, n)
			var callers []func()
			for i := range n {
				callers = append(callers, func() {
					res[i], errs[i] = l.Allow(ctx, 1, user.For("u"), org.For(orgKey(i)))
				})
			}
			wide := gated(t, g, l, func(i int) {
				_, _ = l.Allow(ctx, 1, user.For(fmt.Sprintf("f%d", i)), org.For(fmt.Sprintf("forg%d", i)))
			}, callers...)
			t.Logf("widest script call after the gate: %d keys", wide)
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("caller %d: %v", i, errs[i])
				}
				p, err := l.Peek(ctx, org.For(orgKey(i)))
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case i == 0 && (!res[i].Allowed || p.Remaining != org.Rate-1):
					t.Errorf("org0 (fresh): caller admitted %v, org0 has %d of %d left, want admitted and %d left", res[i].Allowed, p.Remaining, org.Rate, org.Rate-1)
				case i > 0 && res[i].Allowed:
					t.Errorf("caller %d admitted under org%d, whose window was full (Remaining now %d): decided on another key's state", i, i, p.Remaining)
				}
			}
		})
	}
}

// TestBatchAttackPeriodLengthenedKeepsCount: a key spends its Rate of 10
// in a 200 ms window (the first half of a 400 ms one); 30 ms later, still
// inside that window, its Limit's Period becomes 400 ms. The window lasts
// until its key expires, and carries its count ("the windows carry their count"): a lone Allow
// refuses. A batch of several keys (which reads Redis TIME) and a decision
// under two Rules (likewise) must decide the same; they find the old
// window ended by the new Period's arithmetic (fw_end, clock ~= 0 in
// fw.load) and open a fresh one: 10 more units inside the 200 ms window.
func TestBatchAttackPeriodLengthenedKeepsCount(t *testing.T) {
	for _, where := range []string{"mini", "real"} {
		t.Run(where, func(t *testing.T) {
			for attempt := 1; ; attempt++ {
				if periodLengthened(t, where, attempt == 3) {
					return
				}
			}
		})
	}
}

// periodLengthened runs the test once and reports whether it ran in time
// (on the real clock a busy machine may take too long, and unless last is
// set, that run is left for another).
func periodLengthened(t *testing.T, where string, last bool) bool {
	const P1, P2 = 200 * time.Millisecond, 400 * time.Millisecond
	ctx := context.Background()
	var rdb *redis.Client
	var clk *fwClock
	if where == "real" {
		rdb = redistest.Real(t)
	}
	if where == "mini" {
		var mr *miniredis.Miniredis
		mr, rdb = redistest.Mini(t)
		start := time.UnixMilli((redistest.Epoch.UnixMilli()/400 + 1) * 400).UTC() // a 400 ms window's start
		clk = newFwClock(mr, start.Add(10*time.Millisecond))
	} else {
		now, err := redisMicros(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration((now/400000+1)*400000+10000-now) * time.Microsecond)
	}
	prefix := fwPrefix(t)
	fwCleanup(t, rdb, prefix)
	g := newGate(rdb)
	l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(10*time.Second))
	short, long := fwLimit(10, P1), fwLimit(10, P2)
	for _, k := range []string{"lone", "batched", "rules"} {
		if r, err := l.Allow(ctx, 10, short.For(k)); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	if clk != nil {
		clk.add(30 * time.Millisecond)
	} else {
		time.Sleep(30 * time.Millisecond)
	}
	t0, _ := redisMicros(ctx, rdb)
	lone, err := l.Allow(ctx, 1, long.For("lone"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := l.Allow(ctx, 1, long.For("rules"), fwLimit(100, time.Hour).For("other"))
	if err != nil {
		t.Fatal(err)
	}
	var batched core.Result
	var berr error
	callers := []func(){func() { batched, berr = l.Allow(ctx, 1, long.For("batched")) }}
	for i := range 3 {
		callers = append(callers, func() { _, _ = l.Allow(ctx, 1, long.For(fmt.Sprintf("x%d", i))) })
	}
	wide := gated(t, g, l, func(i int) { _, _ = l.Allow(ctx, 1, long.For(fmt.Sprintf("f%d", i))) }, callers...)
	if berr != nil {
		t.Fatal(berr)
	}
	if t1, _ := redisMicros(ctx, rdb); clk == nil && t1%400000 >= 200000 {
		if !last {
			t.Logf("too slow, once more: the calls ran from %dµs to %dµs into the 400 ms window, past the 200 ms one", t0%400000, t1%400000)
			return false
		}
		t.Fatalf("too slow: the calls ran from %dµs to %dµs into the 400 ms window, past the 200 ms one", t0%400000, t1%400000)
	}
	t.Logf("lone %+v; widest batch %d keys", lone, wide)
	if lone.Allowed {
		t.Fatalf("the lone take forgot the window's count: %+v", lone)
	}
	if rules.Allowed {
		t.Errorf("under two Rules, the key's window (10 of 10 spent, 160 ms left) was found ended after the Period grew to %v: admitted, %+v", P2, rules.Rules[0])
	}
	if batched.Allowed {
		t.Errorf("batched, the key's window (10 of 10 spent, 160 ms left) was found ended after the Period grew to %v: admitted, %+v", P2, batched)
	}
	return true
}

// TestBatchAttackPoisonKey: a hostile or buggy writer puts a value
// redlimit did not write in one key (text, an integer below 2^36, 2^62, a
// list, our own format without a TTL). Batched with five fresh keys, the
// poisoned key's caller gets an error naming its key (as alone), and the
// five others are decided, with no error. The batch is one script, which
// the poisoned key's INCRBY or corrupt() stops: its calls are then decided
// alone (runBatch), and the keys before the poisoned one keep the unit
// the stopped script took, so they count at most twice (the strict side:
// under Rate 1 such a key is refused once). (It failed every caller of
// the batch, before.) Our own format without a TTL is trusted by a batch,
// which reads no TTL (fw.takes): it is decided, not refused.
func TestBatchAttackPoisonKey(t *testing.T) {
	for _, where := range []string{"mini", "real"} {
		for _, rate := range []int{5, 1} {
			t.Run(fmt.Sprintf("%s/rate=%d", where, rate), func(t *testing.T) { poison(t, where, rate) })
		}
	}
}

func poison(t *testing.T, where string, rate int) {
	{
		{
			rdb := batchRDB(t, where)
			prefix := fwPrefix(t)
			fwCleanup(t, rdb, prefix)
			g := newGate(rdb)
			ctx := context.Background()
			l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(10*time.Second))
			lim := fwLimit(rate, time.Hour)
			if where == "real" {
				clearOfPeriodEnd(t, rdb, time.Hour, 10*time.Second)
			}
			kinds := []struct {
				name  string
				setup func(sk string) error
			}{
				{"text", func(sk string) error { return rdb.Set(ctx, sk, "abc", time.Hour).Err() }},
				{"small", func(sk string) error { return rdb.Set(ctx, sk, "3", time.Hour).Err() }},
				{"huge", func(sk string) error { return rdb.Set(ctx, sk, strconv.FormatInt(1<<62, 10), time.Hour).Err() }},
				{"list", func(sk string) error { return rdb.RPush(ctx, sk, "x").Err() }},
				{"persisted", func(sk string) error {
					if r, err := l.Allow(ctx, 1, lim.For("v-persisted")); err != nil || !r.Allowed {
						return fmt.Errorf("%+v %v", r, err)
					}
					return rdb.Persist(ctx, sk).Err()
				}},
			}
			for _, kind := range kinds {
				t.Run(kind.name, func(t *testing.T) {
					bad := "v-" + kind.name
					sk := fwStateKey(prefix, bad)
					if err := kind.setup(sk); err != nil {
						t.Fatal(err)
					}
					_, loneErr := l.Allow(ctx, 1, lim.For(bad))
					if loneErr != nil && !strings.Contains(loneErr.Error(), sk) {
						t.Errorf("alone: error %q does not name %s", loneErr, sk)
					}
					keys := []string{kind.name + "-a", kind.name + "-b", kind.name + "-c", bad, kind.name + "-d", kind.name + "-e"}
					res := make([]core.Result, len(keys))
					errs := make([]error, len(keys))
					var callers []func()
					for i, k := range keys {
						callers = append(callers, func() { res[i], errs[i] = l.Allow(ctx, 1, lim.For(k)) })
					}
					wide := gated(t, g, l, func(i int) { _, _ = l.Allow(ctx, 1, lim.For(fmt.Sprintf("%s-f%d", kind.name, i))) }, callers...)
					if wide < 2 {
						t.Fatalf("no batch formed (widest call %d keys)", wide)
					}
					for i, k := range keys {
						if k == bad && kind.name == "persisted" {
							continue // (decided: see above)
						}
						if k == bad {
							if (errs[i] == nil) != (loneErr == nil) {
								t.Errorf("the poisoned key: batched error %v, alone %v", errs[i], loneErr)
							}
							if errs[i] != nil && !strings.Contains(errs[i].Error(), sk) {
								t.Errorf("the poisoned key's batched error %q does not name %s", errs[i], sk)
							}
							continue
						}
						p, err := l.Peek(ctx, lim.For(k))
						if err != nil {
							t.Fatal(err)
						}
						if errs[i] != nil {
							t.Errorf("innocent key %s (fresh) failed for the poisoned one: %v; its window has %d of %d left", k, errs[i], p.Remaining, lim.Rate)
							continue
						}
						// Counted once, or twice ahead of the poisoned key.
						twice := i < 3 && kind.name != "persisted"
						if p.Remaining != lim.Rate-1 && (!twice || p.Remaining != max(0, lim.Rate-2)) {
							t.Errorf("innocent key %s: %+v, %d left", k, res[i], p.Remaining)
						}
						if !res[i].Allowed && (!twice || lim.Rate != 1) {
							t.Errorf("innocent key %s refused: %+v, %d left", k, res[i], p.Remaining)
						}
					}
					if kind.name != "list" && kind.name != "persisted" {
						fwTTLs(t, rdb, prefix, kind.name)
					}
					_ = rdb.Del(ctx, sk).Err()
				})
			}
		}
	}
}

// scriptCounter is a go-redis hook that counts script calls, and those of
// more than one caller key (a batch of several keys: fw.takes' path).
type scriptCounter struct{ calls, wide, keys atomic.Int64 }

func (s *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "fcall" || name == "evalsha" || name == "eval" {
			s.calls.Add(1)
			if args := cmd.Args(); len(args) > 2 {
				if n, _ := strconv.Atoi(fmt.Sprint(args[2])); n > 1 {
					s.wide.Add(1)
					s.keys.Add(int64(n))
				}
			}
		}
		return next(ctx, cmd)
	}
}

// sameClock checks that this process' clock is Redis' (the same host):
// Redis TIME lies between two local reads around it, every time. Then a
// call's local bracket holds the instant of its script.
func sameClock(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	for range 20 {
		t0 := time.Now().UnixMicro()
		r, err := redisMicros(context.Background(), rdb)
		t1 := time.Now().UnixMicro()
		if err != nil {
			t.Fatal(err)
		}
		if r < t0-50 || r > t1+50 {
			t.Skipf("Redis TIME %d is not within the local bracket [%d, %d]: another host's clock", r, t0, t1)
		}
	}
}

// fwOffset is where key's staggered windows start within a period, as
// fixed_window.lua's fw_offset computes it: SHA1's first 48 bits, modulo
// the period in ms, in µs.
func fwOffset(stateKey string, period time.Duration) int64 {
	sum := sha1.Sum([]byte(stateKey))
	h, _ := strconv.ParseUint(hex.EncodeToString(sum[:])[:12], 16, 64)
	return int64(h%uint64(period.Milliseconds())) * 1000
}

type hamAdm struct {
	key           int
	t0, t1, reset int64
	granted, left int
	one           bool // an Allow(1): its Remaining is its own count's
}

// TestBatchAttackHammerReal: 48 goroutines on one Limiter (so batches of
// many keys form: fw.takes), on 4 hot keys and 256 cold ones, Allow(1)
// mostly, some Allow(2) and AllowAtMost(3); Rates 1, 2, 3, 5 and 2^33,
// Periods 1 ms to 1 h, staggered and not. By the window each admission's
// ResetAfter names, and by the window its local bracket (this host's
// clock is Redis') lies in, never more than Rate; the Remaining of the
// Allow(1)s of one window are all different (each its own INCRBY); a
// denial waits (0, Period + 1 ms]; Rate 2^33 over an hour counts exactly
// what it admitted; no key is left without a TTL.
func TestBatchAttackHammerReal(t *testing.T) {
	admin := redistest.Real(t)
	sameClock(t, admin)
	cfgs := []struct {
		rate   int
		period time.Duration
	}{{1, time.Millisecond}, {2, 10 * time.Millisecond}, {3, 100 * time.Millisecond}, {5, time.Second}, {1 << 33, time.Hour}}
	for _, stagger := range []bool{false, true} {
		for _, cfg := range cfgs {
			t.Run(fmt.Sprintf("rate=%d/period=%v/stagger=%v", cfg.rate, cfg.period, stagger), func(t *testing.T) {
				hammer(t, admin, cfg.rate, cfg.period, stagger, 700*time.Millisecond)
			})
		}
	}
}

func hammer(t *testing.T, admin *redis.Client, rate int, period time.Duration, stagger bool, dur time.Duration) {
	rdb := redistest.Real(t)
	cnt := &scriptCounter{}
	rdb.AddHook(cnt)
	prefix := fwPrefix(t)
	fwCleanup(t, admin, prefix)
	opts := []core.Option{core.WithPrefix(prefix), core.WithTimeout(5 * time.Second)}
	if stagger {
		opts = append(opts, core.WithStaggeredWindows())
	}
	l := fwNew(t, rdb, opts...)
	lim := fwLimit(rate, period)
	if rate == 1<<33 && !stagger {
		clearOfPeriodEnd(t, rdb, period, dur+10*time.Second) // (its keys are counted below)
	}
	P := period.Microseconds()
	const hot, cold = 4, 256
	keyName := func(k int) string { return fmt.Sprintf("k%d", k) }
	suffix := ":fw4"
	if stagger {
		suffix = ":fw4o"
	}
	offs := make([]int64, hot+cold)
	for k := range offs {
		if stagger {
			offs[k] = fwOffset(prefix+":{"+keyName(k)+"}"+suffix, period)
		}
	}
	ctx := context.Background()
	var mu sync.Mutex
	var adms []hamAdm
	var calls, denials atomic.Int64
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range 48 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			var mine []hamAdm
			for time.Now().Before(stop) {
				k := hot + rng.IntN(cold)
				if rng.IntN(2) == 0 {
					k = rng.IntN(hot)
				}
				var res core.Result
				var err error
				one := false
				t0 := time.Now().UnixMicro()
				switch c := rng.IntN(16); {
				case c == 0:
					res, err = l.AllowAtMost(ctx, 3, lim.For(keyName(k)))
				case c < 3 && rate >= 2:
					res, err = l.Allow(ctx, 2, lim.For(keyName(k)))
				default:
					one = true
					res, err = l.Allow(ctx, 1, lim.For(keyName(k)))
				}
				t1 := time.Now().UnixMicro()
				calls.Add(1)
				if err != nil {
					t.Errorf("key %d: %v", k, err)
					return
				}
				if res.Remaining < 0 || res.Remaining > rate {
					t.Errorf("key %d: Remaining %d out of [0, %d]", k, res.Remaining, rate)
				}
				if !res.Allowed {
					denials.Add(1)
					if res.RetryAfter <= 0 || res.RetryAfter > period+time.Millisecond {
						t.Errorf("key %d: denial waits %v, Period %v", k, res.RetryAfter, period)
					}
					continue
				}
				if res.ResetAfter <= 0 || res.ResetAfter > period+time.Millisecond {
					t.Errorf("key %d: admission resets after %v, Period %v", k, res.ResetAfter, period)
				}
				mine = append(mine, hamAdm{k, t0, t1, res.ResetAfter.Microseconds(), res.Granted, res.Remaining, one})
			}
			mu.Lock()
			adms = append(adms, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	type win struct {
		key int
		w   int64
	}
	byEnd, byBracket := map[win]int{}, map[win]int{}
	lefts := map[win]map[int]int{}
	named, bracketed := 0, 0
	for _, a := range adms {
		off := offs[a.key]
		if end, ok := fwEnd(a.t0-off, a.t1-off, a.reset, P); ok {
			named++
			w := win{a.key, end + off}
			byEnd[w] += a.granted
			if a.one {
				if lefts[w] == nil {
					lefts[w] = map[int]int{}
				}
				lefts[w][a.left]++
			}
		}
		if i0, i1 := floorDiv(a.t0-off, P), floorDiv(a.t1-off, P); i0 == i1 {
			bracketed++
			byBracket[win{a.key, i0}] += a.granted
		}
	}
	for w, n := range byEnd {
		if n > rate {
			t.Errorf("key %d, window ending %dµs (by ResetAfter): %d units admitted, Rate %d", w.key, w.w, n, rate)
		}
	}
	for w, n := range byBracket {
		if n > rate {
			t.Errorf("key %d, window %d (by the call's clock bracket): %d units admitted, Rate %d", w.key, w.w, n, rate)
		}
	}
	for w, m := range lefts {
		for left, n := range m {
			if n > 1 {
				t.Errorf("key %d, window ending %dµs: %d Allow(1)s admitted with Remaining %d", w.key, w.w, n, left)
			}
		}
	}
	if rate == 1<<33 {
		// One hour: a key whose admissions all name one window (no window
		// ended during the run) counts exactly what it admitted.
		per, ends := map[int]int{}, map[int]map[int64]bool{}
		for _, a := range adms {
			per[a.key] += a.granted
			if ends[a.key] == nil {
				ends[a.key] = map[int64]bool{}
			}
			end, _ := fwEnd(a.t0-offs[a.key], a.t1-offs[a.key], a.reset, P)
			ends[a.key][end] = true
		}
		checked := 0
		for k, n := range per {
			if len(ends[k]) != 1 || ends[k][0] {
				continue
			}
			p, err := l.Peek(ctx, lim.For(keyName(k)))
			if err != nil {
				t.Fatal(err)
			}
			if p.ResetAfter < period-dur-5*time.Second && p.Remaining == rate {
				continue // its window ended since
			}
			checked++
			if rate-p.Remaining != n {
				t.Errorf("key %d: %d units admitted, its window counts %d", k, n, rate-p.Remaining)
			}
		}
		if checked < len(per)/2 {
			t.Errorf("only %d of %d keys checked", checked, len(per))
		}
	}
	t.Logf("%d calls (%d denied), %d admissions: %d named a window by ResetAfter, %d bracketed in one; %d script calls, %d of several keys (%.1f keys each)",
		calls.Load(), denials.Load(), len(adms), named, bracketed, cnt.calls.Load(), cnt.wide.Load(), float64(cnt.keys.Load())/float64(max(cnt.wide.Load(), 1)))
	if cnt.wide.Load() == 0 {
		t.Errorf("no batch of several keys formed")
	}
	fwTTLs(t, admin, prefix, "after the hammer")
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// TestBatchAttackFrozenClockMini: on miniredis, whose clock stands still
// until the test moves it, 16 goroutines hammer 40 keys with Allow(1) at
// instants on a window's edges: its last ms, its last µs, the next one's
// first µs, its middle, then two windows on. Every call of a step is in a
// known window of each key (staggered too, from the key's offset), so
// each (key, window) admits exactly min(Rate, its attempts): never more
// (a double grant), never fewer (a window that starts wrongly full, or
// an old window's count that outlives it).
func TestBatchAttackFrozenClockMini(t *testing.T) {
	cfgs := []struct {
		rate   int
		period time.Duration
	}{{1, time.Millisecond}, {2, time.Second}, {1 << 33, time.Hour}, {3, 24 * time.Hour}}
	for _, stagger := range []bool{false, true} {
		for _, cfg := range cfgs {
			t.Run(fmt.Sprintf("rate=%d/period=%v/stagger=%v", cfg.rate, cfg.period, stagger), func(t *testing.T) {
				frozenHammer(t, cfg.rate, cfg.period, stagger)
			})
		}
	}
}

func frozenHammer(t *testing.T, rate int, period time.Duration, stagger bool) {
	mr, rdb := redistest.Mini(t)
	cnt := &scriptCounter{}
	rdb.AddHook(cnt)
	P := period.Microseconds()
	S := (redistest.Epoch.UnixMicro()/P + 1) * P // a window's start
	clk := newFwClock(mr, time.UnixMicro(S).UTC())
	opts := []core.Option{core.WithPrefix("p"), core.WithTimeout(10 * time.Second)}
	suffix := ":fw4"
	if stagger {
		opts = append(opts, core.WithStaggeredWindows())
		suffix = ":fw4o"
	}
	l := fwNew(t, rdb, opts...)
	lim := fwLimit(rate, period)
	const keys, workers, per = 40, 16, 24
	keyName := func(k int) string { return fmt.Sprintf("k%d", k) }
	offs := make([]int64, keys)
	if stagger {
		for k := range offs {
			offs[k] = fwOffset("p:{"+keyName(k)+"}"+suffix, period)
		}
	}
	steps := []int64{S + P/3, S + P - 1000, S + P - 1, S + P, S + P + 1, S + P + P/2, S + 3*P + P - 1, S + 4*P}
	type win struct {
		key int
		w   int64
	}
	tries, admitted := map[win]int{}, map[win]int{}
	ctx := context.Background()
	for si, at := range steps {
		if si > 0 && at <= steps[si-1] {
			continue // (a 1 ms period: steps that coincide)
		}
		clk.set(time.UnixMicro(at).UTC())
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(si)))
				for range per {
					k := rng.IntN(keys)
					r, err := l.Allow(ctx, 1, lim.For(keyName(k)))
					if err != nil {
						t.Errorf("step %d, key %d: %v", si, k, err)
						return
					}
					wi := win{k, floorDiv(at-offs[k], P)}
					mu.Lock()
					tries[wi]++
					if r.Allowed {
						admitted[wi] += r.Granted
					}
					mu.Unlock()
					if r.Allowed {
						end := (wi.w+1)*P + offs[k]
						if got := r.ResetAfter.Microseconds(); got < end-at || got > end-at+1000 {
							t.Errorf("step %d (at %d), key %d: ResetAfter %dµs, its window ends in %dµs", si, at, k, got, end-at)
						}
					} else if r.RetryAfter <= 0 || r.RetryAfter > period+time.Millisecond {
						t.Errorf("step %d, key %d: denial waits %v", si, k, r.RetryAfter)
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	bad := 0
	for wi, n := range tries {
		if want := min(rate, n); admitted[wi] != want {
			bad++
			if bad <= 10 {
				t.Errorf("key %d, window %d: %d attempts, %d admitted, want %d", wi.key, wi.w, n, admitted[wi], want)
			}
		}
	}
	t.Logf("%d key-windows, %d wrong; %d script calls, %d of several keys", len(tries), bad, cnt.calls.Load(), cnt.wide.Load())
	if cnt.wide.Load() == 0 {
		t.Errorf("no batch of several keys formed")
	}
	fwTTLs(t, rdb, "p", "end")
}

// sameResult compares a batched Result with a lone one: every exported
// field, the waits within tol (a batch measures them from Redis' clock, a
// lone take from its key's TTL, whole ms; on the real Redis, the lone
// twin is decided later).
func sameResult(a, b core.Result, tol time.Duration) bool {
	near := func(x, y time.Duration) bool { return x-y <= tol && y-x <= tol }
	return a.Allowed == b.Allowed && a.Granted == b.Granted && a.Remaining == b.Remaining &&
		near(a.RetryAfter, b.RetryAfter) && near(a.ResetAfter, b.ResetAfter) && a.Delay == b.Delay
}

// TestBatchAttackMixedStatesMatchAlone: one batch over keys in every
// state (fresh; partly spent; full; a debt carried ahead by Settle; a
// debt whose window has come; spent beyond a lowered Rate; spent under a
// longer Period; a stale receipt from the window before) and every verb (Allow(1) on the fast path,
// Allow(2), AllowAtMost, Peek, Refund, a hot key's several requests in
// order), on miniredis mid-window and in a window's last µs, and on the
// real Redis: each request decided exactly as its twin key's, alone; the
// states left the same; no key without a TTL.
func TestBatchAttackMixedStatesMatchAlone(t *testing.T) {
	type at struct {
		name  string
		where string
		into  func(P int64) int64 // µs into the window (mini)
	}
	for _, c := range []at{
		{"mini-mid", "mini", func(P int64) int64 { return P / 2 }},
		{"mini-lastus", "mini", func(P int64) int64 { return P - 1 }},
		{"mini-lastms", "mini", func(P int64) int64 { return P - 700 }},
		{"real", "real", nil},
	} {
		for _, stagger := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stagger=%v", c.name, stagger), func(t *testing.T) {
				mixedStates(t, c.where, c.into, stagger)
			})
		}
	}
}

func mixedStates(t *testing.T, where string, into func(P int64) int64, stagger bool) {
	const rate = 10
	period := time.Hour
	if where == "mini" {
		period = time.Second
	}
	P := period.Microseconds()
	var rdb *redis.Client
	var clk *fwClock
	var now int64
	if where == "mini" {
		var mr *miniredis.Miniredis
		mr, rdb = redistest.Mini(t)
		S := (redistest.Epoch.UnixMicro()/P + 2) * P
		now = S + into(P)
		clk = newFwClock(mr, time.UnixMicro(S-P+P/2).UTC()) // the window before, for the stale receipt
	} else {
		rdb = redistest.Real(t)
	}
	prefix := fwPrefix(t)
	fwCleanup(t, rdb, prefix)
	g := newGate(rdb)
	ctx := context.Background()
	opts := []core.Option{core.WithPrefix(prefix), core.WithTimeout(10 * time.Second)}
	if stagger {
		opts = append(opts, core.WithStaggeredWindows())
	}
	la := fwNew(t, rdb, opts...)
	lb := fwNew(t, rdb, append(opts, core.WithBatching(1))...)
	lim := fwLimit(rate, period)
	suffix := ":fw4"
	if stagger {
		suffix = ":fw4o"
	}
	names := twinNames(prefix, suffix, period, stagger, 32)
	key := func(twin string, i int) string { return names[twin][i] }
	type req struct {
		i    int
		verb string // "allow", "atmost", "peek", "refund"
		n    int
	}
	receipts := map[string]core.Result{}
	for _, twin := range []string{"a", "b"} {
		// The stale receipt: taken in the window before.
		r, err := lb.Allow(ctx, 3, lim.For(key(twin, 13)))
		if err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		receipts[key(twin, 13)] = r
		// Debts carried from the window before into the batch's (on
		// miniredis; the real Redis: into the next hour).
		for _, i := range []int{30, 31} {
			if _, err := lb.Settle(ctx, core.Charge(lim.For(key(twin, i))), 2*rate-2+i-30); err != nil {
				t.Fatal(err)
			}
		}
	}
	if clk != nil {
		clk.set(time.UnixMicro(now).UTC())
	}
	setup := func(twin string, i int) error {
		k := key(twin, i)
		var err error
		var r core.Result
		switch i {
		case 1, 6, 7, 8:
			r, err = lb.Allow(ctx, 3, lim.For(k))
		case 2:
			r, err = lb.Allow(ctx, rate, lim.For(k))
		case 3:
			r, err = lb.Settle(ctx, core.Charge(lim.For(k)), 3*rate+5)
		case 4:
			r, err = lb.Allow(ctx, 15, fwLimit(20, period).For(k))
		case 5:
			r, err = lb.Allow(ctx, 4, fwLimit(rate, 2*period).For(k))
		case 9, 11:
			r, err = lb.Allow(ctx, 4, lim.For(k))
			receipts[k] = r
		case 13:
			r, err = lb.AllowAtMost(ctx, rate, lim.For(k))
		default:
			return nil
		}
		if err == nil && i != 3 && !r.Allowed {
			err = fmt.Errorf("setup of %s: %+v", k, r)
		}
		return err
	}
	for i := range 14 {
		for _, twin := range []string{"a", "b"} {
			if err := setup(twin, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	reqs := []req{
		{0, "allow", 1}, {1, "allow", 1}, {2, "allow", 1}, {3, "allow", 1}, {4, "allow", 1}, {5, "allow", 1},
		{6, "allow", 2}, {7, "atmost", 9}, {8, "peek", 1}, {9, "refund", 0},
		{10, "allow", 1}, {10, "allow", 1}, {10, "allow", 1},
		{11, "allow", 1}, {11, "refund", 0}, {11, "allow", 3},
		{12, "allow", 1}, {13, "refund", 0}, {13, "allow", 1},
	}
	for j := 14; j < 30; j++ {
		reqs = append(reqs, req{j, "allow", 1}) // a run of fresh keys: fw.takes
	}
	reqs = append(reqs, req{30, "allow", 1}, req{31, "allow", 1}, req{31, "allow", 1}, req{31, "peek", 1})
	do := func(l *core.Limiter, twin string, q req) (core.Result, error) {
		k := key(twin, q.i)
		switch q.verb {
		case "atmost":
			return l.AllowAtMost(ctx, q.n, lim.For(k))
		case "peek":
			return l.Peek(ctx, lim.For(k))
		case "refund":
			return core.Result{}, l.Refund(ctx, receipts[k])
		}
		return l.Allow(ctx, q.n, lim.For(k))
	}
	got := make([]core.Result, len(reqs))
	errs := make([]error, len(reqs))
	var callers []func()
	for j, q := range reqs {
		callers = append(callers, func() { got[j], errs[j] = do(la, "a", q) })
	}
	wide := gated(t, g, la, func(i int) { _, _ = la.Allow(ctx, 1, lim.For(fmt.Sprintf("f%d", i))) }, callers...)
	if wide < 10 {
		t.Errorf("the widest batch had %d keys", wide)
	}
	tol := time.Millisecond
	if where == "real" {
		tol = 2 * time.Second
	}
	for j, q := range reqs {
		want, err := do(lb, "b", q)
		if err != nil || errs[j] != nil {
			t.Errorf("request %d %+v: batched error %v, alone %v", j, q, errs[j], err)
			continue
		}
		if !sameResult(got[j], want, tol) {
			t.Errorf("request %d %+v: batched %+v, alone %+v", j, q, got[j], want)
		}
	}
	for i := range 32 {
		ka, kb := prefix+":{"+key("a", i)+"}"+suffix, prefix+":{"+key("b", i)+"}"+suffix
		va, ea := rdb.Get(ctx, ka).Result()
		vb, eb := rdb.Get(ctx, kb).Result()
		if va != vb || (ea == nil) != (eb == nil) {
			t.Errorf("key %d: batched left %q (%v), alone %q (%v)", i, va, ea, vb, eb)
		}
		ta, _ := rdb.PTTL(ctx, ka).Result()
		tb, _ := rdb.PTTL(ctx, kb).Result()
		if d := ta - tb; d > tol || d < -tol {
			t.Errorf("key %d: batched left a TTL of %v, alone %v", i, ta, tb)
		}
	}
	fwTTLs(t, rdb, prefix, "end")
}

// twinNames names n pairs of keys ("a" and "b" twins) whose windows start
// at one offset when staggered (under period, and under twice period, the
// setup's), so that each pair is in the same window.
func twinNames(prefix, suffix string, period time.Duration, stagger bool, n int) map[string][]string {
	names := map[string][]string{}
	for i := range n {
		if !stagger {
			names["a"] = append(names["a"], fmt.Sprintf("a%d", i))
			names["b"] = append(names["b"], fmt.Sprintf("b%d", i))
			continue
		}
		seen := map[int64]string{}
		for j := 0; ; j++ {
			a := fmt.Sprintf("a%d-%d", i, j)
			seen[fwOffset(prefix+":{"+a+"}"+suffix, 2*period)] = a
			b := fmt.Sprintf("b%d-%d", i, j)
			if twin, ok := seen[fwOffset(prefix+":{"+b+"}"+suffix, 2*period)]; ok {
				names["a"] = append(names["a"], twin)
				names["b"] = append(names["b"], b)
				break
			}
		}
	}
	return names
}

// TestBatchAttackRefundBatchedReceipts: receipts of batched one-unit
// takes (packed replies of fw.takes, and of the fallback's) are refunded
// in batches that mix refunds with takes on other keys: in their window
// each gives back its unit, once; held into the next window (miniredis:
// from a window's last µs to the next one's first; the real Redis: 1.5 s
// windows) they give nothing back into the window that never took them.
func TestBatchAttackRefundBatchedReceipts(t *testing.T) {
	for _, where := range []string{"mini", "real"} {
		t.Run(where, func(t *testing.T) {
			const rate, keys = 3, 24
			period := time.Second
			if where == "real" {
				period = 1500 * time.Millisecond
			}
			P := period.Microseconds()
			var rdb *redis.Client
			var clk *fwClock
			if where == "mini" {
				var mr *miniredis.Miniredis
				mr, rdb = redistest.Mini(t)
				clk = newFwClock(mr, time.UnixMicro((redistest.Epoch.UnixMicro()/P+1)*P+P/2).UTC())
			} else {
				rdb = redistest.Real(t)
			}
			prefix := fwPrefix(t)
			fwCleanup(t, rdb, prefix)
			g := newGate(rdb)
			ctx := context.Background()
			l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(10*time.Second))
			lim := fwLimit(rate, period)
			name := func(i int) string { return fmt.Sprintf("k%d", i) }
			fill := func(i int) { _, _ = l.Allow(ctx, 1, lim.For(fmt.Sprintf("f%d", i))) }
			// waitMid (the real Redis) waits for a window's first third.
			waitMid := func() {
				if where == "mini" {
					return
				}
				now, err := redisMicros(ctx, rdb)
				if err != nil {
					t.Fatal(err)
				}
				if off := now % P; off > P/10 {
					time.Sleep(time.Duration(P-off+P/20) * time.Microsecond)
				}
			}
			remaining := func(i int) int {
				p, err := l.Peek(ctx, lim.For(name(i)))
				if err != nil {
					t.Fatal(err)
				}
				return p.Remaining
			}
			// batchTakes takes one unit of each key in one batch, and the
			// keys in others, the extra ones (a take of 2), along.
			batchTakes := func(ids []int, extra []int) []core.Result {
				rs := make([]core.Result, keys)
				var callers []func()
				for _, i := range ids {
					callers = append(callers, func() {
						r, err := l.Allow(ctx, 1, lim.For(name(i)))
						if err != nil {
							t.Error(err)
						}
						rs[i] = r
					})
				}
				for _, i := range extra {
					callers = append(callers, func() { _, _ = l.Allow(ctx, 2, lim.For(fmt.Sprintf("x%d", i))) })
				}
				gated(t, g, l, fill, callers...)
				return rs
			}
			batchRefunds := func(rs []core.Result, ids []int) {
				var callers []func()
				for _, i := range ids {
					callers = append(callers, func() {
						if err := l.Refund(ctx, rs[i]); err != nil {
							t.Error(err)
						}
					})
					callers = append(callers, func() { _, _ = l.Allow(ctx, 1, lim.For(fmt.Sprintf("y%d", i))) })
				}
				gated(t, g, l, fill, callers...)
			}
			all := make([]int, keys)
			for i := range all {
				all[i] = i
			}
			half := all[:keys/2]
			waitMid()
			r1 := batchTakes(all, []int{0, 1})
			for i, r := range r1 {
				if !r.Allowed || r.Granted != 1 || r.Remaining != rate-1 {
					t.Fatalf("key %d: batched take %+v", i, r)
				}
			}
			batchRefunds(r1, half)
			for i := range keys {
				want := rate - 1
				if i < keys/2 {
					want = rate
				}
				if got := remaining(i); got != want {
					t.Errorf("after the batched refunds in the window: key %d has %d left, want %d", i, got, want)
				}
			}
			// Takes in a window's last µs (miniredis) or its middle (real),
			// refunded in the next window.
			if clk != nil {
				clk.set(time.UnixMicro((clk.now.UnixMicro()/P+1)*P - 1).UTC())
			}
			r2 := batchTakes(all, []int{2})
			for i, r := range r2 {
				if !r.Allowed {
					t.Fatalf("key %d: second batched take refused: %+v", i, r)
				}
			}
			if clk != nil {
				clk.add(time.Microsecond)
			} else {
				now, _ := redisMicros(ctx, rdb)
				time.Sleep(time.Duration(P-now%P+P/20) * time.Microsecond)
			}
			t0, _ := redisMicros(ctx, rdb)
			for i := range keys {
				if r, err := l.Allow(ctx, rate, lim.For(name(i))); err != nil || !r.Allowed {
					t.Fatalf("key %d: filling the next window: %+v %v", i, r, err)
				}
			}
			batchRefunds(r2, all)
			left := make([]int, keys)
			for i := range keys {
				left[i] = remaining(i)
			}
			if t1, _ := redisMicros(ctx, rdb); t1/P != t0/P {
				t.Fatalf("the fill, the refunds and the Peeks spanned two windows (%d µs): inconclusive", t1-t0)
			}
			for i, got := range left {
				if got != 0 {
					t.Errorf("a batched receipt of the window before, refunded in a batch, gave back %d units into key %d's full window", got, i)
				}
			}
			fwTTLs(t, rdb, prefix, "end")
		})
	}
}

// TestBatchAttackMixedVerbsAccountingReal: 48 goroutines on one Limiter
// mix Allow(1), Allow(n), AllowAtMost, Peek, Refund of their own receipts
// and Settle below what was taken, on 6 hot and 120 cold keys of an hour's
// window (Rates 1, 7 and 2^33; staggered and not). Within one window the
// books must balance exactly: every key counts what it granted minus what
// its refunds and settles gave back, never below 0 nor above Rate; every
// Peek and Result stays in [0, Rate].
func TestBatchAttackMixedVerbsAccountingReal(t *testing.T) {
	admin := redistest.Real(t)
	for _, stagger := range []bool{false, true} {
		for _, rate := range []int{1, 7, 1 << 33} {
			t.Run(fmt.Sprintf("rate=%d/stagger=%v", rate, stagger), func(t *testing.T) {
				accounting(t, admin, rate, stagger)
			})
		}
	}
}

func accounting(t *testing.T, admin *redis.Client, rate int, stagger bool) {
	rdb := redistest.Real(t)
	cnt := &scriptCounter{}
	rdb.AddHook(cnt)
	prefix := fwPrefix(t)
	fwCleanup(t, admin, prefix)
	opts := []core.Option{core.WithPrefix(prefix), core.WithTimeout(5 * time.Second)}
	if stagger {
		opts = append(opts, core.WithStaggeredWindows())
	}
	l := fwNew(t, rdb, opts...)
	lim := fwLimit(rate, time.Hour)
	if !stagger {
		clearOfPeriodEnd(t, rdb, time.Hour, 10*time.Second)
	}
	const hot, cold = 6, 120
	name := func(k int) string { return fmt.Sprintf("k%d", k) }
	net := make([]atomic.Int64, hot+cold)
	ctx := context.Background()
	stop := time.Now().Add(800 * time.Millisecond)
	var wg sync.WaitGroup
	for w := range 48 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for time.Now().Before(stop) {
				k := hot + rng.IntN(cold)
				if rng.IntN(2) == 0 {
					k = rng.IntN(hot)
				}
				rule := lim.For(name(k))
				var r core.Result
				var err error
				switch c := rng.IntN(10); {
				case c == 0:
					r, err = l.Peek(ctx, rule)
					if err == nil && (r.Remaining < 0 || r.Remaining > rate) {
						t.Errorf("Peek: Remaining %d", r.Remaining)
					}
					continue
				case c == 1:
					r, err = l.AllowAtMost(ctx, 1+rng.IntN(5), rule)
				case c == 2 && rate > 1:
					r, err = l.Allow(ctx, 1+rng.IntN(min(rate, 4)), rule)
				default:
					r, err = l.Allow(ctx, 1, rule)
				}
				if err != nil {
					t.Errorf("key %d: %v", k, err)
					return
				}
				if r.Remaining < 0 || r.Remaining > rate {
					t.Errorf("key %d: Remaining %d", k, r.Remaining)
				}
				if !r.Allowed {
					continue
				}
				net[k].Add(int64(r.Granted))
				switch rng.IntN(4) {
				case 0:
					if err := l.Refund(ctx, r); err != nil {
						t.Errorf("refund: %v", err)
						return
					}
					net[k].Add(-int64(r.Granted))
				case 1:
					used := rng.IntN(r.Granted + 1) // at most what it took: no debt
					if _, err := l.Settle(ctx, r, used); err != nil {
						t.Errorf("settle: %v", err)
						return
					}
					net[k].Add(int64(used - r.Granted))
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checked := 0
	for k := range net {
		p, err := l.Peek(ctx, lim.For(name(k)))
		if err != nil {
			t.Fatal(err)
		}
		if p.Remaining == rate && net[k].Load() != 0 && p.ResetAfter == 0 {
			continue // (its window ended during the run)
		}
		if p.ResetAfter > 0 && (p.ResetAfter < 5*time.Second || p.ResetAfter > time.Hour-5*time.Second) {
			continue // its window ends now, or began during the run: inconclusive
		}
		checked++
		if got := int64(rate - p.Remaining); got != net[k].Load() {
			t.Errorf("key %d: its window counts %d, the callers' books %d (granted - given back)", k, got, net[k].Load())
		}
	}
	t.Logf("%d keys checked; %d script calls, %d of several keys", checked, cnt.calls.Load(), cnt.wide.Load())
	if checked < len(net)*3/4 {
		t.Errorf("only %d of %d keys checked", checked, len(net))
	}
	fwTTLs(t, admin, prefix, "end")
}

// TestBatchAttackLimitChangeUnderLoadReal: 32 goroutines hammer 64 keys
// (batches of many keys) while their Limit changes mid-window: Rate
// lowered or raised, Period lengthened from 100 to 200 ms (switched 20 ms
// into the first 100 ms window of a 200 ms one) or shortened back. Per
// window as each admission's ResetAfter names it, never more than the
// higher Rate; and the window in progress at the switch, which lasts
// until its key expires whatever the Limit becomes, admits (by the calls'
// clock brackets, inside its span) no more than the higher Rate either.
func TestBatchAttackLimitChangeUnderLoadReal(t *testing.T) {
	admin := redistest.Real(t)
	sameClock(t, admin)
	for _, ch := range []struct {
		name     string
		from, to core.Limit
	}{
		{"lowered", fwLimit(20, 200*time.Millisecond), fwLimit(5, 200*time.Millisecond)},
		{"raised", fwLimit(5, 200*time.Millisecond), fwLimit(20, 200*time.Millisecond)},
		{"lengthened", fwLimit(10, 100*time.Millisecond), fwLimit(10, 200*time.Millisecond)},
		{"shortened", fwLimit(10, 200*time.Millisecond), fwLimit(10, 100*time.Millisecond)},
	} {
		t.Run(ch.name, func(t *testing.T) {
			limitChange(t, admin, ch.from, ch.to)
		})
	}
}

func limitChange(t *testing.T, admin *redis.Client, from, to core.Limit) {
	rdb := redistest.Real(t)
	prefix := fwPrefix(t)
	fwCleanup(t, admin, prefix)
	l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
	ctx := context.Background()
	higher := max(from.Rate, to.Rate)
	P1, P2 := from.Period.Microseconds(), to.Period.Microseconds()
	step := min(P1, P2)
	const keys = 64
	var cur atomic.Pointer[core.Limit]
	cur.Store(&from)
	var mu sync.Mutex
	var adms []hamAdm
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var mine []hamAdm
			for {
				select {
				case <-stop:
					mu.Lock()
					adms = append(adms, mine...)
					mu.Unlock()
					return
				default:
				}
				k := rng.IntN(keys)
				lim := *cur.Load()
				t0 := time.Now().UnixMicro()
				r, err := l.Allow(ctx, 1, lim.For(fmt.Sprintf("k%d", k)))
				t1 := time.Now().UnixMicro()
				if err != nil {
					t.Error(err)
					continue
				}
				if r.Allowed {
					mine = append(mine, hamAdm{k, t0, t1, r.ResetAfter.Microseconds(), 1, r.Remaining, true})
				}
			}
		})
	}
	// Switch 20 ms into a window of the longer period (so into the first
	// window of the shorter one), after 300 ms of load.
	time.Sleep(300 * time.Millisecond)
	long := max(P1, P2)
	now := time.Now().UnixMicro()
	sw := (now/long+1)*long + 20000
	time.Sleep(time.Duration(sw-now) * time.Microsecond)
	cur.Store(&to)
	switched := time.Now().UnixMicro()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	// The window in progress at the switch, under the old Period, of the
	// keys that had one (an admission in it before the switch): a key
	// with no state then starts its next window under the new Period,
	// and two of those fit in one old window when the Period shortens.
	s1 := switched / P1 * P1
	e1 := s1 + P1
	byEnd := map[[2]int64]int{}
	inOld := make([]int, keys)
	had := make([]bool, keys)
	for _, a := range adms {
		if end, ok := fwEnd(a.t0, a.t1, a.reset, step); ok {
			byEnd[[2]int64{int64(a.key), end}]++
		}
		if a.t0 >= s1 && a.t1 < e1 {
			inOld[a.key]++
		}
		if a.t0 >= s1 && a.t1 < switched {
			had[a.key] = true
		}
	}
	for k := range inOld {
		if !had[k] {
			inOld[k] = 0
		}
	}
	for w, n := range byEnd {
		if n > higher {
			t.Errorf("key %d, window ending %dµs (by ResetAfter): %d admitted, higher Rate %d", w[0], w[1], n, higher)
		}
	}
	bad := 0
	for k, n := range inOld {
		if n > higher {
			bad++
			if bad <= 5 {
				t.Errorf("key %d: the window in progress at the switch [%d, %d)µs admitted %d (by clock brackets inside it), higher Rate %d", k, s1, e1, n, higher)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d keys in all", bad)
	}
	most := 0
	for _, n := range inOld {
		most = max(most, n)
	}
	t.Logf("%d admissions; switch at %dµs (%dµs late); the most one key admitted in the window of the switch: %d", len(adms), switched, switched-sw, most)
	fwTTLs(t, admin, prefix, "end")
}

// latency is a go-redis hook that delays every script call by d (a
// network's round trip), within its context.
type latency struct{ d atomic.Int64 }

func (h *latency) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *latency) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *latency) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "fcall" || name == "evalsha" || name == "eval" {
			if d := time.Duration(h.d.Load()); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return next(ctx, cmd)
	}
}

// TestBatchAttackPoisonKeySlowNetwork: a 1 ms round trip (a Redis across
// a network), a patient timeout, and 100 callers batched with one
// key that holds "abc". Whatever the batch does about the poisoned key,
// the 99 innocent callers must not fail as if Redis were down
// (ErrUnavailable), and the circuit breaker must stay closed for the
// calls after: one corrupt key must not take the Limiter down.
func TestBatchAttackPoisonKeySlowNetwork(t *testing.T) {
	// (Without the poisoned key, the same batch passes: the control.)
	for _, poisoned := range []bool{false, true} {
		t.Run(fmt.Sprintf("poisoned=%v", poisoned), func(t *testing.T) { slowPoison(t, poisoned) })
	}
}

func slowPoison(t *testing.T, poisoned bool) {
	rdb := redistest.Real(t)
	prefix := fwPrefix(t)
	fwCleanup(t, rdb, prefix)
	g := newGate(rdb)
	lat := &latency{}
	rdb.AddHook(lat)
	ctx := context.Background()
	// A patient timeout: the question is whether a poisoned key fails its
	// batch-mates, not how fast 100 isolated calls of 1 ms run under -race.
	l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(time.Second))
	lim := fwLimit(5, time.Hour)
	if poisoned {
		if err := rdb.Set(ctx, fwStateKey(prefix, "bad"), "abc", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Allow(ctx, 1, lim.For("warm")); err != nil {
		t.Fatal(err)
	}
	lat.d.Store(int64(time.Millisecond))
	const n = 100
	errs := make([]error, n)
	var callers []func()
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		if i == n/2 {
			k = "bad"
		}
		callers = append(callers, func() { _, errs[i] = l.Allow(ctx, 1, lim.For(k)) })
	}
	g.close()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { _, _ = l.Allow(ctx, 1, lim.For(fmt.Sprintf("f%d", i))) })
	}
	waitUntil(t, "4 fillers held", func() bool { return g.held.Load() >= 4 })
	for _, c := range callers {
		wg.Go(c)
	}
	time.Sleep(5 * time.Millisecond)
	m := g.mark()
	g.open()
	wg.Wait()
	unavailable := 0
	var first error
	for i, err := range errs {
		if i != n/2 && errors.Is(err, core.ErrUnavailable) {
			unavailable++
			if first == nil {
				first = err
			}
		}
	}
	t.Logf("%d script calls after the gate opened, the widest of %d keys", len(g.since(m)), g.widest(m))
	if unavailable > 0 {
		t.Errorf("%d of %d innocent callers batched with a poisoned key (%v) failed as Redis unavailable; first: %v", unavailable, n-1, poisoned, first)
	}
	lat.d.Store(0)
	if r, err := l.Allow(ctx, 1, lim.For("after")); err != nil || !r.Allowed {
		t.Errorf("a call after the poisoned batch: %+v, %v (the breaker opened?)", r, err)
	}
	time.Sleep(300 * time.Millisecond) // (the batch's calls that outlive their callers end before the cleanup)
}

// TestBatchAttackContextValuesReal: a caller's context values reach a
// go-redis hook for every kind of context the Limiter may bound: one no
// one can cancel (shared per-ms deadline, boundCtx), WithoutCancel of one
// that had a deadline, a cancellable one (its own timer), one whose
// deadline is shorter than the Limiter's timeout (kept as it is), and
// under WithTimeout(0). The deadline the hook sees is the timeout (or the
// caller's, if sooner), never shorter, at most 1 ms longer (plus
// scheduling); and none under WithTimeout(0) for a Background context.
func TestBatchAttackContextValuesReal(t *testing.T) {
	rdb := redistest.Real(t)
	prefix := fwPrefix(t)
	fwCleanup(t, rdb, prefix)
	g := newGate(rdb)
	const timeout = 300 * time.Millisecond
	l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(timeout), core.WithBatching(1))
	l0 := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(0))
	lim := fwLimit(1000, time.Hour)
	bg := context.Background()
	if _, err := l.Allow(bg, 1, lim.For("warm")); err != nil {
		t.Fatal(err)
	}
	if _, err := l0.Allow(bg, 1, lim.For("warm")); err != nil {
		t.Fatal(err)
	}
	type kase struct {
		name  string
		l     *core.Limiter
		ctx   func(v string) (context.Context, context.CancelFunc)
		until time.Duration // the deadline the hook should see, from the call; 0: none
	}
	cases := []kase{
		{"background-values", l, func(v string) (context.Context, context.CancelFunc) {
			return context.WithValue(bg, gateValKey{}, v), func() {}
		}, timeout},
		{"without-cancel", l, func(v string) (context.Context, context.CancelFunc) {
			c, cancel := context.WithTimeout(context.WithValue(bg, gateValKey{}, v), time.Millisecond)
			return context.WithoutCancel(c), cancel
		}, timeout},
		{"cancellable", l, func(v string) (context.Context, context.CancelFunc) {
			return context.WithCancel(context.WithValue(bg, gateValKey{}, v))
		}, timeout},
		{"shorter-deadline", l, func(v string) (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.WithValue(bg, gateValKey{}, v), 100*time.Millisecond)
		}, 100 * time.Millisecond},
		{"no-timeout", l0, func(v string) (context.Context, context.CancelFunc) {
			return context.WithValue(bg, gateValKey{}, v), func() {}
		}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i := range 50 {
				v := fmt.Sprintf("%s-%d", c.name, i)
				ctx, cancel := c.ctx(v)
				m := g.mark()
				start := time.Now()
				var err error
				switch i % 3 {
				case 0:
					_, err = c.l.Allow(ctx, 1, lim.For(fmt.Sprintf("k%d", i%7)))
				case 1:
					_, err = c.l.Peek(ctx, lim.For("k"))
				default:
					var r core.Result
					if r, err = c.l.Allow(ctx, 2, lim.For("r")); err == nil {
						err = c.l.Refund(ctx, r)
					}
				}
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				calls := g.since(m)
				if len(calls) == 0 {
					t.Fatalf("call %d: no script call seen", i)
				}
				for _, sc := range calls {
					if sc.val != v {
						t.Errorf("call %d: the hook saw value %v, want %q", i, sc.val, v)
					}
					switch {
					case c.until == 0 && sc.hasDL:
						t.Errorf("call %d: a deadline %v under WithTimeout(0)", i, sc.deadline.Sub(start))
					case c.until > 0 && !sc.hasDL:
						t.Errorf("call %d: no deadline", i)
					case c.until > 0:
						lo, hi := start.Add(c.until), sc.at.Add(c.until+time.Millisecond)
						if c.name == "shorter-deadline" {
							lo, hi = start.Add(c.until-5*time.Millisecond), start.Add(c.until)
						}
						if sc.deadline.Before(lo) || sc.deadline.After(hi) {
							t.Errorf("call %d: deadline %v after the call began, want within [%v, %v]", i, sc.deadline.Sub(start), lo.Sub(start), hi.Sub(start))
						}
					}
				}
			}
		})
	}
}

// TestBatchAttackCallerGivesUpReal: callers whose context ends before
// Redis answers (a deadline far shorter than the Limiter's timeout, or a
// cancel mid-call), queued in batches or in a call of their own, against
// a Redis 3 ms away. Each returns about when its context ends, with its
// context's error (not ErrUnavailable: the caller gave up), and is never
// admitted; the breaker stays closed; what Redis counted for the key is
// at least what callers were told was admitted, and no window admits
// more than Rate.
func TestBatchAttackCallerGivesUpReal(t *testing.T) {
	rdb := redistest.Real(t)
	prefix := fwPrefix(t)
	fwCleanup(t, rdb, prefix)
	lat := &latency{}
	rdb.AddHook(lat)
	l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(2*time.Second))
	lim := fwLimit(40, time.Hour)
	clearOfPeriodEnd(t, rdb, time.Hour, 10*time.Second)
	bg := context.Background()
	if _, err := l.Allow(bg, 1, lim.For("warm")); err != nil {
		t.Fatal(err)
	}
	lat.d.Store(int64(3 * time.Millisecond))
	const callers = 400
	var admitted, gaveUp, late atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			key := fmt.Sprintf("k%d", i%8)
			var ctx context.Context
			var cancel context.CancelFunc
			wait := time.Duration(rng.IntN(6000)) * time.Microsecond
			if i%2 == 0 {
				ctx, cancel = context.WithTimeout(bg, wait)
			} else {
				ctx, cancel = context.WithCancel(bg)
				time.AfterFunc(wait, cancel)
			}
			defer cancel()
			start := time.Now()
			r, err := l.Allow(ctx, 1, lim.For(key))
			took := time.Since(start)
			switch {
			case err == nil && r.Allowed:
				admitted.Add(1)
			case err != nil:
				gaveUp.Add(1)
				if r.Allowed {
					t.Errorf("caller %d: an error (%v) with an admission", i, err)
				}
				if errors.Is(err, core.ErrUnavailable) {
					t.Errorf("caller %d gave up after %v: its error matches ErrUnavailable: %v", i, wait, err)
				}
				if ctx.Err() == nil {
					t.Errorf("caller %d: error %v while its context is alive", i, err)
				}
				if took > wait+50*time.Millisecond {
					late.Add(1)
				}
			}
		})
		if i%50 == 49 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	wg.Wait()
	lat.d.Store(0)
	if n := late.Load(); n > 0 {
		t.Errorf("%d callers returned more than 50 ms after their context ended", n)
	}
	counted := 0
	for k := range 8 {
		p, err := l.Peek(bg, lim.For(fmt.Sprintf("k%d", k)))
		if err != nil {
			t.Fatalf("Peek after the callers gave up: %v (the breaker opened?)", err)
		}
		counted += lim.Rate - p.Remaining
	}
	if int64(counted) < admitted.Load() {
		t.Errorf("Redis counts %d units, callers were told %d were admitted", counted, admitted.Load())
	}
	t.Logf("%d admitted, %d gave up, Redis counts %d", admitted.Load(), gaveUp.Load(), counted)
}

// TestBatchAttackClockEdgeReal: 32 goroutines fire at 64 keys (Rate 3,
// 20 ms windows, staggered and not) only around windows' edges: from
// 1.5 ms before an epoch-aligned boundary (staggered: one key's own
// edge, half the calls on that key) to 1 ms after it, for 25 boundaries. Every admission whose clock bracket lies inside one window
// is counted there, and names that window's end in its ResetAfter (up to
// 1 ms later: whole ms); no window admits more than Rate.
func TestBatchAttackClockEdgeReal(t *testing.T) {
	admin := redistest.Real(t)
	sameClock(t, admin)
	for _, stagger := range []bool{false, true} {
		t.Run(fmt.Sprintf("stagger=%v", stagger), func(t *testing.T) {
			rdb := redistest.Real(t)
			cnt := &scriptCounter{}
			rdb.AddHook(cnt)
			prefix := fwPrefix(t)
			fwCleanup(t, admin, prefix)
			opts := []core.Option{core.WithPrefix(prefix), core.WithTimeout(5 * time.Second)}
			suffix := ":fw4"
			if stagger {
				opts = append(opts, core.WithStaggeredWindows())
				suffix = ":fw4o"
			}
			l := fwNew(t, rdb, opts...)
			const rate, keys = 3, 64
			period := 20 * time.Millisecond
			P := period.Microseconds()
			lim := fwLimit(rate, period)
			offs := make([]int64, keys)
			if stagger {
				for k := range offs {
					offs[k] = fwOffset(prefix+":{"+fmt.Sprintf("k%d", k)+"}"+suffix, period)
				}
			}
			ctx := context.Background()
			first := (time.Now().UnixMicro()/P + 2) * P
			var mu sync.Mutex
			var adms []hamAdm
			var wg sync.WaitGroup
			for w := range 32 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 77))
					var mine []hamAdm
					for b := range 25 {
						// The edge: an epoch-aligned boundary; staggered, the
						// next edge of key kb's own windows after it.
						edge, kb := first+int64(b)*P, b%keys
						if stagger {
							edge += ((offs[kb]-edge)%P + P) % P
						}
						if d := edge - 1500 - time.Now().UnixMicro(); d > 0 {
							time.Sleep(time.Duration(d) * time.Microsecond)
						}
						for time.Now().UnixMicro() < edge+1000 {
							k := rng.IntN(keys)
							if stagger && rng.IntN(2) == 0 {
								k = kb
							}
							t0 := time.Now().UnixMicro()
							r, err := l.Allow(ctx, 1, lim.For(fmt.Sprintf("k%d", k)))
							t1 := time.Now().UnixMicro()
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								mine = append(mine, hamAdm{k, t0, t1, r.ResetAfter.Microseconds(), 1, r.Remaining, true})
							}
						}
					}
					mu.Lock()
					adms = append(adms, mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
			type win struct {
				key int
				w   int64
			}
			by := map[win]int{}
			bracketed, wrong := 0, 0
			for _, a := range adms {
				off := offs[a.key]
				i0, i1 := floorDiv(a.t0-off, P), floorDiv(a.t1-off, P)
				if i0 != i1 {
					continue
				}
				bracketed++
				by[win{a.key, i0}]++
				end := (i0+1)*P + off
				// The window the ResetAfter names ends between t0+reset-1ms
				// and t1+reset (Redis keeps a key through its expiry's ms).
				if lo, hi := a.t0+a.reset-1000, a.t1+a.reset; end < lo-1000 || end > hi {
					wrong++
					if wrong <= 5 {
						t.Errorf("key %d: admitted within [%d, %d]µs of window %d (ends %d), but its ResetAfter %dµs names an end in [%d, %d]", a.key, a.t0, a.t1, i0, end, a.reset, lo, hi)
					}
				}
			}
			for w, n := range by {
				if n > rate {
					t.Errorf("key %d, window %d: %d admitted by clock brackets, Rate %d", w.key, w.w, n, rate)
				}
			}
			t.Logf("%d admissions, %d bracketed in one window, %d key-windows; %d script calls, %d of several keys", len(adms), bracketed, len(by), cnt.calls.Load(), cnt.wide.Load())
			if bracketed < len(adms)/3 {
				t.Errorf("only %d of %d admissions bracketed in one window", bracketed, len(adms))
			}
			fwTTLs(t, admin, prefix, "end")
		})
	}
}

// TestBatchAttackProtocolEveryAlgorithm: the batch protocol (a key's
// requests in a row, each code negated when another of the key's follows)
// is every algorithm's, not only the fixed window's. On miniredis at a
// frozen instant, one batch holds, for each Limit, a hot key with five
// requests in order (Allow(1), Allow(2), Peek, AllowAtMost(3) or a second
// Allow, a Refund of an earlier receipt) and cold keys of one Allow(1)
// each; every request is decided as its twin key's alone, and the states
// left are the same.
func TestBatchAttackProtocolEveryAlgorithm(t *testing.T) {
	limits := map[string]core.Limit{
		"token_bucket":   {Algorithm: core.TokenBucket, Rate: 5, Period: time.Minute, Burst: 6},
		"sliding_window": {Algorithm: core.SlidingWindow, Rate: 6, Period: time.Minute},
		"swc":            {Algorithm: core.SlidingWindowCounter, Rate: 6, Period: time.Minute},
		"leaky_bucket":   {Algorithm: core.LeakyBucket, Rate: 6, Period: time.Minute, Burst: 6},
		"concurrency":    {Algorithm: core.Concurrency, Rate: 3, Period: time.Minute},
		"calendar":       {Algorithm: core.FixedWindow, Rate: 6, Calendar: core.Daily},
		"fixed_window":   fwLimit(6, time.Minute),
	}
	for name, lim := range limits {
		t.Run(name, func(t *testing.T) {
			mr, rdb := redistest.Mini(t)
			now := redistest.Epoch.Add(17 * time.Second)
			redistest.SetTime(mr, now)
			g := newGate(rdb)
			ctx := context.Background()
			clock := core.WithClock(func() time.Time { return now })
			la := fwNew(t, rdb, core.WithPrefix("p"), core.WithTimeout(10*time.Second), clock)
			lb := fwNew(t, rdb, core.WithPrefix("p"), core.WithTimeout(10*time.Second), clock, core.WithBatching(1))
			conc := lim.Algorithm == core.Concurrency
			receipts := map[string]core.Result{}
			for _, twin := range []string{"a", "b"} {
				r, err := lb.Allow(ctx, 1, lim.For(twin+"-hot"))
				if err != nil || !r.Allowed {
					t.Fatal(r, err)
				}
				receipts[twin] = r
			}
			type req struct {
				key, verb string
				n         int
			}
			reqs := []req{{"hot", "allow", 1}, {"hot", "allow", 2}, {"hot", "peek", 1}, {"hot", "atmost", 3}, {"hot", "refund", 0}}
			if conc {
				reqs[1].n, reqs[3] = 1, req{"hot", "allow", 1}
			}
			for i := range 6 {
				reqs = append(reqs, req{fmt.Sprintf("c%d", i), "allow", 1})
			}
			do := func(l *core.Limiter, twin string, q req) (core.Result, error) {
				rule := lim.For(twin + "-" + q.key)
				switch q.verb {
				case "peek":
					return l.Peek(ctx, rule)
				case "atmost":
					return l.AllowAtMost(ctx, q.n, rule)
				case "refund":
					return core.Result{}, l.Refund(ctx, receipts[twin])
				}
				return l.Allow(ctx, q.n, rule)
			}
			got := make([]core.Result, len(reqs))
			errs := make([]error, len(reqs))
			var callers []func()
			for j, q := range reqs {
				callers = append(callers, func() { got[j], errs[j] = do(la, "a", q) })
			}
			wide := gated(t, g, la, func(i int) { _, _ = la.Allow(ctx, 1, lim.For(fmt.Sprintf("f%d", i))) }, callers...)
			if wide < 2 {
				t.Errorf("no batch of several keys (widest %d)", wide)
			}
			for j, q := range reqs {
				want, err := do(lb, "b", q)
				if err != nil || errs[j] != nil {
					t.Errorf("request %d %+v: batched %v, alone %v", j, q, errs[j], err)
					continue
				}
				if !sameResult(got[j], want, 0) {
					t.Errorf("request %d %+v: batched %+v, alone %+v", j, q, got[j], want)
				}
			}
			for _, k := range mr.Keys() {
				if !strings.HasPrefix(k, "p:{a-") {
					continue
				}
				twin := "p:{b-" + strings.TrimPrefix(k, "p:{a-")
				if ta, tb := mr.Type(k), mr.Type(twin); ta != tb {
					t.Errorf("%s is a %s, its twin a %s", k, ta, tb)
					continue
				}
				if mr.Type(k) == "string" {
					va, _ := mr.Get(k)
					vb, _ := mr.Get(twin)
					if va != vb || mr.TTL(k) != mr.TTL(twin) {
						t.Errorf("%s = %q (TTL %v), alone %q (TTL %v)", k, va, mr.TTL(k), vb, mr.TTL(twin))
					}
				}
			}
		})
	}
}

// TestBatchAttackPlansChurnReal: 40 goroutines on one Limiter, each call
// under one of 12 Limits (Rates 1 to 12 per hour, plans made and evicted
// from the Limiter's small cache, batch groups made, forgotten and
// reused), each key always under the same Limit. Every Result stays
// within its own Limit (a request decided under another plan would not),
// and each key's window counts exactly what its callers were granted.
func TestBatchAttackPlansChurnReal(t *testing.T) {
	rdb := redistest.Real(t)
	cnt := &scriptCounter{}
	rdb.AddHook(cnt)
	prefix := fwPrefix(t)
	fwCleanup(t, rdb, prefix)
	l := fwNew(t, rdb, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
	ctx := context.Background()
	const limits, keysPer = 12, 6
	lim := func(i int) core.Limit { return fwLimit(i+1, time.Hour) }
	clearOfPeriodEnd(t, rdb, time.Hour, 10*time.Second)
	granted := make([]atomic.Int64, limits*keysPer)
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for w := range 40 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for time.Now().Before(stop) {
				li, ki := rng.IntN(limits), rng.IntN(keysPer)
				k := li*keysPer + ki
				r, err := l.Allow(ctx, 1, lim(li).For(fmt.Sprintf("k%d", k)))
				if err != nil {
					t.Error(err)
					return
				}
				if r.Remaining < 0 || r.Remaining > li+1 || (r.Allowed && r.Remaining > li) {
					t.Errorf("key %d under Rate %d: %+v", k, li+1, r)
				}
				if r.Allowed {
					granted[k].Add(int64(r.Granted))
				}
			}
		})
	}
	wg.Wait()
	for k := range granted {
		li := k / keysPer
		p, err := l.Peek(ctx, lim(li).For(fmt.Sprintf("k%d", k)))
		if err != nil {
			t.Fatal(err)
		}
		if p.ResetAfter > 0 && p.ResetAfter < 5*time.Second {
			continue
		}
		if got := int64(li + 1 - p.Remaining); got != granted[k].Load() {
			t.Errorf("key %d (Rate %d): its window counts %d, %d granted", k, li+1, got, granted[k].Load())
		}
	}
	t.Logf("%d script calls, %d of several keys", cnt.calls.Load(), cnt.wide.Load())
}
