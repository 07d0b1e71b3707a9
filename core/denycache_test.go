package core

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestDenyCacheAnswersLocally: after Redis denies a key, further requests
// for it (same Limit, same or larger cost) are denied locally, Cached, with
// no Redis command, and with the headers Redis gave.
func TestDenyCacheAnswersLocally(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	var count opsCounter
	rdb.AddHook(&count)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient, WithDenyCache(100))
	limit := PerHour(2)
	for i := range 2 {
		if r, err := l.Allow(ctx, 1, limit.For("abuser")); err != nil || !r.Allowed {
			t.Fatalf("request %d: %+v, %v; want admitted", i+1, r, err)
		}
	}
	deniedAt := time.Now()
	denied, err := l.Allow(ctx, 1, limit.For("abuser"))
	if err != nil || denied.Allowed || denied.Cached {
		t.Fatalf("third request: %+v, %v; want denied by Redis", denied, err)
	}
	before := count.cmds.Load()
	for i, n := range []int{1, 1, 1} {
		r, err := l.Allow(ctx, n, limit.For("abuser"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed || !r.Cached {
			t.Fatalf("cached request %d (n=%d): %+v; want denied from the cache", i, n, r)
		}
		if r.Remaining != denied.Remaining {
			t.Errorf("cached request %d: Remaining %d, want Redis' %d", i, r.Remaining, denied.Remaining)
		}
		if r.RetryAfter <= 0 || r.RetryAfter > denied.RetryAfter {
			t.Errorf("cached request %d: RetryAfter %v, want 0 < RetryAfter <= %v", i, r.RetryAfter, denied.RetryAfter)
		}
		if r.ResetAfter < r.RetryAfter || r.ResetAfter > denied.ResetAfter {
			t.Errorf("cached request %d: ResetAfter %v, want RetryAfter (%v) <= ResetAfter <= %v", i, r.ResetAfter, r.RetryAfter, denied.ResetAfter)
		}
	}
	if got := count.cmds.Load() - before; got != 0 {
		t.Errorf("cached denials sent %d Redis commands, want 0", got)
	}
	// A larger cost cannot fit where a smaller did not: the cache answers
	// it too, with its own longer wait, never earlier than Redis' (the
	// same Limiter without the cache asks Redis).
	r, err := l.Allow(ctx, 2, limit.For("abuser"))
	if err != nil || r.Allowed || !r.Cached {
		t.Fatalf("AllowN(2) after a cached denial of 1: %+v, %v; want denied from the cache", r, err)
	}
	plain := opsNew(t, rdb, WithPrefix(l.prefix), opsPatient)
	exact, err := plain.Allow(ctx, 2, limit.For("abuser"))
	if err != nil || exact.Allowed {
		t.Fatalf("AllowN(2) asking Redis: %+v, %v", exact, err)
	}
	// (miniredis' clock stands still, the cache's does not: what passed
	// since the denial is not early.)
	if gone := time.Since(deniedAt); r.RetryAfter+gone < exact.RetryAfter || r.RetryAfter > exact.RetryAfter+time.Second {
		t.Errorf("cached AllowN(2) waits %v, Redis says %v: want no earlier, and close", r.RetryAfter, exact.RetryAfter)
	}
	// Peek is never answered from the cache.
	if r, err := l.Peek(ctx, limit.For("abuser")); err != nil || r.Cached {
		t.Errorf("Peek = %+v, %v; want an answer from Redis", r, err)
	}
	// Other keys are not affected.
	if r, err := l.Allow(ctx, 1, limit.For("someone-else")); err != nil || !r.Allowed || r.Cached {
		t.Errorf("another key: %+v, %v; want admitted by Redis", r, err)
	}
}

// TestDenyCacheNeverDeniesWhatRedisAdmits: a smaller cost, another Limit
// and a Reset all go to Redis, which admits them.
func TestDenyCacheNeverDeniesWhatRedisAdmits(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// setup brings the key to a cached denial; then is the request
		// that must reach Redis and be admitted.
		setup func(t *testing.T, l *Limiter)
		then  func(l *Limiter) (Result, error)
	}{
		{
			name: "smaller cost",
			setup: func(t *testing.T, l *Limiter) {
				opsMustAllowN(t, l, "k", PerHour(10), 8)
				opsMustDenyN(t, l, "k", PerHour(10), 5)
			},
			then: func(l *Limiter) (Result, error) { return l.Allow(ctx, 2, PerHour(10).For("k")) },
		},
		{
			name: "another limit",
			setup: func(t *testing.T, l *Limiter) {
				sw := Limit{Algorithm: SlidingWindow, Rate: 2, Period: time.Hour}
				opsMustAllowN(t, l, "k", sw, 2)
				opsMustDenyN(t, l, "k", sw, 1)
			},
			then: func(l *Limiter) (Result, error) {
				return l.Allow(ctx, 1, Limit{Algorithm: SlidingWindow, Rate: 5, Period: time.Hour}.For("k"))
			},
		},
		{
			name: "another algorithm",
			setup: func(t *testing.T, l *Limiter) {
				opsMustAllowN(t, l, "k", PerHour(1), 1)
				opsMustDenyN(t, l, "k", PerHour(1), 1)
			},
			then: func(l *Limiter) (Result, error) {
				return l.Allow(ctx, 1, Limit{Algorithm: FixedWindow, Rate: 1, Period: time.Hour}.For("k"))
			},
		},
		{
			name: "reset",
			setup: func(t *testing.T, l *Limiter) {
				opsMustAllowN(t, l, "k", PerHour(1), 1)
				opsMustDenyN(t, l, "k", PerHour(1), 1)
				if err := l.Reset(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			},
			then: func(l *Limiter) (Result, error) { return l.Allow(ctx, 1, PerHour(1).For("k")) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			var count opsCounter
			rdb.AddHook(&count)
			l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient, WithDenyCache(100))
			tt.setup(t, l)
			before := count.cmds.Load()
			r, err := tt.then(l)
			if err != nil || !r.Allowed || r.Cached {
				t.Errorf("got %+v, %v; want admitted by Redis", r, err)
			}
			if got := count.cmds.Load() - before; got == 0 {
				t.Errorf("the request sent no Redis command; want it to reach Redis")
			}
		})
	}
}

