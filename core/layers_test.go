package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// Helpers shared by the operations tests (layers, overrides, wait, deny
// cache, policy). Their names start with "ops" so they never meet the
// helpers of the other test files of this package.

// opsPrefix is a key prefix unique to the test, so tests that share a real
// Redis never touch each other's keys.
func opsPrefix(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("rltest:%s:%d", t.Name(), time.Now().UnixNano())
}

// opsCounter is a redis.Hook that counts the commands a client sends
// (except those that open a connection, and the Limiter's INFO checks of
// Redis' health), and the requests that scripts admitted, peeks aside.
type opsCounter struct {
	cmds     atomic.Int64
	admitted atomic.Int64
}

func (c *opsCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *opsCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		err := next(ctx, cmd)
		c.sawReply(cmd)
		return err
	}
}

// count counts cmd unless it is the health check's, a new connection's
// (which go-redis sends as a pipeline when it dials) or the library
// loader's, which runs in the background and may land in any window.
func (c *opsCounter) count(cmd redis.Cmder) {
	switch cmd.Name() {
	case "info", "hello", "client", "auth", "select", "ping", "function":
	default:
		c.cmds.Add(1)
	}
}

func (c *opsCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.sawReply(cmd)
		}
		return err
	}
}

// sawReply counts the requests a call's reply admitted (every layer
// granted), peeks, refunds and charges aside. It reads the modes from the
// call's ARGV, as the driver does (scripts/driver.lua).
func (c *opsCounter) sawReply(cmd redis.Cmder) {
	if name := cmd.Name(); name != "evalsha" && name != "eval" && name != "fcall" {
		return
	}
	rc, ok := cmd.(*redis.Cmd)
	if !ok {
		return
	}
	vals, ok := rc.Val().([]any)
	if !ok {
		return
	}
	args := cmd.Args()
	num := func(v any) int { n, _ := strconv.Atoi(fmt.Sprint(v)); return n }
	argv := args[3+num(args[2]):]
	if isOne(fmt.Sprint(args[1])) {
		// one's ARGV: the Limit's spec, then the request.
		mode := num(argv[1]) % 8
		if g, _ := vals[1].(int64); g > 0 && (mode == modeConsume || mode == modeAtMost) {
			c.admitted.Add(1)
		}
		return
	}
	// run's ARGV: L, a spec per layer ("<script> <param> ..."), then the
	// requests.
	nl, a, ids := num(argv[0]), 1, false
	for range nl {
		script, _, _ := strings.Cut(fmt.Sprint(argv[a]), " ")
		ids = ids || num(script) == algorithms[Concurrency].script
		a++
	}
	var modes []int
	for a < len(argv) {
		code := num(argv[a])
		a++
		mode := abs(code) % 8
		if mode == modeRefund || mode == modeRenew {
			a++
		}
		if ids {
			a++
		}
		modes = append(modes, mode)
	}
	at := 1
	for _, mode := range modes {
		if at+2 > len(vals) {
			break
		}
		if x, _ := vals[at].(int64); nl == 1 && abs(x) >= packedMin {
			// A fixed window's packed take: negative when refused.
			if x > 0 {
				c.admitted.Add(1)
			}
			at += 2
			continue
		}
		if at+5*nl > len(vals) {
			break
		}
		all := true
		for j := range nl {
			g, _ := vals[at+j*5].(int64)
			all = all && g > 0
		}
		at += 5 * nl
		if all && (mode == modeConsume || mode == modeAtMost) {
			c.admitted.Add(1)
		}
	}
}

func abs[T int | int64](x T) T { return max(x, -x) }

// isOne reports a call of the one-request form: the library's function,
// or one of its scripts (by SHA or source).
func isOne(fn string) bool {
	if fn == libraryOne {
		return true
	}
	for _, s := range evalOne {
		if s != nil && (fn == s.Hash() || strings.HasSuffix(fn, "return one(KEYS, ARGV)\n")) {
			return true
		}
	}
	return false
}

// opsWallClock is a redis.Hook that moves a miniredis' clock to follow the
// wall clock before every command, for the tests of code that sleeps on the
// wall clock (Wait, the deny cache's expiry) and so cannot be driven by
// SetTime alone.
type opsWallClock struct {
	mr    *miniredis.Miniredis
	start time.Time
}

