package bench

import (
	"strings"
	"testing"
)

// benchMatrix runs im over scenarios, one sub-benchmark each. Each makes
// b.N decisions with an explicit pool of s.g goroutines (b.RunParallel
// cannot run one goroutine, nor exactly 16 or 256 on any GOMAXPROCS).
func benchMatrix(b *testing.B, im impl, scenarios []scenario) {
	needRedis(b)
	for _, s := range scenarios {
		var (
			d decider
			c client
		)
		b.Run(s.String(), func(b *testing.B) {
			if d == nil {
				d, c = setup(b, im, s)
			}
			b.ReportAllocs()
			st := run(s.g, int64(b.N), 0, s.keys, d, c.ctr, b.ResetTimer, b.StopTimer)
			report(b, &st)
		})
	}
}

// BenchmarkOurs is the core: each algorithm, and the token bucket with
// auto-pipelining and with the deny cache.
func BenchmarkOurs(b *testing.B) {
	for _, im := range oursAll {
		b.Run(strings.TrimPrefix(im.name, "ours/"), func(b *testing.B) { benchMatrix(b, im, matrix) })
	}
}

// BenchmarkRedisRate is go-redis/redis_rate v10.
func BenchmarkRedisRate(b *testing.B) { benchMatrix(b, redisRate, matrix) }

// BenchmarkUlule is ulule/limiter v3 with its Redis store.
func BenchmarkUlule(b *testing.B) { benchMatrix(b, ulule, matrix) }

// BenchmarkGoRedisEvalSha is the token bucket script through go-redis alone:
// the allocations and time go-redis itself costs per decision.
func BenchmarkGoRedisEvalSha(b *testing.B) { benchMatrix(b, goredis, matrix) }

// abusiveScenarios is one key at 1000/s and at 100/s hammered by 16 and 256
// goroutines.
var abusiveScenarios = []scenario{{16, 1, abusive}, {256, 1, abusive}, {16, 1, abusive100}, {256, 1, abusive100}}

// BenchmarkDenyCache compares Redis calls per 1000 decisions (the
// rediscalls/1kop metric) with and without the deny cache, on one abused
// key.
func BenchmarkDenyCache(b *testing.B) {
	b.Run("without", func(b *testing.B) { benchMatrix(b, oursTB, abusiveScenarios) })
	b.Run("with", func(b *testing.B) { benchMatrix(b, oursDC, abusiveScenarios) })
}
