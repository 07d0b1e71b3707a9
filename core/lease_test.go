package core

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestLeaseOneInstance: with leases, one instance still admits exactly the
// window's Rate, asks Redis a few times instead of once per request, and
// once the window is spent denies locally until its end.
func TestLeaseOneInstance(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			ctx := context.Background()
			_, rdb := redistest.Mini(t) // Redis' clock stands still: one window
			var count opsCounter
			rdb.AddHook(&count)
			l := leasingNew(t, rdb, opsPatient, WithLeases(0.25))
			limit := Limit{Algorithm: a, Rate: 100, Period: time.Hour}
			if _, err := l.Peek(ctx, limit.For("warm-up")); err != nil { // loads the script
				t.Fatal(err)
			}
			count.cmds.Store(0)
			admitted, leased := 0, 0
			for i := range 150 {
				r, err := l.Allow(ctx, 1, limit.For("hot"))
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				if r.Allowed {
					admitted++
				} else if r.RetryAfter <= 0 || r.RetryAfter > time.Hour {
					t.Errorf("request %d denied with RetryAfter %v, want (0, 1h]", i+1, r.RetryAfter)
				}
				if r.Leased {
					leased++
				}
				if r.Remaining < 0 || r.Remaining > 100 {
					t.Errorf("request %d: Remaining %d outside [0, 100]", i+1, r.Remaining)
				}
			}
			calls := count.cmds.Load()
			t.Logf("150 requests: %d admitted, %d answered from the lease, %d Redis calls", admitted, leased, calls)
			if admitted != 100 {
				t.Errorf("admitted %d, want exactly the window's 100", admitted)
			}
			// Leases of 1, 2, 4, ... capped at 25, then one denial.
			if calls > 12 {
				t.Errorf("%d Redis calls for 150 requests, want at most 12", calls)
			}
			if r, err := l.Peek(ctx, limit.For("hot")); err != nil || r.Remaining != 0 {
				t.Errorf("Peek after the window is spent: %+v, %v; want Remaining 0 in Redis", r, err)
			}
		})
	}
}

