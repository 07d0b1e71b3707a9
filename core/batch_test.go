package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// stallFirst is a redis.Hook that holds the first script call for d, so
// that concurrent callers queue behind it, and counts script calls (not
// the EVALSHA that a NOSCRIPT reply turns into an EVAL).
type stallFirst struct {
	d       time.Duration
	scripts atomic.Int64
	started chan struct{}
	once    sync.Once
}

func (s *stallFirst) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *stallFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if name != "evalsha" && name != "eval" && name != "fcall" {
			return next(ctx, cmd)
		}
		s.once.Do(func() {
			close(s.started)
			time.Sleep(s.d)
		})
		err := next(ctx, cmd)
		if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			s.scripts.Add(1)
		}
		return err
	}
}

func (s *stallFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// batchRun has callers goroutines decide at once, the first alone and the
// others queued behind it, and returns their results in no order.
func batchRun(t *testing.T, l *Limiter, hook *stallFirst, callers int, decide func(i int) (Result, error)) []Result {
	t.Helper()
	results := make([]Result, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	wg.Go(func() { results[0], errs[0] = decide(0) })
	<-hook.started
	for i := 1; i < callers; i++ {
		wg.Go(func() { results[i], errs[i] = decide(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if n := groupsLeft(l); n != 0 {
		t.Errorf("%d batch groups left after every caller returned", n)
	}
	return results
}

// oneInFlight lets l's batcher run one call per group at a time, as the
// tests that count calls behind one stalled call need.
func oneInFlight(l *Limiter) *Limiter {
	l.batch.inflight = 1
	return l
}

// groupsLeft is how many batch groups l keeps, once the goroutine that ran
// the last batch (it answers its callers first) is done.
func groupsLeft(l *Limiter) int {
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		l.batch.mu.Lock()
		n := len(l.batch.groups)
		l.batch.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
	}
}

// TestBatchCoalescesHotKey: concurrent callers of one key queue behind the
// call in flight and go together in the next: two script calls for 64
// decisions, decided exactly as 64 calls at one instant would be.
func TestBatchCoalescesHotKey(t *testing.T) {
	for _, lim := range []Limit{
		PerSecond(20),
		with(PerSecond(20), SlidingWindow),
		with(PerSecond(20), FixedWindow),
		with(PerSecond(20), SlidingWindowCounter),
		with(PerSecond(20), LeakyBucket),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			_, rdb := redistest.Mini(t) // the clock stands still
			hook := &stallFirst{d: 100 * time.Millisecond, started: make(chan struct{})}
			rdb.AddHook(hook)
			l := oneInFlight(opsNew(t, rdb, opsPatient))
			const callers = 64
			results := batchRun(t, l, hook, callers, func(int) (Result, error) {
				return l.Allow(context.Background(), 1, lim.For("hot"))
			})
			if got := hook.scripts.Load(); got != 2 {
				t.Errorf("%d script calls for %d callers, want 2 (one alone, then one batch)", got, callers)
			}
			// At one instant, 20 pass, with Remaining 19 down to 0; the rest
			// are denied, each with the same wait.
			var remaining []int
			denied := 0
			for _, r := range results {
				if r.Allowed {
					remaining = append(remaining, r.Remaining)
				} else {
					denied++
					if r.RetryAfter != results[0].RetryAfter && !results[0].Allowed {
						t.Errorf("denials disagree on RetryAfter: %v and %v", r.RetryAfter, results[0].RetryAfter)
					}
				}
			}
			slices.Sort(remaining)
			want := make([]int, 20)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(remaining, want) {
				t.Errorf("admitted with Remaining %v, want each of 0..19 once", remaining)
			}
			if denied != callers-20 {
				t.Errorf("%d denied, want %d", denied, callers-20)
			}
		})
	}
}

// TestBatchAcrossKeys: on one Redis, concurrent callers of different keys
// share script calls too, and each key is decided on its own.
func TestBatchAcrossKeys(t *testing.T) {
	_, rdb := redistest.Mini(t)
	hook := &stallFirst{d: 100 * time.Millisecond, started: make(chan struct{})}
	rdb.AddHook(hook)
	l := oneInFlight(opsNew(t, rdb, opsPatient))
	const callers = 50
	results := batchRun(t, l, hook, callers, func(i int) (Result, error) {
		return l.Allow(context.Background(), 2, PerMinute(3).For(fmt.Sprintf("user:%d", i)))
	})
	if got := hook.scripts.Load(); got != 2 {
		t.Errorf("%d script calls for %d callers of distinct keys, want 2", got, callers)
	}
	for i, r := range results {
		if !r.Allowed || r.Remaining != 1 || r.Granted != 2 {
			t.Errorf("caller %d: %+v, want its own key's first AllowN(2) of 3", i, r)
		}
	}
}

// TestBatchMixedModes: one batch may hold takes, peeks, partial takes and
// refunds of one key; each is decided in the order it came.
func TestBatchMixedModes(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, opsPatient)
	pl, err := l.plans.of(PerMinute(10))
	if err != nil {
		t.Fatal(err)
	}
	stamp := redistest.Epoch.UnixMicro() // the clock stands still: taken now
	reqs := []modelRequest{{4, modeConsume, 0, 0}, {1, modePeek, 0, 0}, {9, modeAtMost, 0, 0}, {3, modeRefund, stamp, 0}, {5, modeConsume, 0, 0}, {2, modeAtMost, 0, 0}}
	calls := make([]*pending, len(reqs))
	for i, r := range reqs {
		c := &pending{rq: request{key: "k", pl: pl, n: int(r.n), mode: r.mode, taken: r.stamp, pos: [maxRules]int64{r.pos}}}
		c.nkeys = copy(c.keys[:], stateKeys(nil, l.prefix, "k", &algorithms[TokenBucket], 0))
		calls[i] = c
	}
	l.runBatch(pl, calls)
	type got struct{ granted, remaining int }
	want := []got{{4, 6}, {1, 6}, {6, 0}, {0, 3}, {0, 3}, {2, 1}}
	for i, c := range calls {
		if c.err != nil {
			t.Fatalf("request %d: %v", i, c.err)
		}
		if g := (got{c.res[0].Granted, c.res[0].Remaining}); g != want[i] {
			t.Errorf("request %d %+v: granted %d, remaining %d; want %+v", i, reqs[i], g.granted, g.remaining, want[i])
		}
	}
}

// TestBatchCallerGivesUp: a caller queued behind a slow call returns at its
// own deadline, without an answer and without hurting the others.
func TestBatchCallerGivesUp(t *testing.T) {
	_, rdb := redistest.Mini(t)
	hook := &stallFirst{d: 300 * time.Millisecond, started: make(chan struct{})}
	rdb.AddHook(hook)
	l := oneInFlight(opsNew(t, rdb, opsPatient))
	ctx := context.Background()
	var wg sync.WaitGroup
	var first Result
	var firstErr error
	wg.Go(func() { first, firstErr = l.Allow(ctx, 1, PerSecond(5).For("k")) })
	<-hook.started
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.Allow(short, 1, PerSecond(5).For("k"))
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 200*time.Millisecond {
		t.Errorf("queued caller with a 20ms deadline: %v after %v; want its deadline, at once", err, took)
	}
	var later Result
	var laterErr error
	wg.Go(func() { later, laterErr = l.Allow(ctx, 1, PerSecond(5).For("k")) })
	wg.Wait()
	if firstErr != nil || laterErr != nil || !first.Allowed || !later.Allowed {
		t.Errorf("the others: %+v, %v and %+v, %v; want both admitted", first, firstErr, later, laterErr)
	}
	// The caller that gave up was never sent: only two were taken.
	if later.Remaining != 3 {
		t.Errorf("after two admissions Remaining is %d, want 3: the caller that gave up was counted", later.Remaining)
	}
	if n := groupsLeft(l); n != 0 {
		t.Errorf("%d batch groups left", n)
	}
}

// TestBatchFailureReachesEveryCaller: when the batch's call fails, every
// caller in it gets the error, and the breaker hears of it.
func TestBatchFailureReachesEveryCaller(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	hook := &stallFirst{d: 100 * time.Millisecond, started: make(chan struct{})}
	rdb.AddHook(hook)
	l := oneInFlight(opsNew(t, rdb, opsPatient, WithBreaker(0, 0)))
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = l.Allow(ctx, 1, PerSecond(5).For("k")) })
	<-hook.started
	mr.SetError("MISCONF the disk is full")
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() { _, errs[i] = l.Allow(ctx, 1, PerSecond(5).For("k")) })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !redisFault(ctx, err) {
			t.Errorf("caller %d: %v, want the Redis error", i, err)
		}
	}
}

