package core

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// The tests in this file back sentences that were true but that no test
// would have caught breaking (issue 25, item 8).

// plainDecisionAllocs is what one plain decision allocates today (Allow of
// a token bucket, admitted, WithBatching(1), on a Redis of its own).
const plainDecisionAllocs = 17

// TestPlainDecisionAllocs backs BENCHMARKS.md's "a plain decision makes
// 17 allocations": a change that allocates more on the hot path fails it
// (lower plainDecisionAllocs when one allocates less). The Redis is a
// process of its own, so that only the client's allocations count.
func TestPlainDecisionAllocs(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t, nil)
	l := opsNew(t, rdb, WithBatching(1), opsPatient)
	ctx := context.Background()
	limit := PerSecond(1_000_000)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "allocs:" + strconv.Itoa(i)
	}
	i := 0
	allow := func() {
		if r, err := l.Allow(ctx, 1, limit.For(keys[i%len(keys)])); err != nil || !r.Allowed {
			t.Fatalf("Allow: %+v, %v", r, err)
		}
		i++
	}
	allow() // the first call loads the plan and connects
	most := plainDecisionAllocs
	if !l.funcs.on.Load() {
		// A server without FUNCTION (Redis 6.2): go-redis' Script.Run
		// builds its EVALSHA's arguments in a slice of its own.
		most++
	}
	if got := testing.AllocsPerRun(2000, allow); got > float64(most) {
		t.Errorf("a plain decision allocates %v times, want at most %d (FCALL: %v)", got, most, l.funcs.on.Load())
	}
}

// TestLeasedKeysCapped backs WithLeases' "At most 4096 keys are leased at
// once; others are decided in Redis, a call each": with 4096 keys in the
// table, a further key is admitted by Redis, not leased, and the table
// does not grow; the keys leased before are still served from their
// leases. Without the cap in leases.get, the table grows to 4097.
func TestLeasedKeysCapped(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.5))
	limit := Limit{Algorithm: FixedWindow, Rate: 100, Period: time.Hour}
	if r, err := l.Allow(ctx, 1, limit.For("first")); err != nil || !r.Allowed || !r.Leased {
		t.Fatalf("a key with room in the table: %+v, %v; want it leased", r, err)
	}
	pl, err := l.plans.of(limit)
	if err != nil {
		t.Fatal(err)
	}
	// The table filled as 4095 more leased keys would fill it, without
	// 4095 round trips.
	for i := range 4095 {
		tag := escapeTag("full:" + strconv.Itoa(i))
		if l.leases.get(pl, tag, pl.keys(nil, l.prefix, tag, nil), true) == nil {
			t.Fatalf("the table refused key %d of 4096", i+2)
		}
	}
	r, err := l.Allow(ctx, 1, limit.For("one-more"))
	if err != nil || !r.Allowed || r.Leased {
		t.Errorf("key 4097: %+v, %v; want admitted by Redis, not leased", r, err)
	}
	l.leases.mu.Lock()
	n := len(l.leases.m)
	l.leases.mu.Unlock()
	if n != 4096 {
		t.Errorf("%d keys leased, want 4096", n)
	}
	if r, err := l.Allow(ctx, 1, limit.For("first")); err != nil || !r.Allowed || !r.Leased {
		t.Errorf("a key leased before the table filled: %+v, %v; want it served from its lease", r, err)
	}
}

// TestPingTakesAtMostASecond backs Ping's "It takes at most a second, or
// the Limiter's timeout if that is longer, unless ctx ends first": on a
// Redis that accepts connections and never answers, Ping with a caller's
// 10s fails with context.DeadlineExceeded after about 1s (at most 3s here,
// for a busy machine), and after the Limiter's 1.5s timeout when that is
// longer. Without its bound it would take the caller's 10s.
func TestPingTakesAtMostASecond(t *testing.T) {
	_, mrdb := redistest.Mini(t)
	for _, tc := range []struct {
		timeout time.Duration
		least   time.Duration
	}{{0, time.Second}, {1500 * time.Millisecond, 1500 * time.Millisecond}} {
		p := startSlowStart(t, mrdb.Options().Addr, time.Hour)
		rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		opts := []Option{}
		if tc.timeout > 0 {
			opts = append(opts, WithTimeout(tc.timeout))
		}
		l := opsNew(t, rdb, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, err := l.Ping(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || took < tc.least-50*time.Millisecond || took > tc.least+2*time.Second {
			t.Errorf("Ping (timeout %v) on a Redis that never answers: %v after %v; want a deadline after about %v",
				tc.timeout, err, took, tc.least)
		}
	}
}

// TestDenyCacheAnswersAllowLayers: a set of Rules of one key (layers)
// that Redis denied is denied again from the deny cache, with Redis'
// Results per Rule and no Redis command; another set of Limits for the key
// is asked of Redis.
func TestDenyCacheAnswersAllowLayers(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	var count opsCounter
	rdb.AddHook(&count)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient, WithDenyCache(100))
	layers := opsRules("abuser", []Limit{PerHour(2), {Rate: 10, Period: 24 * time.Hour}})
	for i := range 2 {
		if res, err := l.Allow(ctx, 1, layers...); err != nil || !opsAdmitted(res.Rules) {
			t.Fatalf("request %d: %+v, %v; want admitted", i+1, res, err)
		}
	}
	res, err := l.Allow(ctx, 1, layers...)
	denied := res.Rules
	if err != nil || opsAdmitted(denied) || denied[0].Cached || res.Cached {
		t.Fatalf("third request: %+v, %v; want denied by Redis", res, err)
	}
	before := count.cmds.Load()
	for i := range 3 {
		res, err := l.Allow(ctx, 1, layers...)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed || !res.Cached || len(res.Rules) != len(layers) {
			t.Errorf("cached request %d: %+v; want a cached denial with a Result per Rule", i, res)
			continue
		}
		for j, r := range res.Rules {
			// Cached marks the layers that deny, as under one Limit.
			if r.Allowed != denied[j].Allowed || r.Cached == r.Allowed || r.Granted != 0 ||
				r.Remaining != denied[j].Remaining || r.RetryAfter > denied[j].RetryAfter {
				t.Errorf("cached request %d, layer %d: %+v; want Redis' %+v, Cached if denied", i, j, r, denied[j])
			}
		}
	}
	if got := count.cmds.Load() - before; got != 0 {
		t.Errorf("cached layered denials sent %d Redis commands, want 0", got)
	}
	before = count.cmds.Load()
	other := opsRules("abuser", []Limit{PerHour(3), {Rate: 10, Period: 24 * time.Hour}})
	if res, err := l.Allow(ctx, 1, other...); err != nil || res.Rules[0].Cached || count.cmds.Load() == before {
		t.Errorf("the key under other Limits: %+v, %v; want an answer from Redis", res, err)
	}
}