func (w *opsWallClock) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *opsWallClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		redistest.SetTime(w.mr, redistest.Epoch.Add(time.Since(w.start)))
		return next(ctx, cmd)
	}
}

func (w *opsWallClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		redistest.SetTime(w.mr, redistest.Epoch.Add(time.Since(w.start)))
		return next(ctx, cmds)
	}
}

// opsBackend is a Redis whose clock moves with the wall clock: a miniredis
// driven by opsWallClock, or the real Redis of REDIS_URL.
type opsBackend struct {
	name string
	open func(t *testing.T) *redis.Client
}

func opsBackends() []opsBackend {
	return []opsBackend{
		{"miniredis", func(t *testing.T) *redis.Client {
			t.Helper()
			mr, rdb := redistest.Mini(t)
			rdb.AddHook(&opsWallClock{mr: mr, start: time.Now()})
			return rdb
		}},
		{"redis", func(t *testing.T) *redis.Client {
			t.Helper()
			return redistest.Real(t)
		}},
	}
}

// opsPeekLayer reports what Rule i of opsRules(key, limits) would decide
// now for a cost of 1, without consuming: layer 0 through the Limiter's
// own Peek (it is the same state as Allow), layer i > 0 by running its
// algorithm's script in peek mode on the layer's key.
func opsPeekLayer(t *testing.T, l *Limiter, key string, limits []Limit, i int) Result {
	t.Helper()
	ctx := context.Background()
	if i == 0 {
		r, err := l.Peek(ctx, limits[0].For(key))
		if err != nil {
			t.Fatalf("Peek(layer 0): %v", err)
		}
		return r
	}
	pl, err := l.plans.ofRules(limits[i:i+1], []int{i}, []int{i})
	if err != nil {
		t.Fatalf("layer %d: %v", i, err)
	}
	var out [1]Result
	if err := l.decide(ctx, &request{key: key, pl: pl, n: 1, mode: modePeek}, out[:]); err != nil {
		t.Fatalf("peek layer %d: %v", i, err)
	}
	out[0].Granted = 0
	return out[0]
}