// TestDenyCacheForgetsAcrossLimits: one key keeps one state whatever its
// Limit, so a call under a generous Limit can refill what a strict one
// spent; a denial cached under the strict Limit must not outlive that call.
func TestDenyCacheForgetsAcrossLimits(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	redistest.SetTime(mr, redistest.Epoch)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient, WithDenyCache(100))
	strict := Limit{Rate: 2, Period: time.Hour}
	generous := Limit{Rate: 10, Period: time.Second, Burst: 2}
	opsMustAllowN(t, l, "k", strict, 2)
	opsMustDenyN(t, l, "k", strict, 1) // cached for half an hour
	redistest.SetTime(mr, redistest.Epoch.Add(time.Second))
	opsMustAllowN(t, l, "k", generous, 1) // refilled at 10/s: 1 token left
	want, err := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient).Peek(ctx, strict.For("k"))
	if err != nil || !want.Allowed {
		t.Fatalf("Redis' own answer under the strict Limit: %+v, %v; want admitted", want, err)
	}
	if r, err := l.Allow(ctx, 1, strict.For("k")); err != nil || !r.Allowed || r.Cached {
		t.Errorf("under the strict Limit again: %+v, %v; want admitted by Redis, as Redis would", r, err)
	}
}

// opsMustAllowN and opsMustDenyN make one decision that must go the given
// way, from Redis.
func opsMustAllowN(t *testing.T, l *Limiter, key string, limit Limit, n int) {
	t.Helper()
	if r, err := l.Allow(context.Background(), n, limit.For(key)); err != nil || !r.Allowed {
		t.Fatalf("AllowN(%q, n=%d) = %+v, %v; want admitted", key, n, r, err)
	}
}

func opsMustDenyN(t *testing.T, l *Limiter, key string, limit Limit, n int) {
	t.Helper()
	r, err := l.Allow(context.Background(), n, limit.For(key))
	if err != nil || r.Allowed || r.Cached {
		t.Fatalf("AllowN(%q, n=%d) = %+v, %v; want denied by Redis", key, n, r, err)
	}
	r, err = l.Allow(context.Background(), n, limit.For(key))
	if err != nil || r.Allowed || !r.Cached {
		t.Fatalf("repeated AllowN(%q, n=%d) = %+v, %v; want denied from the cache", key, n, r, err)
	}
}

