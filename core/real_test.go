package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// The tests in this file run against the real Redis of REDIS_URL and the
// Redis Cluster of REDIS_CLUSTER_ADDRS (skipped when those are unset, and
// failed under CI). Real Redis has a real clock: they assert bounds, not
// exact values. Each test writes only keys under a prefix of its own and
// deletes them when it ends; nothing here flushes a database.

// realPrefix is a key prefix unique to this test run and test.
func realPrefix(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	return fmt.Sprintf("redlimit-coretest:%s:%d", name, time.Now().UnixNano())
}

// cleanupPrefix deletes every key under prefix when the test ends, on every
// master of a cluster.
func cleanupPrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
			for iter.Next(ctx) {
				c.Unlink(ctx, iter.Val())
			}
			return iter.Err()
		}
		var err error
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, del)
		case *redis.Client:
			err = del(ctx, c)
		}
		if err != nil {
			t.Logf("cleanup of %s:*: %v", prefix, err)
		}
	})
}

// scanKeys lists the keys under prefix (on every master of a cluster).
func scanKeys(t testing.TB, rdb redis.UniversalClient, prefix string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][]string{}
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		var keys []string
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		mu.Lock()
		out[c.Options().Addr] = keys
		mu.Unlock()
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	}
	if err != nil {
		t.Fatalf("SCAN %s:*: %v", prefix, err)
	}
	return out
}

// redisNow is Redis' own clock, in µs.
func redisNow(t testing.TB, rdb redis.UniversalClient) int64 {
	t.Helper()
	return redistest.Now(t, rdb).UnixMicro()
}

// checkAllTTLs fails unless every key under prefix has a TTL.
func checkAllTTLs(t testing.TB, rdb redis.UniversalClient, prefix string, wantKeys int) {
	t.Helper()
	ctx := context.Background()
	n := 0
	for addr, keys := range scanKeys(t, rdb, prefix) {
		for _, k := range keys {
			n++
			pttl, err := rdb.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatalf("PTTL %q: %v", k, err)
			}
			// -1 is a key without a TTL; -2 one that expired since the
			// SCAN, and 0 one with less than a millisecond left (a short
			// window ending as the check runs).
			if pttl == -1 {
				t.Errorf("key %q on %s has no TTL: want a TTL on every key", k, addr)
			}
		}
	}
	if wantKeys >= 0 && n != wantKeys {
		t.Errorf("%d keys under %s, want %d", n, prefix, wantKeys)
	}
}

var allAlgorithms = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingWindowCounter}

