package core

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// featureSuite is what the features beyond request rates must do on a
// real Redis and a Redis Cluster as they do on miniredis: permits in
// flight that come back and lapse, costs settled after the fact, calendar
// months on Redis' clock, and a rate layer beside a permit layer on one
// key (two state keys in one slot). The Redis clock runs, so it checks
// bounds; every key it leaves has a TTL.
func featureSuite(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	newLimiter := func(t *testing.T) (*Limiter, string) {
		prefix := realPrefix(t)
		cleanupPrefix(t, rdb, prefix)
		return opsNew(t, rdb, WithPrefix(prefix), WithTimeout(5*time.Second), WithBreaker(0, 0)), prefix
	}

	t.Run("in flight", func(t *testing.T) {
		l, prefix := newLimiter(t)
		jobs := InFlight(2)
		a, errA := l.Allow(ctx, 1, jobs.For("k"))
		b, errB := l.Allow(ctx, 1, jobs.For("k"))
		c, errC := l.Allow(ctx, 1, jobs.For("k"))
		if errA != nil || errB != nil || errC != nil || !a.Allowed || !b.Allowed || c.Allowed {
			t.Fatalf("three takes of 2 permits: %v %v %v (%v %v %v); want two admitted, the third refused", a, b, c, errA, errB, errC)
		}
		if c.RetryAfter <= 0 || c.RetryAfter > jobs.Period {
			t.Errorf("refused permit: RetryAfter %v, want within (0, %v]", c.RetryAfter, jobs.Period)
		}
		if err := l.Refund(ctx, a); err != nil {
			t.Fatal(err)
		}
		if d, err := l.Allow(ctx, 1, jobs.For("k")); err != nil || !d.Allowed {
			t.Fatalf("a take after a permit came back: %+v, %v; want admitted", d, err)
		}
		if r, err := l.Renew(ctx, b); err != nil || !r.Allowed {
			t.Fatalf("Renew of a held permit: %+v, %v; want kept", r, err)
		}
		checkAllTTLs(t, rdb, prefix, 1)

		// A holder that dies gives nothing back: its permit lapses after
		// the Limit's Period, on Redis' clock.
		short := Limit{Algorithm: Concurrency, Rate: 1, Period: 300 * time.Millisecond}
		taken := time.Now() // before Redis decides: no reply delay makes the lease look short
		if r, err := l.Allow(ctx, 1, short.For("lapse")); err != nil || !r.Allowed {
			t.Fatalf("take: %+v, %v", r, err)
		}
		for {
			r, err := l.Allow(ctx, 1, short.For("lapse"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				if took := time.Since(taken); took < short.Period-5*time.Millisecond { // (Redis' clock and ours)
					t.Errorf("a dead holder's permit came back after %v, before its %v lease", took, short.Period)
				}
				break
			}
			if time.Since(taken) > short.Period+5*time.Second {
				t.Fatalf("a dead holder's permit still held %v after it was taken (lease %v)", time.Since(taken), short.Period)
			}
			time.Sleep(min(r.RetryAfter, 50*time.Millisecond))
		}
	})

	t.Run("settle", func(t *testing.T) {
		l, prefix := newLimiter(t)
		budget := Limit{Rate: 100, Period: time.Minute}
		taken, err := l.Allow(ctx, 10, budget.For("k"))
		if err != nil || !taken.Allowed {
			t.Fatalf("AllowN(10): %+v, %v", taken, err)
		}
		if r, err := l.Settle(ctx, taken, 2); err != nil || r.Remaining < 98 {
			t.Fatalf("Settle(10 taken, 2 used): %+v, %v; want 8 back (98 or more left)", r, err)
		}
		taken, err = l.Allow(ctx, 1, budget.For("k"))
		if err != nil || !taken.Allowed {
			t.Fatalf("Allow: %+v, %v", taken, err)
		}
		t0 := redisNow(t, rdb)
		if _, err := l.Settle(ctx, taken, 250); err != nil {
			t.Fatal(err)
		}
		r, err := l.Allow(ctx, 1, budget.For("k"))
		elapsed := time.Duration(redisNow(t, rdb)-t0) * time.Microsecond
		if err != nil || r.Allowed {
			t.Fatalf("after a debt: %+v, %v; want refused", r, err)
		}
		// About 97 left, 249 charged beyond: 152 below empty, and one unit
		// more to pass, at 0.6 s a unit.
		want := 153 * 600 * time.Millisecond
		if r.RetryAfter < want-time.Second-elapsed || r.RetryAfter > want {
			t.Errorf("RetryAfter after the debt %v, want about %v", r.RetryAfter, want)
		}
		checkAllTTLs(t, rdb, prefix, 1)
	})

	t.Run("calendar month", func(t *testing.T) {
		l, prefix := newLimiter(t)
		quota := PerMonth(3, time.UTC)
		var r Result
		var now time.Time
		for _, key := range []string{"k", "k-next-month"} {
			before := time.UnixMicro(redisNow(t, rdb)).UTC()
			if r, err := l.Allow(ctx, 3, quota.For(key)); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Fatalf("AllowN(3) of 3 a month: %+v, %v", r, err)
			}
			var err error
			r, err = l.Allow(ctx, 1, quota.For(key))
			now = time.UnixMicro(redisNow(t, rdb)).UTC()
			if err != nil {
				t.Fatal(err)
			}
			if now.Month() == before.Month() {
				break // (else a month began meanwhile: again, on a fresh key)
			}
		}
		if r.Allowed {
			t.Fatalf("the 4th in a month: %+v; want refused", r)
		}
		next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		if at := now.Add(r.RetryAfter); at.Before(next.Add(-5*time.Second)) || at.After(next.Add(time.Second)) {
			t.Errorf("RetryAfter %v points at %v, want the 1st of next month, %v", r.RetryAfter, at, next)
		}
		checkAllTTLs(t, rdb, prefix, -1)
	})

	t.Run("rate and in flight layers", func(t *testing.T) {
		l, prefix := newLimiter(t)
		layers := []Rule{PerMinute(100).For("k"), InFlight(1).For("k")}
		first, err := l.Allow(ctx, 1, layers...)
		if err != nil || !first.Allowed || !first.Rules[0].Allowed || !first.Rules[1].Allowed {
			t.Fatalf("first: %+v, %v", first, err)
		}
		second, err := l.Allow(ctx, 1, layers...)
		if err != nil || second.Allowed || !second.Rules[0].Allowed || second.Rules[1].Allowed {
			t.Fatalf("second while the first holds the permit: %+v, %v; want the rate layer alone to admit", second, err)
		}
		if err := l.Refund(ctx, first); err != nil {
			t.Fatal(err)
		}
		third, err := l.Allow(ctx, 1, layers...)
		if err != nil || !third.Allowed || !third.Rules[0].Allowed || !third.Rules[1].Allowed {
			t.Fatalf("after the first gave its permit back: %+v, %v; want admitted", third, err)
		}
		checkAllTTLs(t, rdb, prefix, 2)
	})
}

func TestRealFeatures(t *testing.T) {
	featureSuite(t, redistest.Real(t))
}

func TestClusterFeatures(t *testing.T) {
	featureSuite(t, redistest.Cluster(t))
}