// TestLeaseInstancesShareExactly: four instances hammer one key at once;
// together they never admit more than the window's Rate, and since every
// one keeps asking, units leased are spent: they admit all of it.
func TestLeaseInstancesShareExactly(t *testing.T) {
	_, rdb := redistest.Mini(t)
	limit := Limit{Algorithm: FixedWindow, Rate: 1000, Period: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		l := leasingNew(t, rdb, opsPatient, WithLeases(1.0/8))
		for range 8 {
			wg.Go(func() {
				for range 400 {
					r, err := l.Allow(context.Background(), 1, limit.For("shared"))
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != 1000 {
		t.Errorf("4 instances admitted %d, want exactly 1000", got)
	}
}

// TestLeaseReturnsUnused: a lease whose life ends before its window hands
// its unused units back to Redis, and its key leaves the table.
func TestLeaseReturnsUnused(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.5))
	limit := Limit{Algorithm: FixedWindow, Rate: 100, Period: time.Hour}
	for range 7 { // leases of 1, 2 and 4 units
		if r, err := l.Allow(ctx, 1, limit.For("k")); err != nil || !r.Allowed {
			t.Fatalf("Allow: %+v, %v", r, err)
		}
	}
	r, err := l.Allow(ctx, 1, limit.For("k")) // a lease of 8 (twice the last one's 4), 1 spent
	if err != nil || !r.Allowed {
		t.Fatalf("Allow: %+v, %v", r, err)
	}
	if p, _ := l.Peek(ctx, limit.For("k")); p.Remaining != 100-15 {
		t.Fatalf("Redis has %d left, want 85 (15 leased)", p.Remaining)
	}
	e, gen := leaseHolding(t, l, "k", 7)
	e.expire(l, gen-1) // a stale timer (an older lease) does nothing
	if p, _ := l.Peek(ctx, limit.For("k")); p.Remaining != 100-15 {
		t.Errorf("after a stale timer, Redis has %d left, want still 85", p.Remaining)
	}
	e.expire(l, gen)
	if p, _ := l.Peek(ctx, limit.For("k")); p.Remaining != 100-8 {
		t.Errorf("after the lease ended, Redis has %d left, want 92 (the 7 unused came back)", p.Remaining)
	}
	// The key saw a request in that lease: it stays, for its demand. A
	// lease life without one takes it out.
	if leaseOf(l, "k") != e {
		t.Fatal("a key in use left the table")
	}
	e.mu.Lock()
	gen = e.gen
	e.mu.Unlock()
	e.expire(l, gen)
	if leaseOf(l, "k") != nil {
		t.Error("an idle key stayed in the table")
	}
}

// TestLeaseOverByLifeGivesBack: a request that comes after a lease's life
// but before its timer ran takes the next lease and hands the old one's
// units back: none is lost for the rest of the window.
func TestLeaseOverByLifeGivesBack(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.5))
	limit := Limit{Algorithm: FixedWindow, Rate: 100, Period: time.Hour}
	for range 8 { // leases of 1, 2, 4, then 8 with 7 unspent
		if r, err := l.Allow(ctx, 1, limit.For("k")); err != nil || !r.Allowed {
			t.Fatalf("Allow: %+v, %v", r, err)
		}
	}
	e := leaseOf(l, "k")
	e.mu.Lock()
	e.until = time.Now().Add(-time.Millisecond) // its life is over; its timer has not run
	e.mu.Unlock()
	if r, err := l.Allow(ctx, 1, limit.For("k")); err != nil || !r.Allowed {
		t.Fatalf("Allow after the life: %+v, %v", r, err)
	}
	// 9 admitted; the 7 come back (in the background), the new lease holds
	// what it asked for less the one spent.
	e.mu.Lock()
	held := e.units
	e.mu.Unlock()
	want := 100 - 9 - int(held)
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := l.Peek(ctx, limit.For("k"))
		if err == nil && p.Remaining == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis has %d left, want %d: the old lease's 7 units were lost", p.Remaining, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLeaseTableBounded: requests of more than one unit, which a lease
// does not serve, leave nothing in the table, however many keys they name.
func TestLeaseTableBounded(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.5))
	limit := Limit{Algorithm: FixedWindow, Rate: 100, Period: time.Hour}
	for i := range 200 {
		if _, err := l.Allow(ctx, 2, limit.For("k"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	l.leases.mu.Lock()
	n := len(l.leases.m)
	l.leases.mu.Unlock()
	if n != 0 {
		t.Errorf("%d keys in the table after requests of 2 units, want 0", n)
	}
}

// leaseHolding is key's lease, which must hold units unspent, and its
// generation (what expire names).
func leaseHolding(t *testing.T, l *Limiter, key string, units int64) (*lease, uint64) {
	t.Helper()
	e := leaseOf(l, key)
	if e == nil {
		t.Fatalf("no lease of %q", key)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.units != units {
		t.Fatalf("the lease of %q holds %d units, want %d", key, e.units, units)
	}
	return e, e.gen
}

// leaseOf is key's entry in l's lease table, nil if none.
func leaseOf(l *Limiter, key string) *lease {
	l.leases.mu.Lock()
	defer l.leases.mu.Unlock()
	return l.leases.m[stateKeys(nil, l.prefix, escapeTag(key), &algorithms[FixedWindow], 0)[0]]
}

// TestLeaseOnlyWindows: a TokenBucket limit is never leased (every request
// asks Redis), nor is a limit whose share of capacity is under 2 units.
func TestLeaseOnlyWindows(t *testing.T) {
	ctx := context.Background()
	for _, limit := range []Limit{PerHour(100), {Algorithm: FixedWindow, Rate: 3, Period: time.Hour}} {
		_, rdb := redistest.Mini(t)
		var count opsCounter
		rdb.AddHook(&count)
		l := leasingNew(t, rdb, opsPatient, WithLeases(0.5))
		if _, err := l.Peek(ctx, limit.For("warm-up")); err != nil { // loads the script
			t.Fatal(err)
		}
		count.cmds.Store(0)
		for range 10 {
			if r, err := l.Allow(ctx, 1, limit.For("k")); err != nil || r.Leased {
				t.Fatalf("%v: %+v, %v; want a decision by Redis", limit, r, err)
			}
		}
		if got := count.cmds.Load(); got != 10 {
			t.Errorf("%v: 10 requests made %d Redis calls, want 10", limit, got)
		}
	}
}

// TestLeaseLargerRequests: a request of n > 1 is served from the lease when
// it has n units, and otherwise decided by Redis exactly, with its own
// RetryAfter.
func TestLeaseLargerRequests(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.5))
	limit := Limit{Algorithm: SlidingWindowCounter, Rate: 10, Period: time.Hour}
	admitted := 0
	for range 20 {
		r, err := l.Allow(ctx, 3, limit.For("k"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted += 3
		}
	}
	if admitted != 9 {
		t.Errorf("admitted %d units in requests of 3, want 9 of 10", admitted)
	}
	r, err := l.Allow(ctx, 1, limit.For("k"))
	if err != nil || !r.Allowed {
		t.Errorf("the 10th unit: %+v, %v; want admitted", r, err)
	}
}

// TestLeaseReset: Reset drops this instance's lease, so its units, counted
// in the state Reset deleted, are not spent on top of the fresh quota.
func TestLeaseReset(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.5))
	limit := Limit{Algorithm: FixedWindow, Rate: 10, Period: time.Hour}
	for range 4 { // leases of 1, 2, then 4 with 3 unspent
		if _, err := l.Allow(ctx, 1, limit.For("k")); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 20 {
		if r, err := l.Allow(ctx, 1, limit.For("k")); err == nil && r.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("after Reset: %d admitted, want the fresh 10", admitted)
	}
}

func TestWithLeasesInvalid(t *testing.T) {
	_, rdb := redistest.Mini(t)
	for _, share := range []float64{0, -0.1, 0.6, 1} {
		if _, err := New(rdb, WithLeases(share)); err == nil {
			t.Errorf("WithLeases(%v): no error", share)
		}
	}
}

// leasingNew is opsNew with leases that live an hour, so that no timer
// runs during a test: the tests end leases by hand (expire).
func leasingNew(t *testing.T, rdb *redis.Client, opts ...Option) *Limiter {
	t.Helper()
	l := opsNew(t, rdb, opts...)
	if l.leases != nil {
		l.leases.life = time.Hour
	}
	return l
}

// TestLeaseGiveBackAfterItsWindowGivesNothing backs the README's "a
// refund never raises what the limit allows in any window", leases
// included (issue 16): units a lease leaves unspent go back to the window
// they were taken in, so a give-back that lands after that window ended
// adds nothing to the next one. Without the receipt's window check, the 7
// units would free 7 more in the second window (12 left, not 5).
func TestLeaseGiveBackAfterItsWindowGivesNothing(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	l := leasingNew(t, rdb, opsPatient, WithLeases(0.5))
	plain := opsNew(t, rdb, opsPatient) // the same keys, no leases
	limit := Limit{Algorithm: FixedWindow, Rate: 100, Period: time.Minute}
	first := redistest.Epoch.Truncate(time.Minute).Add(time.Minute)
	redistest.SetTime(mr, first.Add(time.Second))
	for range 8 { // leases of 1, 2, 4, then 8 with 7 unspent: 15 taken in Redis
		if r, err := l.Allow(ctx, 1, limit.For("k")); err != nil || !r.Allowed {
			t.Fatalf("Allow: %+v, %v", r, err)
		}
	}
	e, gen := leaseHolding(t, l, "k", 7)
	redistest.SetTime(mr, first.Add(time.Minute+time.Second)) // the next window
	if r, err := plain.Allow(ctx, 95, limit.For("k")); err != nil || !r.Allowed {
		t.Fatalf("AllowN(95) in the next window: %+v, %v", r, err)
	}
	e.expire(l, gen) // the 7 unspent go back, naming the first window
	if p, err := plain.Peek(ctx, limit.For("k")); err != nil || p.Remaining != 5 {
		t.Errorf("after the late give-back the window has %d left (%v), want 5: it gained units it never had", p.Remaining, err)
	}
}

// TestEchoesBounded: a Limiter that Resets on every request (a handler's
// Reset after a login, say) keeps at most echoMax expected echoes, so a
// client who drives Resets makes neither memory nor each Reset's work grow
// with their rate; an expired echo is no longer its own.
func TestEchoesBounded(t *testing.T) {
	var e echoes
	now := redistest.Epoch
	for i := range 10 * echoMax {
		e.expect(strconv.Itoa(i), now)
	}
	if len(e.m) != echoMax {
		t.Fatalf("%d echoes expected, want at most %d", len(e.m), echoMax)
	}
	if !e.own("0", now) || e.own("0", now) {
		t.Error("an expected echo is its own once")
	}
	e.expect("late", now)
	if e.own("late", now.Add(echoWait+time.Millisecond)) {
		t.Error("an echo past echoWait is taken for its own")
	}
	e.expect("fill", now)                        // full again
	e.expect("x", now.Add(echoWait+time.Second)) // full: sweeps the expired
	if len(e.m) != 1 {
		t.Errorf("%d echoes after the sweep, want 1", len(e.m))
	}
}