// TestBatchingOff: WithBatching(1) sends every decision in a call of its
// own.
func TestBatchingOff(t *testing.T) {
	_, rdb := redistest.Mini(t)
	hook := &stallFirst{d: 50 * time.Millisecond, started: make(chan struct{})}
	rdb.AddHook(hook)
	l := opsNew(t, rdb, opsPatient, WithBatching(1))
	if l.batch != nil {
		t.Fatal("WithBatching(1) made a batcher")
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { _, _ = l.Allow(context.Background(), 1, PerSecond(50).For("k")) })
	}
	wg.Wait()
	if got := hook.scripts.Load(); got != 10 {
		t.Errorf("%d script calls for 10 decisions without batching, want 10", got)
	}
}

// TestGrouping: a single Redis batches every key, a Cluster the keys of a
// slot, other clients (a Ring) one key.
func TestGrouping(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = single.Close(); _ = cluster.Close(); _ = ring.Close() })
	if g := groupingOf(single); g.of("a") != g.of("b") {
		t.Error("one Redis: keys a and b in different groups")
	}
	g := groupingOf(cluster)
	if g.of("a") == g.of("b") {
		t.Error("a Cluster: keys of different slots in one group")
	}
	if want := keySlotWhole("a"); g.of("a").slot != want {
		t.Errorf("a Cluster: key a in the group of slot %d, want %d", g.of("a").slot, want)
	}
	// "123456789" and its slot-mate share a group: same slot, 0x31C3.
	if g.of("123456789") != (groupID{slot: 0x31C3}) {
		t.Errorf("a Cluster: %+v, want slot 0x31C3", g.of("123456789"))
	}
	// A key's group is the key itself: its calls batch together, never
	// with another key's.
	if g := groupingOf(ring); g.of("a") == g.of("b") || g.of("a") != (groupID{tag: "a"}) {
		t.Errorf("a Ring: groups %+v and %+v, want one group per key", g.of("a"), g.of("b"))
	}
}