// opsNew is New with a logger that stays quiet, failing t on an error.
func opsNew(t testing.TB, rdb redis.UniversalClient, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(rdb, append([]Option{WithLogger(nil)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// opsRules is the Rules of key under each of limits: the layers of one
// key.
func opsRules(key string, limits []Limit) []Rule {
	rules := make([]Rule, len(limits))
	for i, lim := range limits {
		rules[i] = lim.For(key)
	}
	return rules
}

// opsSame reports whether a and b are the same Result, unexported fields
// and per-Rule Results included: what == said before Result held a slice.
func opsSame(a, b Result) bool { return reflect.DeepEqual(undated(a), undated(b)) }

// undated is r without its instants (Result.At), which a decision of a
// FixedWindow over a Period takes from the process' clock.
func undated(r Result) Result {
	r.At = time.Time{}
	if r.Rules != nil {
		r.Rules = slices.Clone(r.Rules)
		for i := range r.Rules {
			r.Rules[i] = undated(r.Rules[i])
		}
	}
	return r
}

// opsAdmitted reports whether a decision under several Rules admitted:
// every Rule granted.
func opsAdmitted(rs []Result) bool {
	for _, r := range rs {
		if r.Granted == 0 {
			return false
		}
	}
	return len(rs) > 0
}

// opsRetry is the longest RetryAfter of the layers: when the request passes.
func opsRetry(rs []Result) time.Duration {
	var d time.Duration
	for _, r := range rs {
		d = max(d, r.RetryAfter)
	}
	return d
}

func opsAllowed(rs []Result) []bool {
	out := make([]bool, len(rs))
	for i, r := range rs {
		out[i] = r.Allowed
	}
	return out
}

func opsEqualBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var opsAlgorithms = []Algorithm{TokenBucket, SlidingWindow, SlidingWindowCounter, FixedWindow, LeakyBucket}

// TestAllowLayersAllOrNothing decides two layers of every pair of
// algorithms on a frozen miniredis clock: the layer of rate 2 denies the
// third request, and that denial consumes from neither layer.
func TestAllowLayersAllOrNothing(t *testing.T) {
	ctx := context.Background()
	for _, a0 := range opsAlgorithms {
		for _, a1 := range opsAlgorithms {
			for _, denier := range []int{0, 1} {
				name := fmt.Sprintf("%s+%s/layer%d_denies", a0, a1, denier)
				t.Run(name, func(t *testing.T) {
					_, rdb := redistest.Mini(t)
					l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
					limits := []Limit{
						{Algorithm: a0, Rate: 3, Period: time.Hour},
						{Algorithm: a1, Rate: 3, Period: time.Minute},
					}
					limits[denier].Rate = 2
					const key = "user:1"
					for i := range 2 {
						res, err := l.Allow(ctx, 1, opsRules(key, limits)...)
						if err != nil {
							t.Fatalf("request %d: %v", i+1, err)
						}
						if got, want := opsAllowed(res.Rules), []bool{true, true}; !res.Allowed || !opsEqualBools(got, want) {
							t.Fatalf("request %d: layers allowed %v, want %v", i+1, got, want)
						}
					}
					before := []Result{opsPeekLayer(t, l, key, limits, 0), opsPeekLayer(t, l, key, limits, 1)}
					for i := range 3 {
						res, err := l.Allow(ctx, 1, opsRules(key, limits)...)
						if err != nil {
							t.Fatalf("denied request %d: %v", i+1, err)
						}
						rs := res.Rules
						want := []bool{true, true}
						want[denier] = false
						if got := opsAllowed(rs); !opsEqualBools(got, want) {
							t.Fatalf("denied request %d: layers allowed %v, want %v", i+1, got, want)
						}
						if opsAdmitted(rs) || opsRetry(rs) <= 0 || res.Allowed || res.Granted != 0 || res.RetryAfter != opsRetry(rs) {
							t.Errorf("result %+v, want a denial with the longest RetryAfter > 0", res)
						}
					}
					for i := range limits {
						got := opsPeekLayer(t, l, key, limits, i)
						if !opsSame(got, before[i]) {
							t.Errorf("layer %d after denials: peek = %+v, want unchanged %+v", i, got, before[i])
						}
						// Both layers admitted exactly two: rate 3 leaves 1, rate 2 leaves 0.
						if want := limits[i].Rate - 2; got.Remaining != want {
							t.Errorf("layer %d: Remaining %d, want %d (two admitted, none of the denied consumed)", i, got.Remaining, want)
						}
					}
				})
			}
		}
	}
}

// TestAllowLayersLayerZeroIsAllowState: layer 0 is the state a plain Allow
// of the same key and Limit uses, in both directions.
func TestAllowLayersLayerZeroIsAllowState(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
	limits := []Limit{PerHour(5), {Algorithm: SlidingWindow, Rate: 100, Period: time.Hour}}
	if _, err := l.Allow(ctx, 2, opsRules("k", limits)...); err != nil {
		t.Fatal(err)
	}
	r, err := l.Allow(ctx, 1, limits[0].For("k"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Remaining, 2; got != want {
		t.Errorf("plain Allow after Allow(n=2) of two Rules: Remaining %d, want %d", got, want)
	}
	res, err := l.Allow(ctx, 1, opsRules("k", limits)...)
	if err != nil {
		t.Fatal(err)
	}
	rs := res.Rules
	if got, want := rs[0].Remaining, 1; got != want {
		t.Errorf("layer 0 after plain Allow: Remaining %d, want %d", got, want)
	}
	if got, want := rs[1].Remaining, 97; got != want {
		t.Errorf("layer 1 (not touched by plain Allow): Remaining %d, want %d", got, want)
	}
}

// TestAllowLayersCostAcrossLayers: a cost n is taken from every layer, and
// a cost one layer cannot cover takes nothing from the others.
func TestAllowLayersCostAcrossLayers(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
	limits := []Limit{
		{Algorithm: FixedWindow, Rate: 10, Period: time.Minute},
		{Algorithm: TokenBucket, Rate: 6, Period: time.Hour},
		{Algorithm: SlidingWindowCounter, Rate: 8, Period: time.Hour},
	}
	steps := []struct {
		n         int
		want      []bool
		remaining []int // each layer's Remaining in the reply
	}{
		{n: 4, want: []bool{true, true, true}, remaining: []int{6, 2, 4}},
		{n: 3, want: []bool{true, false, true}, remaining: []int{6, 2, 4}}, // peeks: nothing taken
		{n: 2, want: []bool{true, true, true}, remaining: []int{4, 0, 2}},
		{n: 1, want: []bool{true, false, true}, remaining: []int{4, 0, 2}},
	}
	for i, s := range steps {
		res, err := l.Allow(ctx, s.n, opsRules("k", limits)...)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		rs := res.Rules
		if got := opsAllowed(rs); !opsEqualBools(got, s.want) {
			t.Errorf("step %d (n=%d): allowed %v, want %v", i, s.n, got, s.want)
		}
		for j, r := range rs {
			if r.Remaining != s.remaining[j] {
				t.Errorf("step %d (n=%d): layer %d Remaining %d, want %d", i, s.n, j, r.Remaining, s.remaining[j])
			}
		}
	}
}

func TestAllowLayersInvalid(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
	ok := PerSecond(10)
	tests := []struct {
		name    string
		limits  []Limit
		n       int
		wantErr error
		wantMsg string // a substring of the error, naming the Rule
	}{
		{"no limits", nil, 1, ErrInvalidLimit, "1 to 8"},
		{"empty limits", []Limit{}, 1, ErrInvalidLimit, "1 to 8"},
		{"nine limits", []Limit{ok, ok, ok, ok, ok, ok, ok, ok, ok}, 1, ErrInvalidLimit, "1 to 8"},
		{"bad layer 0", []Limit{{Rate: 1}, ok}, 1, ErrInvalidLimit, "rule 0"},
		{"bad layer 1", []Limit{ok, {Rate: 0, Period: time.Second}}, 1, ErrInvalidLimit, "rule 1"},
		{"unknown algorithm in layer 2", []Limit{ok, ok, {Algorithm: 42, Rate: 1, Period: time.Second}}, 1, ErrInvalidLimit, "rule 2"},
		{"n above layer 1's capacity", []Limit{ok, PerHour(3)}, 4, ErrInvalidCost, "rule 1"},
		{"n above layer 0's capacity", []Limit{PerSecond(2), PerHour(30)}, 3, ErrInvalidCost, "rule 0"},
		{"n = 0", []Limit{ok, ok}, 0, ErrInvalidCost, "rule 0"},
		{"n < 0", []Limit{ok}, -1, ErrInvalidCost, "capacity"}, // one Rule: a plain Allow
		{"n < 0 under two Rules", []Limit{ok, ok}, -1, ErrInvalidCost, "rule 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := l.Allow(ctx, tt.n, opsRules("k", tt.limits)...)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to mention %q", err, tt.wantMsg)
			}
			if !opsSame(res, Result{}) {
				t.Errorf("result = %+v, want zero", res)
			}
		})
	}
	if err := l.Refund(ctx, Result{Granted: 1, Rules: []Result{{Granted: 1}}}); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("a refund with 1 Result for 2 Rules: err = %v, want ErrInvalidCost", err)
	}
	if err := l.Refund(ctx, Result{Granted: 1}); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("a refund of one Rule's receipt under 2 Rules: err = %v, want ErrInvalidCost", err)
	}
	if _, err := l.Allow(ctx, 1, ok.For(""), ok.For("k")); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("empty key: err = %v, want ErrEmptyKey", err)
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("invalid calls wrote keys %v", keys)
	}
}