// behaviourSuite is what every backend must do: burst, deny, Peek, Reset,
// TTLs, hostile keys. The Redis clock runs, so it checks bounds.
func behaviourSuite(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	for _, a := range allAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			prefix := realPrefix(t)
			cleanupPrefix(t, rdb, prefix)
			l := opsNew(t, rdb, WithPrefix(prefix), WithTimeout(5*time.Second))
			lim := with(PerHour(5), a)
			period := time.Hour
			attempt := 0
			for ; ; attempt++ {
				key := fmt.Sprintf("k%d", attempt)
				t0 := redisNow(t, rdb)
				if r, err := l.Peek(ctx, lim.For(key)); err != nil || !r.Allowed || r.Remaining != 5 || r.ResetAfter != 0 {
					t.Fatalf("Peek on a fresh key = %+v, %v", r, err)
				}
				if r, err := l.Allow(ctx, 5, lim.For(key)); err != nil || !r.Allowed || r.Remaining != 0 {
					t.Fatalf("AllowN(5) = %+v, %v", r, err)
				}
				r, err := l.Allow(ctx, 1, lim.For(key))
				if err != nil {
					t.Fatal(err)
				}
				t1 := redisNow(t, rdb)
				if a == FixedWindow || a == SlidingWindowCounter {
					if t0/period.Microseconds() != t1/period.Microseconds() && attempt == 0 {
						continue // crossed an hour boundary: the numbers below would not hold
					}
				}
				if r.Allowed || r.Remaining != 0 {
					t.Fatalf("6th in an hour = %+v, want denied", r)
				}
				// The wait until one more passes, as of t0 and as of t1.
				us := time.Microsecond
				elapsed := time.Duration(t1-t0) * us
				inWindow := time.Duration(t1%period.Microseconds()) * us
				var lo, hi time.Duration
				switch a {
				case TokenBucket, LeakyBucket:
					lo, hi = period/5-elapsed, period/5
				case SlidingWindow:
					lo, hi = period-elapsed, period
				case FixedWindow:
					// (Whole ms, to when the key is gone: Redis keeps it
					// through the ms its expiry names, and reads its TTL
					// from the ms the call began in, which may begin up to
					// 1 ms before t0.)
					lo, hi = period-inWindow, period-inWindow+elapsed+2*time.Millisecond
				case SlidingWindowCounter:
					lo, hi = 2*period-inWindow-period/5*4, 2*period-inWindow-period/5*4+elapsed
				}
				if r.RetryAfter < lo || r.RetryAfter > hi {
					t.Errorf("RetryAfter %v, want within [%v, %v]", r.RetryAfter, lo, hi)
				}
				if r.ResetAfter < r.RetryAfter || r.ResetAfter > 2*period {
					t.Errorf("ResetAfter %v, want within [RetryAfter %v, %v]", r.ResetAfter, r.RetryAfter, 2*period)
				}
				pttl, err := rdb.PTTL(ctx, redisKey(l.prefix, key, a)).Result()
				if err != nil {
					t.Fatal(err)
				}
				// Redis counts TTLs from its own reading of the clock, not
				// from the script's TIME, and on a loaded machine (two cores,
				// a six-node Cluster, -race) the two differ by a few ms: CI
				// once saw a PTTL 3.6 ms above ResetAfter. That is harmless;
				// a TTL off by a whole window is not, and fails here.
				if pttl <= 0 || pttl > r.ResetAfter+100*time.Millisecond || pttl < r.ResetAfter-elapsed-time.Second {
					t.Errorf("PTTL %v, want about ResetAfter %v", pttl, r.ResetAfter)
				}
				if err := l.Reset(ctx, key); err != nil {
					t.Fatal(err)
				}
				if r, err := l.Allow(ctx, 5, lim.For(key)); err != nil || !r.Allowed {
					t.Fatalf("AllowN(5) after Reset = %+v, %v", r, err)
				}
				break
			}

			// Hostile keys work and stay apart.
			long := strings.Repeat("k", 64<<10)
			keys := []string{"{a}", "a", "%7Ba%7D", "a\x00", "\xff\xfe", long, long + "x", hashedTag(long)}
			for _, k := range keys {
				if r, err := l.Allow(ctx, 5, lim.For(k)); err != nil || !r.Allowed {
					t.Fatalf("AllowN(5) on key %q = %+v, %v: shares state with an earlier key", trunc(k), r, err)
				}
			}
			for _, k := range keys {
				if r, err := l.Allow(ctx, 1, lim.For(k)); err != nil || r.Allowed {
					t.Fatalf("Allow on the used key %q = %+v, %v, want denied", trunc(k), r, err)
				}
			}
			checkAllTTLs(t, rdb, prefix, (len(keys)+attempt+1)*len(algorithms[a].suffixes))
		})
	}
}

func TestRealBehaviour(t *testing.T) {
	behaviourSuite(t, redistest.Real(t))
}

func TestClusterBehaviour(t *testing.T) {
	behaviourSuite(t, redistest.Cluster(t))
}

// TestRealScriptFlush: after SCRIPT FLUSH (or a failover to a server that
// never saw the scripts), decisions go on without an error.
func TestRealScriptFlush(t *testing.T) {
	rdb := redistest.Real(t)
	ctx := context.Background()
	prefix := realPrefix(t)
	cleanupPrefix(t, rdb, prefix)
	l := opsNew(t, rdb, WithPrefix(prefix), WithTimeout(5*time.Second))
	for _, a := range allAlgorithms {
		lim := with(PerHour(3), a)
		for i := range 3 {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := l.Allow(ctx, 1, lim.For("k"))
			if err != nil {
				t.Fatalf("%s: Allow after SCRIPT FLUSH: %v", a, err)
			}
			if !r.Allowed || r.Remaining != 2-i {
				t.Fatalf("%s: Allow %d after SCRIPT FLUSH = %+v", a, i, r)
			}
		}
	}
}

// concurrencyLimits: small enough that 64 goroutines saturate them, large
// enough that the bounds are not all rounding.
var concurrencyLimits = []Limit{
	{Algorithm: TokenBucket, Rate: 200, Period: time.Second, Burst: 50},
	{Algorithm: LeakyBucket, Rate: 200, Period: time.Second, Burst: 50},
	{Algorithm: FixedWindow, Rate: 50, Period: 250 * time.Millisecond},
	{Algorithm: SlidingWindow, Rate: 50, Period: 250 * time.Millisecond},
	{Algorithm: SlidingWindowCounter, Rate: 50, Period: 250 * time.Millisecond},
}

