package core

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// opsOverrides is NewOverrides, failing t on an error.
func opsOverrides(t testing.TB, rdb redis.UniversalClient, prefix string, maxAge time.Duration) *Overrides {
	t.Helper()
	o, err := NewOverrides(rdb, prefix, maxAge)
	if err != nil {
		t.Fatal(err)
	}
	// A patient read: these tests check what is cached and read, not how
	// fast, on a machine that runs every package's tests at once (one read
	// in thousands took over 50 ms under -race there).
	o.timeout = 10 * time.Second
	return o
}

func TestNewOverridesRefusesNilClient(t *testing.T) {
	for _, rdb := range []redis.UniversalClient{nil, (*redis.Client)(nil), (*redis.ClusterClient)(nil)} {
		if o, err := NewOverrides(rdb, "", 0); err == nil || o != nil {
			t.Errorf("NewOverrides(%T) = %v, %v; want an error", rdb, o, err)
		}
	}
	_, rdb := redistest.Mini(t)
	if o, err := NewOverrides(rdb, "", -time.Second); err == nil || o != nil {
		t.Errorf("NewOverrides with a negative maxAge = %v, %v; want an error", o, err)
	}
}

func TestOverridesSetGetRoundTrip(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	prefix := opsPrefix(t)
	tests := []struct {
		name  string
		limit Limit
	}{
		{"token bucket", PerSecond(100)},
		{"token bucket with burst", Limit{Rate: 10, Period: time.Minute, Burst: 50}},
		{"sliding window", Limit{Algorithm: SlidingWindow, Rate: 1000, Period: time.Hour}},
		{"sliding window counter", Limit{Algorithm: SlidingWindowCounter, Rate: 7, Period: 1500 * time.Millisecond}},
		{"fixed window", Limit{Algorithm: FixedWindow, Rate: 3, Period: 24 * time.Hour}},
		{"leaky bucket with max delay", Limit{Algorithm: LeakyBucket, Rate: 5, Period: time.Second, Burst: 20, MaxDelay: 250 * time.Millisecond}},
		{"microsecond period", Limit{Rate: 1, Period: 1234 * time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writer := opsOverrides(t, rdb, prefix, time.Minute)
			if err := writer.Set(ctx, tt.name, tt.limit, 0); err != nil {
				t.Fatal(err)
			}
			for _, who := range []struct {
				name string
				o    *Overrides
			}{{"writer", writer}, {"fresh instance", opsOverrides(t, rdb, prefix, time.Minute)}} {
				got, found, err := who.o.Get(ctx, tt.name)
				if err != nil || !found || got != tt.limit {
					t.Errorf("%s: Get = %+v, %v, %v; want %+v, true, nil", who.name, got, found, err, tt.limit)
				}
			}
		})
	}
}

// TestOverridesSetReplaces: a second Set with another Limit wins (no
// HSETNX-style "first write sticks"), on the writer and on a fresh reader.
func TestOverridesSetReplaces(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	prefix := opsPrefix(t)
	o := opsOverrides(t, rdb, prefix, time.Minute)
	first, second := PerSecond(10), Limit{Algorithm: SlidingWindow, Rate: 99, Period: time.Minute}
	if err := o.Set(ctx, "tenant:a", first, 0); err != nil {
		t.Fatal(err)
	}
	if err := o.Set(ctx, "tenant:a", second, 0); err != nil {
		t.Fatal(err)
	}
	for _, who := range []struct {
		name string
		o    *Overrides
	}{{"writer", o}, {"fresh instance", opsOverrides(t, rdb, prefix, time.Minute)}} {
		got, found, err := who.o.Get(ctx, "tenant:a")
		if err != nil || !found || got != second {
			t.Errorf("%s: Get = %+v, %v, %v; want the second Set %+v", who.name, got, found, err, second)
		}
	}
}

func TestOverridesDelete(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	prefix := opsPrefix(t)
	o := opsOverrides(t, rdb, prefix, time.Minute)
	if err := o.Set(ctx, "tenant:a", PerSecond(10), 0); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(ctx, "tenant:a"); err != nil {
		t.Fatal(err)
	}
	for _, who := range []struct {
		name string
		o    *Overrides
	}{{"writer", o}, {"fresh instance", opsOverrides(t, rdb, prefix, time.Minute)}} {
		got, found, err := who.o.Get(ctx, "tenant:a")
		if err != nil || found {
			t.Errorf("%s: Get after Delete = %+v, %v, %v; want not found", who.name, got, found, err)
		}
	}
	if err := o.Delete(ctx, "never-set"); err != nil {
		t.Errorf("Delete of a name never set: %v, want nil", err)
	}
}