// TestDenyCacheExpiresWithRetryAfter: requests are answered from the cache
// only while Redis would still deny them; once RetryAfter has passed they
// reach Redis again and are admitted. The cache expires by the wall clock,
// so this polls (every 2ms) on a Redis whose clock follows it.
func TestDenyCacheExpiresWithRetryAfter(t *testing.T) {
	for _, be := range opsBackends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.open(t)
			l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient, WithDenyCache(100))
			limit := Limit{Rate: 1, Period: 100 * time.Millisecond}
			opsMustAllowN(t, l, "k", limit, 1)
			denied, err := l.Allow(ctx, 1, limit.For("k"))
			sent := time.Now()
			if err != nil || denied.Allowed || denied.Cached {
				t.Fatalf("second request: %+v, %v; want denied by Redis", denied, err)
			}
			// Redis decided before sent, so it admits again by
			// sent+RetryAfter at the latest: no cached denial after that.
			admitsAt := sent.Add(denied.RetryAfter)
			cached := 0
			giveUp := sent.Add(5 * time.Second) // whatever Redis answers meanwhile
			for {
				at := time.Now()
				r, err := l.Allow(ctx, 1, limit.For("k"))
				returned := time.Now()
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case r.Cached && !at.Before(admitsAt):
					t.Fatalf("cached denial %v after Redis' RetryAfter (%v) ended", at.Sub(admitsAt), denied.RetryAfter)
				case r.Cached:
					cached++
				case r.Allowed:
					if late := time.Since(admitsAt); late > time.Second {
						t.Errorf("admitted %v after RetryAfter ended, want within 1s", late)
					}
					if cached == 0 {
						t.Errorf("no request was answered from the cache during RetryAfter %v", denied.RetryAfter)
					}
					return
				default:
					// Denied by Redis again (the cache ended a little
					// before Redis' wait did): that denial is cached anew.
					sent, admitsAt = returned, returned.Add(r.RetryAfter)
				}
				if time.Since(sent) > time.Second || time.Now().After(giveUp) {
					t.Fatalf("not admitted within 1s of a %v RetryAfter", denied.RetryAfter)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
}

// TestDenyCacheBoundedMemory: the cache never holds more than maxKeys keys,
// and a key dropped from it is simply decided by Redis again.
func TestDenyCacheBoundedMemory(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	const maxKeys = 3
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient, WithDenyCache(maxKeys))
	limit := PerHour(1)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		opsMustAllowN(t, l, k, limit, 1)
		if r, err := l.Allow(ctx, 1, limit.For(k)); err != nil || r.Allowed {
			t.Fatalf("%s: %+v, %v; want denied", k, r, err)
		}
		l.denied.mu.Lock()
		size := len(l.denied.m)
		l.denied.mu.Unlock()
		if size > maxKeys {
			t.Fatalf("after denying %q the cache holds %d keys, want <= %d", k, size, maxKeys)
		}
	}
	cached := 0
	for _, k := range keys {
		r, err := l.Allow(ctx, 1, limit.For(k))
		if err != nil || r.Allowed {
			t.Errorf("%s: %+v, %v; want still denied (from the cache or from Redis)", k, r, err)
		}
		if r.Cached {
			cached++
		}
	}
	if cached > maxKeys {
		t.Errorf("%d keys answered from the cache, want <= %d", cached, maxKeys)
	}
}

func TestDenyCacheOff(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)))
	opsMustAllowN(t, l, "k", PerHour(1), 1)
	for range 3 {
		if r, err := l.Allow(ctx, 1, PerHour(1).For("k")); err != nil || r.Allowed || r.Cached {
			t.Errorf("without a deny cache: %+v, %v; want denied by Redis", r, err)
		}
	}
}