// bounds is the most a limit can admit, and the least a saturating load
// should get, between Redis times t0 and t1 (µs).
func bounds(lim Limit, t0, t1 int64) (lo, hi int64) {
	period := lim.Period.Microseconds()
	rate := int64(lim.Rate)
	span := t1 - t0
	switch lim.Algorithm {
	case TokenBucket, LeakyBucket:
		capacity := int64(lim.Capacity())
		hi = capacity + span*rate/period + 1
		lo = capacity + span*rate/period*7/10
	case FixedWindow:
		windows := t1/period - t0/period + 1 // every window [t0, t1] touches
		hi = rate * windows
		lo = rate * max(1, windows-1) * 8 / 10
	case SlidingWindowCounter:
		// At most Rate per window it touches, like a fixed window. Its
		// capacity accrues through a window as the previous one's weight
		// falls, as a sliding window's does, so a load the machine stalls
		// near a boundary loses what it had not yet taken: its lower
		// bound is a sliding window's.
		windows := t1/period - t0/period + 1
		hi = rate * windows
		lo = rate * max(1, span/period) * 7 / 10
	case SlidingWindow:
		hi = rate * (span/period + 1)
		lo = rate * max(1, span/period) * 7 / 10
	}
	return lo, hi
}

// hammer runs workers goroutines spread over limiters, each calling Allow
// on one key until stop is closed, and returns how many were admitted and
// when (process clock, µs) the first admission returned. The workers of
// one Limiter share it, so its batching coalesces their decisions on the
// hot key.
func hammer(t *testing.T, limiters []*Limiter, workers int, lim Limit, stop <-chan struct{}, calls *atomic.Int64) (admitted, first int64) {
	t.Helper()
	var nAdmitted, failed, firstAt atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range workers {
		l := limiters[i%len(limiters)]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := l.Allow(context.Background(), 1, lim.For("shared"))
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if r.Allowed {
					nAdmitted.Add(1)
					firstAt.CompareAndSwap(0, time.Now().UnixMicro())
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d calls failed, the first with: %v", n, firstErr.Load())
	}
	return nAdmitted.Load(), firstAt.Load()
}

// concurrencySuite: at least 64 goroutines over several separate clients on
// one key never get more than the algorithm's bound for the elapsed Redis
// time, and not far less.
func concurrencySuite(t *testing.T, newClient func(t *testing.T) redis.UniversalClient, clients, workers int, d time.Duration, flush func()) {
	for _, c := range []struct {
		lim   Limit
		batch int
	}{
		{concurrencyLimits[0], 1}, {concurrencyLimits[0], 128},
		{concurrencyLimits[1], 128}, {concurrencyLimits[2], 128},
		{concurrencyLimits[3], 1}, {concurrencyLimits[3], 128},
		{concurrencyLimits[4], 128},
	} {
		lim := c.lim
		t.Run(fmt.Sprintf("%s/batch%d", lim.Algorithm, c.batch), func(t *testing.T) {
			cs := make([]redis.UniversalClient, clients)
			for i := range cs {
				cs[i] = newClient(t)
			}
			prefix := realPrefix(t)
			cleanupPrefix(t, cs[0], prefix)
			// Each Limiter's first call (its connection, the script on the
			// key's node) is made before t0, by a Peek, which takes nothing.
			limiters := make([]*Limiter, len(cs))
			for i, rdb := range cs {
				limiters[i] = opsNew(t, rdb, WithPrefix(prefix), WithTimeout(10*time.Second), WithBatching(c.batch))
				if _, err := limiters[i].Peek(context.Background(), lim.For("shared")); err != nil {
					t.Fatalf("warming client %d: %v", i, err)
				}
			}
			stop := make(chan struct{})
			var calls atomic.Int64
			t0 := redisNow(t, cs[0])
			skew := t0 - time.Now().UnixMicro() // Redis' clock less the process'
			// The lower bound counts only the time the load ran, from its
			// first admission (goroutines and connections start late on a
			// busy machine) to stop (a slow last call must not stretch it).
			var tStop atomic.Int64
			timer := time.AfterFunc(d, func() {
				close(stop)
				if tm, err := cs[0].Time(context.Background()).Result(); err == nil {
					tStop.Store(tm.UnixMicro())
				}
			})
			defer timer.Stop()
			if flush != nil {
				// Flush the script cache while the load runs.
				flushAt := time.AfterFunc(d/2, flush)
				defer flushAt.Stop()
			}
			admitted, first := hammer(t, limiters, workers, lim, stop, &calls)
			t1 := redisNow(t, cs[0])
			_, hi := bounds(lim, t0, t1)
			stopped := tStop.Load()
			if stopped == 0 {
				stopped = t1
			}
			began := min(max(t0, first+skew), stopped)
			lo, _ := bounds(lim, began, min(stopped, t1))
			t.Logf("%d workers, %d clients: %d of %d calls admitted in %v of Redis time; bounds [%d, %d]",
				workers, clients, admitted, calls.Load(), time.Duration(t1-t0)*time.Microsecond, lo, hi)
			if admitted > hi {
				t.Errorf("admitted %d, above the bound %d", admitted, hi)
			}
			if admitted < lo {
				t.Errorf("admitted %d, far below what the limit allows (%d..%d): %d calls", admitted, lo, hi, calls.Load())
			}
			checkAllTTLs(t, cs[0], prefix, -1)
		})
	}
}

func TestRealConcurrency(t *testing.T) {
	redistest.Real(t) // skip early without REDIS_URL
	concurrencySuite(t, func(t *testing.T) redis.UniversalClient { return redistest.Real(t) }, 4, 64, 600*time.Millisecond, nil)
}

// TestRealConcurrencyScriptFlush: SCRIPT FLUSH in the middle of the load
// costs no decision an error.
func TestRealConcurrencyScriptFlush(t *testing.T) {
	admin := redistest.Real(t)
	concurrencySuite(t, func(t *testing.T) redis.UniversalClient { return redistest.Real(t) }, 4, 64, 400*time.Millisecond, func() {
		if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
			t.Errorf("SCRIPT FLUSH: %v", err)
		}
	})
}