func TestOverridesSetRefusesInvalid(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	o := opsOverrides(t, rdb, opsPrefix(t), time.Minute)
	tests := []struct {
		name    string
		limit   Limit
		ttl     time.Duration
		wantErr error // nil: any error
	}{
		{"zero rate", Limit{Period: time.Second}, 0, ErrInvalidLimit},
		{"zero period", Limit{Rate: 1}, 0, ErrInvalidLimit},
		{"negative burst", Limit{Rate: 1, Period: time.Second, Burst: -1}, 0, ErrInvalidLimit},
		{"unknown algorithm", Limit{Algorithm: 9, Rate: 1, Period: time.Second}, 0, ErrInvalidLimit},
		{"zero limit", Limit{}, 0, ErrInvalidLimit},
		{"negative ttl", PerSecond(1), -time.Second, nil},
		{"ttl below Redis' 1ms", PerSecond(1), 999 * time.Microsecond, nil}, // was stored for 1ms
		{"ttl of 1ns", PerSecond(1), time.Nanosecond, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := o.Set(ctx, "n", tt.limit, tt.ttl)
			if err == nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Set = %v, want %v", err, tt.wantErr)
			}
			if _, found, _ := o.Get(ctx, "n"); found {
				t.Errorf("Get after a refused Set: found, want nothing stored")
			}
		})
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("refused Sets stored %v", keys)
	}
}

// TestOverridesMalformedStored: a value an operator SET by hand wrongly
// gives a clear error naming the override, never a Limit.
func TestOverridesMalformedStored(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	prefix := opsPrefix(t)
	tests := []struct {
		stored  string
		wantMsg string
	}{
		{"", "empty"},
		{"10", "want \"<rate>/<period>\""},
		{"ten/s", "rate \"ten\""},
		{"10/fortnight", "period \"fortnight\""},
		{"10/s tokenbucket", "\"tokenbucket\" is neither an algorithm"},
		{"10/s burst=five", "burst \"five\""},
		{"10/s leaky_bucket max-delay=soon", "max-delay \"soon\""},
		{"0/s", "Rate must be > 0"},
		{"10/0s sliding_window", "Period must be >= 1µs"},
		{"10/s burst=-3", "Burst must be 0 to 2^40"},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.stored), func(t *testing.T) {
			o := opsOverrides(t, rdb, prefix, time.Minute)
			if err := mr.Set(o.key("bad"), tt.stored); err != nil {
				t.Fatal(err)
			}
			got, found, err := o.Get(ctx, "bad")
			if !errors.Is(err, ErrInvalidLimit) {
				t.Fatalf("Get = %+v, %v, %v; want an error wrapping ErrInvalidLimit", got, found, err)
			}
			if found || got != (Limit{}) {
				t.Errorf("Get = %+v, %v; want no Limit with the error", got, found)
			}
			msg := err.Error()
			for _, want := range []string{"core: overrides", `"bad"`, tt.wantMsg} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
		})
	}
	t.Run("well formed by hand", func(t *testing.T) {
		o := opsOverrides(t, rdb, prefix, time.Minute)
		if err := mr.Set(o.key("good"), "  100/min   sliding_window  "); err != nil {
			t.Fatal(err)
		}
		got, found, err := o.Get(ctx, "good")
		want := Limit{Algorithm: SlidingWindow, Rate: 100, Period: time.Minute}
		if err != nil || !found || got != want {
			t.Errorf("Get = %+v, %v, %v; want %+v", got, found, err, want)
		}
	})
}

