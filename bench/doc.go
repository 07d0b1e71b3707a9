// Package bench measures redlimit's core against go-redis/redis_rate v10 and
// ulule/limiter v3 on one real Redis, in one process and one run, and the
// HTTP overhead of the adapters.
//
// It is its own module so that the peers compared here never enter the main
// module's dependencies. Everything is in the tests:
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench . -benchtime 1s
//	REDIS_URL=redis://127.0.0.1:6379/0 BENCH_TABLE=1 go test -count=1 -run TestTable -v -timeout 15m
//
// The first prints the whole matrix in go test's benchmark format
// (benchstat-friendly); the second prints the markdown tables recorded in
// BENCHMARKS.md at the repository root, with redis-benchmark's ceilings for
// the same script calls on the same server, and the targets, met or
// missed, for this run.
//
// Every cell also reports the Redis server's CPU per decision
// (redis-cpu-µs/op): used_cpu_user + used_cpu_sys from INFO, read right
// before the measured goroutines are released and right after the last one
// returns, divided by the decisions made in between. Every Redis client of
// the process counts the bytes it writes, so a window in which Redis read
// more than that (another client's commands, whose CPU the reading then
// includes) is flagged.
//
// Every key written starts with a prefix unique to the run
// ("rlbench-<pid>-<nanotime>"); each cell's keys are deleted after it, and
// whatever is left when the run ends: the benchmarks never flush the
// database.
package bench