func TestClusterConcurrency(t *testing.T) {
	admin := redistest.Cluster(t)
	concurrencySuite(t, func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }, 3, 64, 600*time.Millisecond, func() {
		if err := admin.ScriptFlush(context.Background()).Err(); err != nil { // every master
			t.Errorf("SCRIPT FLUSH: %v", err)
		}
	})
}

// TestClusterSlots: on a real cluster, each decision's key is in the slot
// its Limiter groups it in (CLUSTER KEYSLOT agrees with keySlot and slot):
// the caller key's own hash tag's, which is Redis' slot of the caller key
// itself, or the escaped key's; and many caller keys spread over every
// master.
func TestClusterSlots(t *testing.T) {
	rdb := redistest.Cluster(t)
	// A fixed window's key goes when its window ends, and the window is
	// aligned on Redis' clock: a run that crosses an hour's end loses the
	// keys it made before it (CI once lost 18 of 200 to a minute's end), so
	// such a run is done again, under a prefix of its own.
	lim := PerHour(10)
	hour := lim.Period.Microseconds()
	for attempt := 0; ; attempt++ {
		t0 := redisNow(t, rdb)
		prefix := clusterSlots(t, rdb, lim)
		if attempt == 0 && t0/hour != redisNow(t, rdb)/hour {
			continue
		}
		perMaster := scanKeys(t, rdb, prefix)
		total := 0
		for addr, keys := range perMaster {
			t.Logf("master %s: %d keys", addr, len(keys))
			if len(keys) == 0 {
				t.Errorf("master %s holds none of the caller keys", addr)
			}
			total += len(keys)
		}
		perCaller := 0
		for _, a := range allAlgorithms {
			perCaller += len(algorithms[a].suffixes)
		}
		if want := slotCallers * perCaller; total != want {
			t.Errorf("%d keys over %d masters, want %d", total, len(perMaster), want)
		}
		checkAllTTLs(t, rdb, prefix, slotCallers*perCaller)
		return
	}
}

const slotCallers = 200

// clusterSlots decides once for each of slotCallers keys under every
// algorithm, checks that each state key lies in the slot Redis gives it and
// the Limiter groups it in, and returns the keys' prefix.
func clusterSlots(t *testing.T, rdb redis.UniversalClient, lim Limit) string {
	ctx := context.Background()
	prefix := realPrefix(t)
	cleanupPrefix(t, rdb, prefix)
	l := opsNew(t, rdb, WithPrefix(prefix), WithTimeout(5*time.Second))
	for i := range slotCallers {
		key := fmt.Sprintf("user:%d", i)
		if i%4 == 1 {
			key = fmt.Sprintf("{user}:%d", i) // pinned to the slot of "user", as Redis pins it
		}
		for _, a := range allAlgorithms {
			if r, err := l.Allow(ctx, 1, with(lim, a).For(key)); err != nil || !r.Allowed {
				t.Fatalf("Allow(%q, %s) = %+v, %v", key, a, r, err)
			}
			rk := redisKey(l.prefix, key, a)
			got, err := rdb.ClusterKeySlot(ctx, rk).Result()
			if err != nil {
				t.Fatal(err)
			}
			grouped := slot(slotTag(escapeTag(key)))
			if want := keySlot(rk); int(got) != want || want != grouped {
				t.Fatalf("CLUSTER KEYSLOT %q = %d, keySlot %d, the slot the Limiter groups it in %d", rk, got, want, grouped)
			}
			if i%4 == 1 && grouped != keySlot(key) || i%4 != 1 && grouped != keySlotWhole(escapeTag(key)) {
				t.Fatalf("key %q: slot %d, want Redis' slot of the caller key %d if it has a hash tag, else the escaped key's %d", key, grouped, keySlot(key), keySlotWhole(escapeTag(key)))
			}
		}
	}
	return prefix
}