func TestOverridesTTL(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	prefix := opsPrefix(t)
	o := opsOverrides(t, rdb, prefix, time.Minute)
	if err := o.Set(ctx, "temporary", PerSecond(500), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := o.Set(ctx, "permanent", PerSecond(5), 0); err != nil {
		t.Fatal(err)
	}
	if got, want := mr.TTL(o.key("temporary")), 10*time.Second; got != want {
		t.Errorf("TTL of a Set with ttl 10s = %v, want %v", got, want)
	}
	if got := mr.TTL(o.key("permanent")); got != 0 {
		t.Errorf("TTL of a Set with ttl 0 = %v, want none", got)
	}
	mr.FastForward(10*time.Second + time.Millisecond)
	fresh := opsOverrides(t, rdb, prefix, time.Minute)
	if got, found, err := fresh.Get(ctx, "temporary"); err != nil || found {
		t.Errorf("after the ttl: Get = %+v, %v, %v; want not found", got, found, err)
	}
	if got, found, err := fresh.Get(ctx, "permanent"); err != nil || !found || got != PerSecond(5) {
		t.Errorf("permanent: Get = %+v, %v, %v; want found", got, found, err)
	}
}

// TestOverridesCache: within MaxAge, Gets are answered locally, found or
// not; one GET per name.
func TestOverridesCache(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	var count opsCounter
	rdb.AddHook(&count)
	prefix := opsPrefix(t)
	if err := opsOverrides(t, rdb, prefix, 0).Set(ctx, "set", PerSecond(3), 0); err != nil {
		t.Fatal(err)
	}
	o := opsOverrides(t, rdb, prefix, time.Hour)
	before := count.cmds.Load()
	for range 100 {
		if _, found, err := o.Get(ctx, "set"); err != nil || !found {
			t.Fatalf("Get(set) = %v, %v", found, err)
		}
		if _, found, err := o.Get(ctx, "unset"); err != nil || found {
			t.Fatalf("Get(unset) = %v, %v", found, err)
		}
	}
	if got, want := count.cmds.Load()-before, int64(2); got != want {
		t.Errorf("200 Gets of 2 names sent %d commands, want %d", got, want)
	}
}

// TestOverridesKeepLastKnownOnError: when Redis fails after the cache
// expired, Get returns the last known Limit with the error.
func TestOverridesKeepLastKnownOnError(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	o := opsOverrides(t, rdb, opsPrefix(t), time.Nanosecond) // every Get asks Redis
	if err := o.Set(ctx, "n", PerSecond(3), 0); err != nil {
		t.Fatal(err)
	}
	mr.SetError("LOADING Redis is loading the dataset in memory")
	got, found, err := o.Get(ctx, "n")
	if err == nil || !found || got != PerSecond(3) {
		t.Errorf("Get with Redis failing = %+v, %v, %v; want the last known Limit and an error", got, found, err)
	}
	if _, found, err := o.Get(ctx, "never-seen"); err == nil || found {
		t.Errorf("Get of an unknown name with Redis failing = %v, %v; want an error, not found", found, err)
	}
}

// TestOverridesSecondInstanceObeysWithinMaxAge: instance B has cached the
// old Limit; after instance A sets a new one, B returns it within maxAge (200ms; the test allows 200ms + 150ms of scheduling slack,
// polling every 5ms). Overrides caches by the wall clock, so this waits on
// it.
func TestOverridesSecondInstanceObeysWithinMaxAge(t *testing.T) {
	const (
		maxAge = 200 * time.Millisecond
		slack  = 150 * time.Millisecond
	)
	for _, be := range opsBackends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.open(t)
			prefix := opsPrefix(t)
			a := opsOverrides(t, rdb, prefix, maxAge)
			b := opsOverrides(t, opsSecondClient(t, rdb), prefix, maxAge)
			const name = "h:X-Tenant:gold" // what the key function yields
			t.Cleanup(func() { _ = a.Delete(context.Background(), name) })

			oldLimit, newLimit := PerMinute(10), PerMinute(2)
			if err := a.Set(ctx, name, oldLimit, 0); err != nil {
				t.Fatal(err)
			}
			if got, _, err := b.Get(ctx, name); err != nil || got != oldLimit {
				t.Fatalf("B before the change: %+v, %v; want %+v", got, err, oldLimit)
			}
			if err := a.Set(ctx, name, newLimit, 0); err != nil {
				t.Fatal(err)
			}
			set := time.Now()
			if got, _, _ := a.Get(ctx, name); got != newLimit {
				t.Fatalf("A after its own Set: %+v, want %+v at once", got, newLimit)
			}
			for {
				got, _, err := b.Get(ctx, name)
				waited := time.Since(set)
				if err != nil {
					t.Fatal(err)
				}
				if got == newLimit {
					t.Logf("B obeyed the new limit %v after A's Set (maxAge %v)", waited.Round(time.Millisecond), maxAge)
					return
				}
				if got != oldLimit {
					t.Fatalf("B returned %+v, want the old or the new Limit", got)
				}
				if waited > maxAge+slack {
					t.Fatalf("B still returns the old limit %v after A's Set, want the new one within maxAge %v", waited, maxAge)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// opsSecondClient returns a second client to rdb's server, so two
// Overrides instances share nothing but Redis.
func opsSecondClient(t *testing.T, rdb *redis.Client) *redis.Client {
	t.Helper()
	o := rdb.Options()
	c := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Username: o.Username, Password: o.Password,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestOverridesCacheHasNoCliff: a spray of new names fills the cache, and
// pushes out the names nobody asks for, one at a time: a name in use stays
// cached (no extra GET while Redis answers, and its Limit while Redis is
// down), where the cache used to be cleared whole.
func TestOverridesCacheHasNoCliff(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	var count opsCounter
	rdb.AddHook(&count)
	prefix := opsPrefix(t)
	gold := PerSecond(500)
	o := opsOverrides(t, rdb, prefix, time.Hour)
	o.max = 1000 // the bound is overridesMaxKeys; a smaller one sprays faster
	if err := o.Set(ctx, "tenant:gold", gold, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * o.max {
		if _, _, err := o.Get(ctx, "spray:"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			before := count.cmds.Load()
			if got, found, err := o.Get(ctx, "tenant:gold"); err != nil || !found || got != gold {
				t.Fatalf("gold after %d sprayed names: %+v, %v, %v", i, got, found, err)
			}
			if sent := count.cmds.Load() - before; sent != 0 {
				t.Fatalf("gold after %d sprayed names cost %d commands: it fell out of the cache", i, sent)
			}
		}
	}
	if n := len(o.cache); n != o.max {
		t.Errorf("cache holds %d names, want its bound %d", n, o.max)
	}
	// With Redis down, the tenant keeps its Limit.
	o.maxAge = time.Nanosecond
	mr.SetError("LOADING Redis is loading the dataset in memory")
	if got, found, _ := o.Get(ctx, "tenant:gold"); !found || got != gold {
		t.Errorf("gold with Redis down: %+v, %v; want its last known Limit", got, found)
	}
}

// TestOverridesShareOneRead: the callers that miss one name while it is
// being read wait for that read ("callers that miss the same name at once
// share one read" in the Overrides doc), and a caller that gives up ends
// only its own wait. The read in flight is planted, so no timing decides.
func TestOverridesShareOneRead(t *testing.T) {
	_, rdb := redistest.Mini(t)
	var count opsCounter
	rdb.AddHook(&count)
	o := opsOverrides(t, rdb, opsPrefix(t), time.Hour)
	rd := &overrideRead{done: make(chan struct{})}
	o.mu.Lock()
	o.reading["tenant"] = rd
	o.mu.Unlock()

	type got struct {
		limit Limit
		found bool
		err   error
	}
	const callers = 50
	results := make(chan got, callers)
	for range callers {
		go func() {
			l, found, err := o.Get(context.Background(), "tenant")
			results <- got{l, found, err}
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := o.Get(ctx, "tenant"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context during the read = %v; want context.Canceled", err)
	}
	rd.limit, rd.found = PerSecond(3), true
	close(rd.done)
	for range callers {
		if r := <-results; r.err != nil || !r.found || r.limit != PerSecond(3) {
			t.Errorf("Get = %+v; want the shared read's 3/s", r)
		}
	}
	if n := count.cmds.Load(); n != 0 {
		t.Errorf("%d callers of a name being read sent %d commands; want none", callers, n)
	}
}

// TestOverridesReadOutlivesItsCaller: the caller whose miss started a read
// gives up; the read still completes and is cached for the next caller.
func TestOverridesReadOutlivesItsCaller(t *testing.T) {
	_, rdb := redistest.Mini(t)
	prefix := opsPrefix(t)
	if err := opsOverrides(t, rdb, prefix, 0).Set(context.Background(), "tenant", PerSecond(3), 0); err != nil {
		t.Fatal(err)
	}
	var count opsCounter
	rdb.AddHook(&count)
	o := opsOverrides(t, rdb, prefix, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, _ = o.Get(ctx, "tenant") // starts the read, returns at once
	o.mu.Lock()
	rd := o.reading["tenant"]
	o.mu.Unlock()
	if rd != nil {
		<-rd.done
	}
	if l, found, err := o.Get(context.Background(), "tenant"); err != nil || !found || l != PerSecond(3) {
		t.Errorf("Get after the first caller gave up = %v, %v, %v; want 3/s from the cache", l, found, err)
	}
	if n := count.cmds.Load(); n != 1 {
		t.Errorf("sent %d commands; want the one read", n)
	}
}