// TestAllowLayersTTL: every layer's key gets a TTL, no longer than the
// time its layer needs to be whole again.
func TestAllowLayersTTL(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
	limits := []Limit{
		{Algorithm: TokenBucket, Rate: 10, Period: time.Second},
		{Algorithm: SlidingWindow, Rate: 100, Period: time.Minute},
		{Algorithm: SlidingWindowCounter, Rate: 1000, Period: time.Hour},
		{Algorithm: FixedWindow, Rate: 50, Period: 10 * time.Minute},
		{Algorithm: LeakyBucket, Rate: 5, Period: time.Second, Burst: 20},
	}
	if _, err := l.Allow(ctx, 2, opsRules("k", limits)...); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, limit := range limits {
		want = stateKeys(want, l.prefix, "k", &algorithms[limit.Algorithm], i)
	}
	if keys := mr.Keys(); len(keys) != len(want) {
		t.Fatalf("keys %v: want each layer's %v", keys, want)
	}
	for i, limit := range limits {
		for _, k := range stateKeys(nil, l.prefix, "k", &algorithms[limit.Algorithm], i) {
			ttl := mr.TTL(k)
			// The window algorithms keep state up to two periods.
			if ttl <= 0 || ttl > 2*limit.Period {
				t.Errorf("layer %d (%s): TTL %v, want 0 < TTL <= %v", i, k, ttl, 2*limit.Period)
			}
		}
	}
}

