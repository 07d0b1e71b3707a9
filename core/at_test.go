package core

import (
	"context"
	"testing"
	"time"
)

// TestResultAtIsTheDecisionsInstant backs Result.At: a decision Redis
// dates carries Redis' TIME, not the Limiter's clock (here the process'
// clock, months away from the test's Redis); one made here, or by a
// FixedWindow over a Period alone, carries the Limiter's clock.
func TestResultAtIsTheDecisionsInstant(t *testing.T) {
	ctx := context.Background()
	mr, _, l := miniLimiter(t)
	redisNow := time.Date(2031, 3, 4, 5, 6, 7, 890123000, time.UTC)
	mr.SetTime(redisNow)
	rate := PerMinute(1)
	for _, a := range []Algorithm{TokenBucket, SlidingWindow, SlidingWindowCounter, LeakyBucket, Concurrency} {
		lim := with(rate, a)
		for i, want := range []bool{true, false} { // an admission, then a denial
			r, err := l.Allow(ctx, 1, lim.For("at"))
			if err != nil || r.Allowed != want || !r.At.Equal(redisNow) {
				t.Errorf("%v, request %d: Allowed %v At %v, %v; want Allowed %v At Redis' %v", a, i, r.Allowed, r.At, err, want, redisNow)
			}
		}
	}
	r, err := l.Allow(ctx, 1, with(rate, TokenBucket).For("at2"), with(rate, SlidingWindow).For("at2"))
	if err != nil || !r.At.Equal(redisNow) || !r.Rules[1].At.Equal(redisNow) {
		t.Errorf("two Rules: At %v, %v; want Redis' %v", r.At, err, redisNow)
	}
	before := time.Now()
	r, err = l.Allow(ctx, 1, with(rate, FixedWindow).For("at"))
	if after := time.Now(); err != nil || r.At.Before(before) || r.At.After(after) {
		t.Errorf("FixedWindow: At %v, %v; want the Limiter's clock, within [%v, %v]", r.At, err, before, after)
	}
}

// TestCachedDenialAtMovesWithItsWaits: a denial the deny cache answers
// is dated so that At + RetryAfter is the instant Redis named: the time
// since Redis' answer (on the process' clock) moves At as much as it
// shortens RetryAfter, so a reset header stays put.
func TestCachedDenialAtMovesWithItsWaits(t *testing.T) {
	ctx := context.Background()
	mr, rdb, _ := miniLimiter(t)
	mr.SetTime(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	l := opsNew(t, rdb, WithPrefix(opsPrefix(t)), opsPatient, WithDenyCache(10))
	lim := PerHour(1)
	if _, err := l.Allow(ctx, 1, lim.For("k")); err != nil {
		t.Fatal(err)
	}
	denied, err := l.Allow(ctx, 1, lim.For("k"))
	if err != nil || denied.Allowed || denied.Cached {
		t.Fatalf("second request: %+v, %v; want Redis' denial", denied, err)
	}
	cached, err := l.Allow(ctx, 1, lim.For("k"))
	if err != nil || !cached.Cached {
		t.Fatalf("third request: %+v, %v; want the cache's denial", cached, err)
	}
	if !cached.At.After(denied.At) || !cached.At.Add(cached.RetryAfter).Equal(denied.At.Add(denied.RetryAfter)) {
		t.Errorf("cached: At %v + RetryAfter %v; want after Redis' At %v, ending at its %v",
			cached.At, cached.RetryAfter, denied.At, denied.At.Add(denied.RetryAfter))
	}
}
