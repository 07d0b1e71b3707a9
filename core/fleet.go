package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// The default local fallback learns n, the instances that share the
// limits, from Redis while it answers: each Limiter keeps a member of its
// own in the sorted set "<prefix>:fleet", scored with its expiry on Redis'
// clock, and counts the members that have not expired. The key expires
// fleetTTL after the last Limiter's renewal, so it never outlives the fleet.
const (
	fleetEvery = 5 * time.Second
	fleetTTL   = 3 * fleetEvery
	// assumedFleet is n before Redis has counted the fleet once (Redis
	// down since the Limiter started): each instance takes a 64th of a
	// limit, so fleets of up to 64 instances stay within the bounds of
	// WithLocalFallback.
	assumedFleet = 64
)

// fleetScript renews this instance (ARGV[1]) for ARGV[2] ms, drops the
// members that expired, and returns how many are left.
var fleetScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
`)

// fleet keeps the Limiter's member of the fleet fresh, in the background,
// until the Limiter is closed or collected.
type fleetMember struct {
	key, id string
	stop    context.CancelFunc
}

// joinFleet starts counting the fleet for l's fallback.
func joinFleet(l *Limiter) *fleetMember {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleetMember{key: l.prefix + ":fleet", id: hex.EncodeToString(b[:]), stop: cancel}
	runtime.AddCleanup(l, func(cancel context.CancelFunc) { cancel() }, cancel)
	go f.run(ctx, weak.Make(l), l.rdb, l.fallback)
	return f
}

// run renews the member at once, then every fleetEvery. It holds the
// Limiter weakly, so that an unused one is still collected.
func (f *fleetMember) run(ctx context.Context, wl weak.Pointer[Limiter], rdb redis.UniversalClient, s *sketch) {
	tick := time.NewTicker(fleetEvery)
	defer tick.Stop()
	for {
		if l := wl.Value(); l == nil || l.closed.Load() {
			return
		}
		f.count(ctx, rdb, s)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// count renews the member and learns n; a Redis that does not answer
// leaves n as it was.
func (f *fleetMember) count(ctx context.Context, rdb redis.UniversalClient, s *sketch) {
	cctx, cancel := context.WithTimeout(ctx, fleetEvery)
	defer cancel()
	n, err := fleetScript.Run(cctx, rdb, []string{f.key}, f.id, fleetTTL.Milliseconds()).Int64()
	if err == nil && n >= 1 {
		s.instances.Store(n)
	}
}

// leave stops the renewals and removes the member, so that the others'
// shares grow back at their next count rather than after fleetTTL.
func (f *fleetMember) leave(rdb redis.UniversalClient, timeout time.Duration) {
	f.stop()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Second))
		defer cancel()
		rdb.ZRem(ctx, f.key, f.id)
	}()
}
