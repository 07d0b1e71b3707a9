package core

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// Benchmarks of one decision per algorithm, on miniredis (the cost of the
// Go side and of a Lua interpreter in-process) and, with REDIS_URL set, on
// real Redis. Compare runs with benchstat.
//
// Keys rotate over 1024 callers at 100 per second each: miniredis' clock
// stands still, so after the first 100 per key most decisions are
// denials, which write nothing; on real Redis the clock runs.

var benchLimits = []Limit{
	PerSecond(100),
	with(PerSecond(100), LeakyBucket),
	with(PerSecond(100), FixedWindow),
	with(PerSecond(100), SlidingWindow),
	with(PerSecond(100), SlidingWindowCounter),
}

var benchKeys = func() [1024]string {
	var keys [1024]string
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}()

func BenchmarkAllow(b *testing.B) {
	backends := []struct {
		name string
		open func(b *testing.B) (redis.UniversalClient, string)
	}{
		{"miniredis", func(b *testing.B) (redis.UniversalClient, string) {
			_, rdb := redistest.Mini(b)
			return rdb, "bench"
		}},
		{"redis", func(b *testing.B) (redis.UniversalClient, string) {
			rdb := redistest.Real(b)
			prefix := realPrefix(b)
			cleanupPrefix(b, rdb, prefix)
			return rdb, prefix
		}},
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			for _, lim := range benchLimits {
				b.Run(lim.Algorithm.String(), func(b *testing.B) {
					rdb, prefix := be.open(b)
					l := opsNew(b, rdb, WithPrefix(prefix), WithTimeout(time.Second))
					ctx := context.Background()
					b.Run("serial", func(b *testing.B) {
						b.ReportAllocs()
						i := 0
						for b.Loop() {
							if _, err := l.Allow(ctx, 1, lim.For(benchKeys[i%len(benchKeys)])); err != nil {
								b.Fatal(err)
							}
							i++
						}
					})
					b.Run("parallel", func(b *testing.B) {
						b.ReportAllocs()
						b.RunParallel(func(pb *testing.PB) {
							i := 0
							for pb.Next() {
								if _, err := l.Allow(ctx, 1, lim.For(benchKeys[i%len(benchKeys)])); err != nil {
									b.Error(err)
									return
								}
								i++
							}
						})
					})
				})
			}
		})
	}
}