// TestBatchOfManyKeysDecidesAsAlone: a batch over many keys, each with its
// own history, decides each key and leaves each state exactly as calls of
// their own at the same instant would. Most keys of such a batch hold one
// CONSUME, which the driver hands to the algorithm's take, as a lone call
// does (the model tests check a lone take against the reference model);
// the test fails if the batch passes a take the wrong state, request or
// reply offset, or takes the shortcut for another mode, on any algorithm,
// for fresh, partly spent, spent, refunded, earlier-window and indebted
// (ahead) states.
func TestBatchOfManyKeysDecidesAsAlone(t *testing.T) {
	limits := map[string]Limit{"calendar": {Algorithm: FixedWindow, Rate: 5, Calendar: Daily}}
	for _, a := range []Algorithm{TokenBucket, SlidingWindow, SlidingWindowCounter, FixedWindow, LeakyBucket} {
		limits[a.String()] = Limit{Algorithm: a, Rate: 5, Period: time.Minute}
	}
	for name, lim := range limits {
		t.Run(name, func(t *testing.T) {
			mr, rdb := redistest.Mini(t)
			now := redistest.Epoch
			l := opsNew(t, rdb, opsPatient, WithBatching(1), WithClock(func() time.Time { return now }))
			ctx := context.Background()
			pl, err := l.plans.of(lim)
			if err != nil {
				t.Fatal(err)
			}
			const keys = 12
			key := func(twin string, i int) string { return fmt.Sprintf("%s%d", twin, i) }
			// Histories: key i takes 1 + i%3 units i%5 times, 20 s apart
			// (so some states are of an earlier window when the batch
			// comes), every fourth key has its last take refunded, and
			// keys 5 and 11 are charged 12 beyond a rate of 5 at the last
			// step (a debt: a window state ahead of the clock).
			for step := range 4 {
				for i := range keys {
					if step >= i%5 {
						continue
					}
					for _, twin := range []string{"a", "b"} {
						r, err := l.Allow(ctx, 1+i%3, lim.For(key(twin, i)))
						if err != nil {
							t.Fatal(err)
						}
						if i%4 == 3 && step == i%5-1 && r.Allowed {
							if err := l.Refund(ctx, r); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				if step == 3 {
					for _, i := range []int{5, 11} {
						for _, twin := range []string{"a", "b"} {
							if _, err := l.Settle(ctx, receiptFor(l, lim.For(key(twin, i)), 0, 0), 12); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				now = now.Add(20 * time.Second)
				redistest.SetTime(mr, now)
			}
			// The batch: one request per key, but keys 5 and 10 hold two,
			// and key 7 a PEEK and key 8 an AllowAtMost.
			var calls []*pending
			var reqs []modelRequest
			var owner []int
			for i := range keys {
				rs := []modelRequest{{int64(1 + (i+1)%3), modeConsume, 0, 0}}
				switch i {
				case 5, 10:
					rs = append(rs, modelRequest{2, modeConsume, 0, 0})
				case 7:
					rs[0].mode = modePeek
				case 8:
					rs[0] = modelRequest{4, modeAtMost, 0, 0}
				}
				for _, r := range rs {
					c := &pending{rq: request{key: key("a", i), pl: pl, n: int(r.n), mode: r.mode}}
					c.nkeys = copy(c.keys[:], stateKeys(nil, l.prefix, key("a", i), lim.row(), 0))
					calls, reqs, owner = append(calls, c), append(reqs, r), append(owner, i)
				}
			}
			l.runBatch(pl, calls)
			for j, c := range calls {
				r, i := reqs[j], owner[j]
				var want Result
				switch r.mode {
				case modeConsume:
					want, err = l.Allow(ctx, int(r.n), lim.For(key("b", i)))
				case modePeek:
					want, err = l.Peek(ctx, lim.For(key("b", i)))
				case modeAtMost:
					want, err = l.AllowAtMost(ctx, int(r.n), lim.For(key("b", i)))
				}
				if err != nil || c.err != nil {
					t.Fatalf("key %d: alone: %v; batched: %v", i, err, c.err)
				}
				got := c.res[0]
				got.stamp, want.stamp, want.owner, want.rule = 0, 0, 0, Rule{}
				if r.mode == modePeek {
					got.Granted, want.Granted = 0, 0
				}
				if !opsSame(got, want) {
					t.Errorf("key %d, request %+v: batched %+v, alone %+v", i, r, got, want)
				}
			}
			for i := range keys {
				a := stateKeys(nil, l.prefix, key("a", i), lim.row(), 0)
				b := stateKeys(nil, l.prefix, key("b", i), lim.row(), 0)
				for k := range a {
					if ga, gb := stateOf(t, mr, a[k]), stateOf(t, mr, b[k]); ga != gb {
						t.Errorf("key %d: batched left %s = %s, alone %s = %s", i, a[k], ga, b[k], gb)
					}
				}
			}
		})
	}
}

// stateOf is a key's type, value and TTL, as one string to compare.
func stateOf(t *testing.T, mr *miniredis.Miniredis, key string) string {
	t.Helper()
	typ := mr.Type(key)
	var v any
	var err error
	switch typ {
	case "string":
		v, err = mr.Get(key)
	case "zset":
		v, err = mr.SortedSet(key)
	}
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return fmt.Sprintf("%s %v ttl %v", typ, v, mr.TTL(key))
}

// TestPlansConverge backs plans.keep: concurrent first decisions under
// one Limit (or one set of Rules) all get the same plan, so a batch does
// not split them into groups of their own. (With a plan stored by each,
// the last one winning, fillers and callers landed in different groups
// and a caller made a call of its own past the group's four in flight.)
func TestPlansConverge(t *testing.T) {
	lim := Limit{Algorithm: FixedWindow, Rate: 6, Period: time.Minute}
	limits := []Limit{lim, {Algorithm: TokenBucket, Rate: 9, Period: time.Hour, Burst: 9}}
	idx := []int{0, 1}
	for round := range 200 {
		var c plans
		const callers = 8
		got := make([][2]*plan, callers)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range callers {
			wg.Go(func() {
				start.Wait()
				a, err := c.of(lim)
				if err != nil {
					t.Error(err)
				}
				b, err := c.ofRules(limits, idx, idx)
				if err != nil {
					t.Error(err)
				}
				got[i] = [2]*plan{a, b}
			})
		}
		start.Done()
		wg.Wait()
		for i := range got {
			if got[i] != got[0] {
				t.Fatalf("round %d: caller %d got plans %p, caller 0 %p", round, i, got[i], got[0])
			}
		}
	}
}

// callGate holds every script call while on: it reports the call on entered
// and lets it run when release is signalled.
type callGate struct {
	on      atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *callGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *callGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "evalsha", "eval", "fcall":
			if g.on.Load() {
				g.entered <- struct{}{}
				<-g.release
			}
		}
		return next(ctx, cmd)
	}
}
func (g *callGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBatchLeftCallerGivenBack backs "a caller is never told it was not
// admitted for units Redis took" (docs/operations.md): a caller whose
// context ends after its request joined a batch's call gets its context's
// error, and the units the call took for it are given back, under every
// rate algorithm and a permit. Before, they stayed taken (Remaining 8
// after one admission of 10, instead of 9).
func TestBatchLeftCallerGivenBack(t *testing.T) {
	for _, lim := range []Limit{PerHour(10), with(PerHour(10), LeakyBucket), with(PerHour(10), FixedWindow),
		with(PerHour(10), SlidingWindow), with(PerHour(10), SlidingWindowCounter), InFlight(10)} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			g := &callGate{entered: make(chan struct{}), release: make(chan struct{})}
			rdb.AddHook(g)
			l := oneInFlight(opsNew(t, rdb, opsPatient))
			bg := context.Background()
			rule := lim.For("k")
			if _, err := l.Peek(bg, rule); err != nil { // loads the scripts
				t.Fatal(err)
			}
			g.on.Store(true)
			first := make(chan error, 1)
			go func() { _, err := l.Allow(bg, 1, rule); first <- err }()
			<-g.entered // the first caller's call, held
			ctx, cancel := context.WithCancel(bg)
			left := make(chan error, 1)
			go func() {
				r, err := l.Allow(ctx, 1, rule)
				if err == nil && r.Allowed {
					err = errors.New("admitted")
				}
				left <- err
			}()
			waitFor(t, "the second caller queued", func() bool { return queuedCalls(l) == 1 })
			g.release <- struct{}{} // the first call runs; the batch takes the second
			<-g.entered
			cancel()
			if err := <-left; !errors.Is(err, context.Canceled) {
				t.Fatalf("the caller that left: %v, want context.Canceled", err)
			}
			g.on.Store(false)
			g.release <- struct{}{} // the batch's call runs, and takes its unit
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the left caller's unit given back", func() bool {
				r, err := l.Peek(bg, rule)
				return err == nil && r.Remaining == 9
			})
		})
	}
}

// queuedCalls is how many decisions wait in l's batch queues.
func queuedCalls(l *Limiter) int {
	l.batch.mu.Lock()
	defer l.batch.mu.Unlock()
	n := 0
	for _, g := range l.batch.groups {
		n += len(g.queue)
	}
	return n
}

// waitFor waits up to 5 s for cond, and fails the test naming what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
	}
}
