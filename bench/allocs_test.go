package bench

import (
	"context"
	"testing"
)

// allocsPerDecision is testing.AllocsPerRun of one decision of im under
// ctx, alone (one goroutine), on one key of the allowed quota, and the
// bytes it allocates: the client's cost that -benchmem reports as
// allocs/op and B/op, for a test to hold.
func allocsPerDecision(t *testing.T, ctx context.Context, im impl) (allocs float64, bytes int64) {
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
	prime(1, 1, 2, d)
	var derr error
	allocs = testing.AllocsPerRun(500, func() {
		if ok, err := d(ctx, 0); err != nil || !ok {
			derr = err
		}
	})
	// The bytes, which AllocsPerRun does not count, as -benchmem does.
	bytes = testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := d(ctx, 0); err != nil || !ok {
				derr = err
			}
		}
	}).AllocedBytesPerOp()
	if derr != nil {
		t.Fatalf("%s: %v", im.name, derr)
	}
	return allocs, bytes
}

// TestAllocsNoMoreThanRedisRate holds issue 27's "allocations and bytes
// per decision for our default Limiter no more than redis_rate's": the
// default Limiter (the token bucket, batched) and its fixed window,
// against go-redis/redis_rate's GCRA and ulule's window in the same
// harness, on one key alone, where no batch shares a call's allocations;
// under context.Background(), as the benchmarks call, and under a context
// that can be cancelled, as the adapters do with a request's.
func TestAllocsNoMoreThanRedisRate(t *testing.T) {
	needRedis(t)
	cancellable, stop := context.WithCancel(context.Background())
	defer stop()
	for name, ctx := range map[string]context.Context{"background": context.Background(), "cancellable": cancellable} {
		t.Run(name, func(t *testing.T) {
			allocs, bytes := map[string]float64{}, map[string]int64{}
			for _, im := range []impl{oursBatched, oursFW, redisRate, ulule} {
				allocs[im.name], bytes[im.name] = allocsPerDecision(t, ctx, im)
				t.Logf("%s: %.1f allocations, %d bytes per decision", im.name, allocs[im.name], bytes[im.name])
			}
			for _, ours := range []string{oursBatched.name, oursFW.name} {
				if allocs[ours] > allocs[redisRate.name] {
					t.Errorf("%s allocates %.1f times per decision, redis_rate %.1f: want no more", ours, allocs[ours], allocs[redisRate.name])
				}
				if bytes[ours] > bytes[redisRate.name] {
					t.Errorf("%s allocates %d bytes per decision, redis_rate %d: want no more", ours, bytes[ours], bytes[redisRate.name])
				}
			}
		})
	}
}
