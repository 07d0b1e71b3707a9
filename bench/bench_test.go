package bench

import (
	"fmt"
	"testing"
)

// Every benchmark name is key=value parts (g=, keys=, traffic=, impl=,
// alg=, mode=, app=), so that benchstat can put any of them in columns
// (-col /impl) or rows, and filter on them; see doc.go for the commands.

// benchCell is one sub-benchmark: im in s. It makes b.N decisions with an
// explicit pool of s.g goroutines (b.RunParallel cannot run one goroutine,
// nor exactly 16 or 256 on any GOMAXPROCS). b.Run calls the function once
// per b.N it tries, and again for every -count: the cell is set up (fresh
// keys, primed, the Limiter's background work waited out) the first time
// only, and released, its keys deleted, once b.Run returns.
func benchCell(b *testing.B, name string, im impl, s scenario) {
	var (
		d    decider
		c    client
		done func()
	)
	b.Run(name, func(b *testing.B) {
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

// BenchmarkDecisions is the decision table in go test's format:
// BenchmarkDecisions/g=G/keys=K/traffic=T/impl=I, every contender of a
// scenario one after the other (interleaved), the scenarios of the matrix
// in order. impl is ours-plain, ours-batched (the default Limiter),
// ours-batched+denycache, ours-leases (one-key scenarios), ours-fixed_window
// (the default Limiter on a fixed window), redis_rate, ulule, and goredis
// (our call through go-redis alone, 1-goroutine scenarios).
func BenchmarkDecisions(b *testing.B) {
	needRedis(b)
	for _, s := range matrix {
		b.Run(s.benchName(), func(b *testing.B) {
			for _, c := range decisionContenders() {
				if c.only(s) {
					benchCell(b, "impl="+c.im.benchName(), c.im, s)
				}
			}
		})
	}
}

// BenchmarkAlgorithms is each algorithm, plain and batched, on the
// algorithm scenarios: BenchmarkAlgorithms/alg=A/g=G/keys=K/traffic=T/mode=M.
func BenchmarkAlgorithms(b *testing.B) {
	needRedis(b)
	for _, alg := range algorithms {
		for _, s := range algScenarios {
			b.Run(fmt.Sprintf("alg=%s/%s", alg, s.benchName()), func(b *testing.B) {
				for _, batched := range []bool{false, true} {
					benchCell(b, "mode="+modeName(batched), oursAlg(alg, batched), s)
				}
			})
		}
	}
}

// abusiveScenarios is one key at 1000/s and at 100/s hammered by 16 and 256
// goroutines.
var abusiveScenarios = []scenario{{16, 1, abusive}, {256, 1, abusive}, {16, 1, abusive100}, {256, 1, abusive100}}

// algScenarios are the scenarios of the algorithm table.
var algScenarios = []scenario{{1, 10000, allowed}, {256, 10000, allowed}, {256, 10000, denied}}

// denyCacheImpls are the deny cache table's contenders.
var denyCacheImpls = []impl{oursPlain, oursPDC, oursBatched, oursBDC}

// BenchmarkDenyCache compares Redis calls per 1000 decisions (the
// rediscalls/1kop metric) with and without the deny cache, plain and
// batched, on one abused key:
// BenchmarkDenyCache/g=G/keys=1/traffic=abusive1000|abusive100/impl=I.
func BenchmarkDenyCache(b *testing.B) {
	needRedis(b)
	for _, s := range abusiveScenarios {
		b.Run(s.benchName(), func(b *testing.B) {
			for _, im := range denyCacheImpls {
				benchCell(b, "impl="+im.benchName(), im, s)
			}
		})
	}
}
