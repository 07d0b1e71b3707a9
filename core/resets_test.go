package core

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestResetReachesEveryInstance backs Reset's "every Limiter under the
// same prefix forgets": an instance that caches a denial (or leases
// units) answers from its own memory, so a Reset made elsewhere (the
// redlimit command) left it refusing the key for the denial's whole
// RetryAfter, an hour here.
func TestResetReachesEveryInstance(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	prefix := opsPrefix(t)
	cached := opsNew(t, rdb, WithPrefix(prefix), opsPatient, WithDenyCache(100))
	leased := opsNew(t, rdb, WithPrefix(prefix), opsPatient, WithLeases(0.5))
	operator := opsNew(t, rdb, WithPrefix(prefix), opsPatient)
	limit := PerHour(4)
	for range 4 {
		if r, err := leased.Allow(ctx, 1, limit.For("leased")); err != nil || !r.Allowed {
			t.Fatalf("leased: %+v, %v", r, err)
		}
	}
	for range 4 {
		if r, err := cached.Allow(ctx, 1, limit.For("abuser")); err != nil || !r.Allowed {
			t.Fatalf("abuser: %+v, %v", r, err)
		}
	}
	for range 2 {
		if r, err := cached.Allow(ctx, 1, limit.For("abuser")); err != nil || r.Allowed {
			t.Fatalf("abuser, over: %+v, %v; want denied", r, err)
		}
	}
	if r, _ := leased.Allow(ctx, 1, limit.For("leased")); r.Allowed {
		t.Fatalf("leased, over: %+v; want denied", r)
	}
	for _, key := range []string{"abuser", "leased"} {
		if err := operator.Reset(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		l   *Limiter
		key string
	}{{cached, "abuser"}, {leased, "leased"}} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := tt.l.Allow(ctx, 1, limit.For(tt.key))
			if err == nil && r.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after the Reset: %+v, %v (cached %v); want admitted once the message arrives", tt.key, r, err, r.Cached)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
		}
	}
}

// TestResetListenerEndsWithLimiter: Close ends the subscription, and a
// Limiter without local state of keys opens none.
func TestResetListenerEndsWithLimiter(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	plain := opsNew(t, rdb, opsPatient)
	_ = plain
	l := opsNew(t, rdb, opsPatient, WithDenyCache(10))
	channel := resetChannel("ratelimit")
	deadline := time.Now().Add(10 * time.Second)
	for mr.PubSubNumSub(channel)[channel] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("subscribers: %v; want the one Limiter with a deny cache", mr.PubSubNumSub(channel))
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = l.Close()
	for mr.PubSubNumSub(channel)[channel] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("subscribers after Close: %v; want none", mr.PubSubNumSub(channel))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestResetMissedWhileCutIsForgotten backs the bound of resets.go: a
// Reset published while an instance's subscription was cut is honoured
// when it is subscribed again, which drops all its cached denials.
func TestResetMissedWhileCutIsForgotten(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	prefix := opsPrefix(t)
	cached := opsNew(t, rdb, WithPrefix(prefix), opsPatient, WithDenyCache(100))
	channel := resetChannel(prefix)
	waitSubscribed := func() {
		deadline := time.Now().Add(10 * time.Second)
		for mr.PubSubNumSub(channel)[channel] != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the Limiter never subscribed")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitSubscribed()
	limit := PerHour(1)
	for i := range 2 {
		if r, err := cached.Allow(ctx, 1, limit.For("k")); err != nil || r.Allowed != (i == 0) {
			t.Fatalf("request %d: %+v, %v", i, r, err)
		}
	}
	// The message is lost: the state goes while nobody listens.
	mr.Close()
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	mr.FlushAll()
	waitSubscribed()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := cached.Allow(ctx, 1, limit.For("k"))
		if err == nil && r.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the subscription came back: %+v, %v; want the denial forgotten", r, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