// TestDenyCacheAbusiveTraffic measures Redis commands under abusive traffic
// on one key: a token bucket of 10 per second, 8 goroutines sending 250
// requests each, one every 4ms (2000 requests over ~1s, ~95% denied), once
// without and once with the deny cache, on the real Redis. The cache must
// cut Redis commands at least 10x, and admit as much as Redis alone.
func TestDenyCacheAbusiveTraffic(t *testing.T) {
	rdb := redistest.Real(t)
	var count opsCounter
	rdb.AddHook(&count)
	limit := PerSecond(10)
	const (
		goroutines = 8
		perG       = 250
		every      = 4 * time.Millisecond
	)
	run := func(opts ...Option) (cmds int64, admitted, cached, total int, elapsed time.Duration) {
		l := opsNew(t, rdb, append([]Option{WithPrefix(opsPrefix(t)), WithTimeout(time.Second)}, opts...)...)
		ctx := context.Background()
		// Load the script, so both runs count decisions only.
		if _, err := l.Peek(ctx, limit.For("warm-up")); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		before := count.cmds.Load()
		start := time.Now()
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(every)
				defer tick.Stop()
				for range perG {
					<-tick.C
					r, err := l.Allow(ctx, 1, limit.For("abuser"))
					mu.Lock()
					total++
					if err != nil {
						t.Error(err)
					}
					if r.Allowed {
						admitted++
					}
					if r.Cached {
						cached++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return count.cmds.Load() - before, admitted, cached, total, time.Since(start)
	}
	plainCmds, plainAdmitted, _, total, plainElapsed := run()
	cacheCmds, cacheAdmitted, cached, _, cacheElapsed := run(WithDenyCache(1000))
	ratio := float64(plainCmds) / float64(max(cacheCmds, 1))
	t.Logf("%d requests: without cache %d Redis commands, %d admitted, %v; with cache %d commands, %d admitted, %d cached, %v; ratio %.1fx",
		total, plainCmds, plainAdmitted, plainElapsed.Round(time.Millisecond),
		cacheCmds, cacheAdmitted, cached, cacheElapsed.Round(time.Millisecond), ratio)
	if ratio < 10 {
		t.Errorf("the deny cache cut Redis commands %.1fx (%d -> %d), want >= 10x", ratio, plainCmds, cacheCmds)
	}
	if denied := 1 - float64(plainAdmitted)/float64(total); denied < 0.9 {
		t.Errorf("only %.0f%% denied without the cache: not abusive traffic", 100*denied)
	}
	// The cache denies only while Redis would: it admits about as many.
	if bound := 10 + int(10*cacheElapsed.Seconds()); cacheAdmitted > bound {
		t.Errorf("with the cache %d admitted, above the limit's bound %d", cacheAdmitted, bound)
	}
	// Each run admits what the bucket refills while it lasts, and a loaded
	// machine stretches one run more than the other (3.7 s against 1.9 s
	// seen): compare each with its own bound.
	if floor := (10 + int(10*cacheElapsed.Seconds())) * 8 / 10; cacheAdmitted < floor {
		t.Errorf("with the cache %d admitted in %v, below 80%% of the limit's %d: the cache denied what Redis would admit (without it: %d in %v)",
			cacheAdmitted, cacheElapsed, 10+int(10*cacheElapsed.Seconds()), plainAdmitted, plainElapsed)
	}
}

// TestDenyCacheStaleAfterAnAdmission backs WithDenyCache's "nor reports a
// wait shorter than Redis would": a cost the cached denial does not answer
// (a smaller one) goes to Redis and is admitted, which leaves the key
// less; the denial cached before it would now be early, so the next
// request of the denied cost goes to Redis again and gets Redis' wait.
func TestDenyCacheStaleAfterAnAdmission(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	var count opsCounter
	rdb.AddHook(&count)
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient, WithDenyCache(100))
	limit := PerHour(10) // one unit per 6 minutes
	opsMustAllowN(t, l, "k", limit, 8)
	opsMustDenyN(t, l, "k", limit, 5) // 3 short: 18 minutes, cached
	opsMustAllowN(t, l, "k", limit, 2)
	before := count.cmds.Load()
	r, err := l.Allow(ctx, 5, limit.For("k"))
	if err != nil || r.Allowed || r.Cached || count.cmds.Load() == before {
		t.Fatalf("AllowN(5) after 2 were admitted: %+v, %v (%d commands); want a denial from Redis", r, err, count.cmds.Load()-before)
	}
	if want := 30 * time.Minute; r.RetryAfter != want {
		t.Errorf("AllowN(5) with none left: RetryAfter %v, want Redis' %v", r.RetryAfter, want)
	}
}

// TestDenyCacheMissesAnotherInstancesRefund backs WithDenyCache's "what
// another instance gives back is not seen, so the key may stay denied
// here until its RetryAfter ends" (issue 35 item 9: the godoc said it
// never denies what Redis would admit). Instance b refunds a unit of the
// key a has denied: Redis would admit, a's cache still denies.
func TestDenyCacheMissesAnotherInstancesRefund(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	prefix := WithPrefix(opsPrefix(t))
	a := opsNew(t, rdb, prefix, opsPatient, WithDenyCache(100))
	b := opsNew(t, rdb, prefix, opsPatient)
	rule := PerHour(2).For("login")
	taken, err := b.Allow(ctx, 1, rule)
	if err != nil || !taken.Allowed {
		t.Fatal(taken, err)
	}
	if r, err := a.Allow(ctx, 1, rule); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if r, err := a.Allow(ctx, 1, rule); err != nil || r.Allowed || r.Cached {
		t.Fatalf("a's third request: %+v, %v; want denied by Redis", r, err)
	}
	if err := b.Refund(ctx, taken); err != nil {
		t.Fatal(err)
	}
	if p, err := b.Peek(ctx, rule); err != nil || !p.Allowed {
		t.Fatalf("Redis after b's refund: %+v, %v; want it to admit", p, err)
	}
	if r, err := a.Allow(ctx, 1, rule); err != nil || r.Allowed || !r.Cached {
		t.Errorf("a after b's refund: %+v, %v; want denied from its cache", r, err)
	}
}
