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
			d    decider
			c    client
			done func()
		)
		// b.Run calls the function once per b.N it tries: the cell is set
		// up in the first round only, and its keys deleted after the last.
		b.Run(s.String(), func(b *testing.B) {
			if d == nil {
				d, c, done = setup(b, im, s)
			}
			b.ReportAllocs()
			st := run(s.g, int64(b.N), 0, s.keys, d, c.ctr, b.ResetTimer, b.StopTimer)
			report(b, &st)
		})
		if done != nil {
			done()
		}
	}
}

// BenchmarkOurs is the core's token bucket: plain (every decision its own
// script call), batched (the default) and batched with the deny cache; and
// leases (a fixed window) on the one-key scenarios.
func BenchmarkOurs(b *testing.B) {
	for _, im := range oursAll {
		b.Run(strings.TrimPrefix(im.name, "ours/"), func(b *testing.B) { benchMatrix(b, im, matrix) })
	}
	var hot []scenario
	for _, s := range matrix {
		if s.keys == 1 {
			hot = append(hot, s)
		}
	}
	for _, im := range leaseImpls {
		b.Run(strings.TrimPrefix(im.name, "ours/"), func(b *testing.B) { benchMatrix(b, im, hot) })
	}
}

// BenchmarkAlgorithms is each algorithm, plain and batched, on the
// algorithm scenarios.
func BenchmarkAlgorithms(b *testing.B) {
	for _, alg := range algorithms {
		for _, batched := range []bool{false, true} {
			im := oursAlg(alg, batched)
			b.Run(strings.TrimPrefix(im.name, "ours/"), func(b *testing.B) { benchMatrix(b, im, algScenarios) })
		}
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

// algScenarios are the scenarios of the algorithm table.
var algScenarios = []scenario{{1, 10000, allowed}, {256, 10000, allowed}, {256, 10000, denied}}

// denyCacheImpls are the deny cache table's contenders.
var denyCacheImpls = []impl{oursPlain, oursPDC, oursBatched, oursBDC}

// BenchmarkDenyCache compares Redis calls per 1000 decisions (the
// rediscalls/1kop metric) with and without the deny cache, plain and
// batched, on one abused key.
func BenchmarkDenyCache(b *testing.B) {
	for _, im := range denyCacheImpls {
		b.Run(strings.TrimPrefix(im.name, "ours/"), func(b *testing.B) { benchMatrix(b, im, abusiveScenarios) })
	}
}
