package core

import (
	"context"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// A Reset deletes a key's state in Redis, but a Limiter with WithDenyCache
// or WithLeases also keeps some of it in process: a denial it answers
// locally until its RetryAfter (half an hour, say), units leased from the
// old state. So Reset publishes the key's tag on a channel of the prefix,
// and every such Limiter listens there and forgets the tag's local state
// when the message arrives: on every instance whose subscription is up,
// within Redis' delivery of one message. An instance whose subscription
// was cut may have missed one, so when it is subscribed again (go-redis
// reconnects it) it forgets all its local state of keys: a reset never
// outlives the reconnection that follows it. TestResetReachesEveryInstance
// fails without this.

// resetChannel is the channel Resets under prefix are announced on.
func resetChannel(prefix string) string { return prefix + ":resets" }

// announceReset tells every listening Limiter under l's prefix that tag
// was reset. In a Cluster, PUBLISH reaches the subscribers of every node.
func (l *Limiter) announceReset(ctx context.Context, tag string) error {
	if l.denied != nil || l.leases != nil {
		l.echoes.expect(tag, time.Now())
	}
	_, err := l.do(ctx, func(ctx context.Context) (any, error) {
		return nil, l.rdb.Publish(ctx, resetChannel(l.prefix), tag).Err()
	})
	return err
}

// echoes are the Resets this Limiter announced and has already applied.
// Its own message comes back after Reset returned, when the caller may
// have taken a fresh lease: forgetting that lease would lose units Redis
// counted (TestLeaseReset fails without this). An echo that never comes
// (the subscription was down) is expected for echoWait at most, so a
// later operator's reset of the same key is not swallowed.
type echoes struct {
	mu sync.Mutex
	m  map[string]time.Time // tag: until when its echo is expected
}

// echoWait is how long an echo is expected; echoMax bounds how many are,
// since a handler may Reset on every request (a login that succeeded).
const (
	echoWait = 5 * time.Second
	echoMax  = 1024
)

func (e *echoes) expect(tag string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = make(map[string]time.Time)
	}
	if len(e.m) >= echoMax { // sweep only when full: a Reset costs O(1) amortised
		for t, until := range e.m {
			if now.After(until) {
				delete(e.m, t)
			}
		}
	}
	if _, ok := e.m[tag]; ok || len(e.m) < echoMax {
		e.m[tag] = now.Add(echoWait)
	}
	// Else the echo is not expected and forgets this key's fresh lease
	// when it comes: units lost, the strict side, never more admitted.
}

// own reports whether a message naming tag is the echo of this Limiter's
// own Reset, and stops expecting it.
func (e *echoes) own(tag string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	until, ok := e.m[tag]
	delete(e.m, tag)
	return ok && !now.After(until)
}

// listenResets subscribes l to its prefix's resets when it keeps local
// state of keys, and returns stop joined with what ends the subscription.
// The listener holds l weakly, so that an unclosed Limiter is still
// collected, and ends with it.
func listenResets(l *Limiter, stop func()) func() {
	if l.denied == nil && l.leases == nil {
		return stop
	}
	ctx, cancel := context.WithCancel(context.Background())
	ps := l.rdb.Subscribe(ctx, resetChannel(l.prefix))
	end := func() { cancel(); _ = ps.Close() }
	cleanup := runtime.AddCleanup(l, func(end func()) { end() }, end)
	go receiveResets(ctx, ps, weak.Make(l))
	return func() {
		cleanup.Stop()
		end()
		stop()
	}
}

// receiveResets forgets what each message names, and everything on each
// subscription after the first, until ctx ends or the Limiter is
// collected. (The first comes while a new Limiter takes its first leases:
// dropping them would lose their units for nothing.)
func receiveResets(ctx context.Context, ps *redis.PubSub, ref weak.Pointer[Limiter]) {
	backoff := 10 * time.Millisecond
	subscribed := false
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		l := ref.Value()
		if l == nil {
			return
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && subscribed {
				l.forgetAll()
			}
			subscribed = subscribed || m.Kind == "subscribe"
		case *redis.Message:
			if !l.echoes.own(m.Payload, time.Now()) {
				l.forget(m.Payload)
			}
		}
		l = nil
		if err == nil {
			backoff = 10 * time.Millisecond
			continue
		}
		// Redis is away: go-redis dials again on the next Receive.
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// forgetAll drops every denial and lease this instance holds, for a
// subscription that may have missed a Reset.
func (l *Limiter) forgetAll() {
	if c := l.denied; c != nil {
		c.mu.Lock()
		clear(c.m)
		c.mu.Unlock()
	}
	if ls := l.leases; ls != nil {
		ls.mu.Lock()
		keys := make([]string, 0, len(ls.m))
		for k := range ls.m {
			keys = append(keys, k)
		}
		ls.mu.Unlock()
		for _, k := range keys {
			ls.forget(k)
		}
	}
}