// TestAllowLayersLimitChangeToSlowerKeepsState: as with one Limit (see
// TestLimitChangeToSlowerKeepsState), a layer whose Limit became slower
// keeps its state through denials, instead of expiring on its old TTL and
// handing out a fresh quota.
func TestAllowLayersLimitChangeToSlowerKeepsState(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	redistest.SetTime(mr, redistest.Epoch)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient)
	hourly := Limit{Algorithm: SlidingWindow, Rate: 100, Period: time.Hour}
	before := []Limit{PerSecond(5), hourly}
	after := []Limit{{Rate: 5, Period: 10 * time.Second}, hourly}
	if res, err := l.Allow(ctx, 5, opsRules("k", before)...); err != nil || !opsAdmitted(res.Rules) {
		t.Fatalf("Allow(5) = %+v, %v", res, err)
	}
	res, err := l.Allow(ctx, 1, opsRules("k", after)...)
	if err != nil || opsAdmitted(res.Rules) {
		t.Fatalf("Allow(1) under the slower first layer = %+v, %v; want denied", res, err)
	}
	wait := opsRetry(res.Rules) - time.Millisecond
	if old := time.Second; wait <= old {
		t.Fatalf("RetryAfter %v is within the old TTL %v: the case proves nothing", wait, old)
	}
	mr.SetTime(redistest.Epoch.Add(wait))
	mr.FastForward(wait)
	if res, err := l.Allow(ctx, 1, opsRules("k", after)...); err != nil || opsAdmitted(res.Rules) {
		t.Errorf("%v later, before RetryAfter: %+v, %v; want denied, not a fresh quota", wait, res, err)
	}
}

