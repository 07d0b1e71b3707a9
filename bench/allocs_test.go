package bench

import (
	"context"
	"testing"
)

// allocsPerDecision is testing.AllocsPerRun of one decision of im, alone
// (one goroutine), on one key of the allowed quota: the client's cost that
// -benchmem reports as allocs/op, for a test to hold.
func allocsPerDecision(t *testing.T, im impl) float64 {
	t.Helper()
	cl := clientFor(t, im.client)
	keys, pattern := keySet(1)
	d, release, err := im.make(cl.rdb, allowed.quota(), keys)
	if err != nil {
		t.Fatalf("%s: %v", im.name, err)
	}
	defer func() {
		release()
		if err := unlinkMatching(pattern); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	prime(1, 1, 2, d)
	var derr error
	allocs := testing.AllocsPerRun(500, func() {
		if ok, err := d(ctx, 0); err != nil || !ok {
			derr = err
		}
	})
	if derr != nil {
		t.Fatalf("%s: %v", im.name, derr)
	}
	return allocs
}

// TestAllocsNoMoreThanRedisRate holds issue 27's "allocations per decision
// for our default Limiter no more than redis_rate's": the default Limiter
// (the token bucket, batched) and its fixed window, against go-redis/
// redis_rate's GCRA and ulule's window in the same harness, on one key
// alone, where no batch shares a call's allocations.
func TestAllocsNoMoreThanRedisRate(t *testing.T) {
	needRedis(t)
	got := map[string]float64{}
	for _, im := range []impl{oursBatched, oursFW, redisRate, ulule} {
		got[im.name] = allocsPerDecision(t, im)
		t.Logf("%s: %.1f allocations per decision", im.name, got[im.name])
	}
	for _, ours := range []string{oursBatched.name, oursFW.name} {
		if got[ours] > got[redisRate.name] {
			t.Errorf("%s allocates %.1f per decision, redis_rate %.1f: want no more", ours, got[ours], got[redisRate.name])
		}
	}
}
