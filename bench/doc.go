// Package bench measures redlimit's core against go-redis/redis_rate v10 and
// ulule/limiter v3 on one real Redis, in one process and one run, and the
// HTTP overhead of the adapters.
//
// It is its own module so that the peers compared here never enter the main
// module's dependencies. Everything is in the tests:
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench . -benchtime 1s
//	REDIS_URL=redis://127.0.0.1:6379/0 BENCH_TABLE=1 go test -run TestTable -v -timeout 15m
//
// The first prints the whole matrix in go test's benchmark format
// (benchstat-friendly); the second prints the markdown table recorded in
// BENCHMARKS.md at the repository root, with redis-benchmark's ceiling for a
// trivial EVALSHA on the same server.
//
// Every key written starts with a prefix unique to the run
// ("rlbench-<pid>-<nanotime>"), and those keys are deleted when the run ends:
// the benchmarks never flush the database.
package bench