// TestAllowLayersConcurrentNeverOverAdmits hammers two layers (20 per 2s
// token bucket, 30 per hour sliding window) from 64 goroutines over 4
// clients on a real Redis for about 1.5s, and checks that neither layer
// admitted more than its bound at any time.
func TestAllowLayersConcurrentNeverOverAdmits(t *testing.T) {
	const (
		clients    = 4
		goroutines = 64
		run        = 1500 * time.Millisecond
		key        = "tenant:hot"
	)
	limits := []Limit{
		{Algorithm: TokenBucket, Rate: 20, Period: 2 * time.Second},
		{Algorithm: SlidingWindow, Rate: 30, Period: time.Hour},
	}
	prefix := opsPrefix(t)
	limiters := make([]*Limiter, clients)
	var rdb *redis.Client
	for i := range limiters {
		rdb = redistest.Real(t)
		limiters[i] = opsNew(t, rdb, WithPrefix(prefix), opsPatient, WithTimeout(5*time.Second), WithBreaker(0, 0))
	}
	keys := append(stateKeys(nil, limiters[0].prefix, key, limits[0].row(), 0), stateKeys(nil, limiters[0].prefix, key, limits[1].row(), 1)...)
	t.Cleanup(func() { _ = rdb.Del(context.Background(), keys...).Err() })

	ctx := context.Background()
	var (
		mu        sync.Mutex
		admits    []time.Duration // since start, when the admission was seen
		denied    [2]int          // denials per layer
		calls     int
		firstErr  error
		wg        sync.WaitGroup
		startGate = make(chan struct{})
	)
	var start time.Time
	for g := range goroutines {
		wg.Add(1)
		go func(l *Limiter) {
			defer wg.Done()
			<-startGate
			for time.Since(start) < run {
				res, err := l.Allow(ctx, 1, opsRules(key, limits)...)
				rs := res.Rules
				seen := time.Since(start)
				mu.Lock()
				calls++
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				case opsAdmitted(rs):
					admits = append(admits, seen)
				default:
					for i, r := range rs {
						if !r.Allowed {
							denied[i]++
						}
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}(limiters[g%clients])
	}
	start = time.Now()
	close(startGate)
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		t.Fatalf("Allow: %v", firstErr)
	}

	// Token bucket: at most 20 + 10 per second since start, at every
	// moment. An admission seen at local time s happened in Redis no later,
	// and Redis' clock started after start. (The admissions are counted in
	// the order they were seen: a goroutine may be descheduled between
	// seeing its admission and recording it, as CI once saw.)
	slices.Sort(admits)
	for i, s := range admits {
		bound := 20 + int(10*s.Seconds())
		if i+1 > bound {
			t.Errorf("token bucket layer over-admitted: %d admissions seen by %v, bound %d", i+1, s, bound)
			break
		}
	}
	// Sliding window: at most 30 in the hour.
	if got := len(admits); got > 30 {
		t.Errorf("sliding window layer over-admitted: %d admissions, bound 30", got)
	}
	// Every admission, and nothing else, is in the sliding window's log
	// (requests of one instant share an entry, weighted by its units):
	// requests the token bucket denied took nothing from it.
	entries, err := rdb.ZRange(ctx, keys[1], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	units := 0
	for _, e := range entries {
		var s, w int
		if _, err := fmt.Sscanf(e, "%d %d", &s, &w); err != nil {
			t.Fatalf("log entry %q: %v", e, err)
		}
		units += w
	}
	if got, want := units, len(admits); got != want {
		t.Errorf("sliding window log holds %d units in %d entries, want %d (the admissions)", got, len(entries), want)
	}
	for _, k := range keys {
		if ttl, err := rdb.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
			t.Errorf("%s: PTTL %v, %v; want a TTL", k, ttl, err)
		}
	}
	// The run must have pushed both layers to deny, or it proved little.
	if denied[0] == 0 || denied[1] == 0 {
		t.Errorf("denials per layer %v: want both layers to have denied", denied)
	}
	t.Logf("%d calls in %v: %d admitted (token bucket bound %d, window bound 30), denials by layer %v",
		calls, elapsed.Round(time.Millisecond), len(admits), 20+int(10*elapsed.Seconds()), denied)
}

// opsPatient is the timeout of limiters in tests that check decisions, not
// latency: CI runs every package's tests at once on two cores, where a
// healthy Redis can take longer than the 100 ms default to answer.
var opsPatient = WithTimeout(5 * time.Second)

// TestLayersPermitWhateverTheCost: under layers, a Concurrency layer holds
// one permit per request whatever the cost the rate layers take (the
// concurrency script's "one permit whatever its cost"), in either order,
// and Refund of the merged Result gives back the permit and the units.
func TestLayersPermitWhateverTheCost(t *testing.T) {
	ctx := context.Background()
	_, _, l := miniLimiter(t)
	rate := Limit{Rate: 2000, Period: time.Minute}
	for _, order := range [][]Limit{{rate, InFlight(1)}, {InFlight(1), rate}} {
		key := fmt.Sprintf("k%d", order[0].Algorithm)
		ri, pi := 0, 1
		if order[0].Algorithm == Concurrency {
			ri, pi = 1, 0
		}
		rules := opsRules(key, order)
		taken, err := l.Allow(ctx, 500, rules...)
		first := taken.Rules
		if err != nil || !first[ri].Allowed || first[ri].Granted != 500 || first[ri].Remaining != 1500 || first[pi].Granted != 1 || first[pi].Remaining != 0 {
			t.Fatalf("%v: Allow(500) = %+v, %v; want 500 units and the one permit taken", order, taken, err)
		}
		res, err := l.Allow(ctx, 500, rules...)
		second := res.Rules
		if err != nil || !second[ri].Allowed || second[pi].Allowed || second[ri].Granted != 0 {
			t.Fatalf("%v: a second request in flight = %+v, %v; want refused for its permit alone, nothing taken", order, res, err)
		}
		if err := l.Refund(ctx, taken); err != nil {
			t.Fatal(err)
		}
		res, err = l.Allow(ctx, 2000, rules...)
		again := res.Rules
		if err != nil || !again[ri].Allowed || again[ri].Remaining != 0 || !again[pi].Allowed {
			t.Errorf("%v: after Refund, Allow(2000) = %+v, %v; want the 500 units and the permit back", order, res, err)
		}
	}
}
