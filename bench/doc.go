// Package bench measures redlimit's core against go-redis/redis_rate v10 and
// ulule/limiter v3 on one real Redis, in one process and one run, and the
// HTTP overhead of the adapters.
//
// It is its own module so that the peers compared here never enter the main
// module's dependencies. Everything is in the tests. The commands, from the
// repository root (REDIS_URL defaults to redis://127.0.0.1:6379/0):
//
// Harness checks, a few seconds (each Redis test skips, loudly, without a
// Redis; under CI=1 it fails instead):
//
//	cd bench && go vet ./... && REDIS_URL=redis://127.0.0.1:6379/0 go test -count=1 -run . ./...
//
// The tables of BENCHMARKS.md (about 10-15 minutes at the defaults, on 2
// cores; run it on a quiet machine):
//
//	cd bench && REDIS_URL=redis://127.0.0.1:6379/0 BENCH_TABLE=1 BENCH_ROUNDS=3 BENCH_DURATION=1s \
//	  BENCH_TABLE_OUT=/tmp/table.md go test -count=1 -run TestTable -v -timeout 60m 2>&1 | tee /tmp/table.log
//
// BENCH_ROUNDS (default 3) rounds; each round measures every cell of every
// section once, the contenders of a cell one after the other (their order
// rotated each round). Every number is min–max over the rounds, every ratio
// is taken within a round first, and a target is met only if it holds in
// every round. BENCH_DURATION is the time per cell (default 1s);
// BENCH_ONLY a comma list of sections (decisions, algorithms, features,
// denycache, ceiling, http; default all; the targets need decisions); BENCH_TABLE_OUT
// a file for the tables. The header prints the command line, the commit
// (and uncommitted changes), /proc/loadavg before and after, and the form
// our calls took (FCALL on Redis 7). A quick look, which proves nothing:
//
//	cd bench && BENCH_TABLE=1 BENCH_DURATION=100ms BENCH_ROUNDS=1 BENCH_ONLY=decisions go test -count=1 -run TestTable -v
//
// The same cells in go test's benchmark format, for benchstat. Every
// benchmark name is key=value parts: BenchmarkDecisions/g=G/keys=K/traffic=T/impl=I,
// BenchmarkAlgorithms/alg=A/g=G/keys=K/traffic=T/mode=M,
// BenchmarkDenyCache/g=G/keys=1/traffic=T/impl=I, BenchmarkHTTP/app=A/mode=M.
// Collect samples in interleaved passes (each pass runs every contender of
// a cell one after the other; -count N would repeat each benchmark N times
// back to back instead, so drift on the machine would fall on one
// contender). Six passes at least, for benchstat's confidence intervals;
// each pass of BenchmarkDecisions takes about 3 minutes at -benchtime 1s:
//
//	cd bench && rm -f /tmp/decisions.txt && for i in 1 2 3 4 5 6; do
//	  REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench '^BenchmarkDecisions$' -benchtime 1s -count 1 -timeout 30m >> /tmp/decisions.txt
//	done
//
// (or, back to back: ... -bench '^BenchmarkDecisions$' -benchtime 1s -count 6 -timeout 60m > /tmp/decisions.txt).
// benchstat is golang.org/x/perf/cmd/benchstat, run from the module proxy
// (the version it served on 2026-12-01; @latest works too), outside any
// go.mod of ours:
//
//	BENCHSTAT='go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da'
//	# ours (the default Limiter) against redis_rate, every scenario, decisions/s and Redis CPU:
//	$BENCHSTAT -filter '/impl:(redis_rate OR ours-batched) .unit:(ops/s OR redis-cpu-µs/op OR script-µs/op)' \
//	  -col '/impl@(redis_rate ours-batched)' /tmp/decisions.txt
//	# ours on a fixed window against ulule; the plain call against redis_rate:
//	$BENCHSTAT -filter '/impl:(ulule OR ours-fixed_window) .unit:ops/s' -col '/impl@(ulule ours-fixed_window)' /tmp/decisions.txt
//	$BENCHSTAT -filter '/impl:(redis_rate OR ours-plain) .unit:(redis-cpu-µs/op OR script-µs/op)' -col '/impl@(redis_rate ours-plain)' /tmp/decisions.txt
//	# before and after a change (two files collected the same way):
//	$BENCHSTAT old.txt new.txt
//
// (To pin benchstat in the tools module instead, its owner would add
// `tool golang.org/x/perf/cmd/benchstat` to tools/go.mod, with
// `GOWORK=off go -C tools get -tool golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da`,
// and run it as `GOWORK=off go -C tools tool benchstat`.)
//
// One cell alone: -bench takes a regular expression per level, so anchor
// each (g=1 also matches g=16): -bench '^BenchmarkDecisions$/^g=1$/^keys=1$/^traffic=allowed$/^impl=ours-plain$'.
// Redis' instructions per decision, counted by valgrind's callgrind on a
// redis-server of its own (TestInstructions; a few minutes; needs valgrind
// and redis-server on PATH): unlike the timed numbers, a count does not move
// with the machine's load, so it can show a difference of a few percent:
//
//	bash bench/instructions.sh
//
// Profiles:
//
//	cd bench && go test -c -o /tmp/bench.test .
//	/tmp/bench.test -test.run '^$' -test.bench '^BenchmarkDecisions$/^g=256$/^keys=10000$/^traffic=allowed$/^impl=ours-plain$' -test.benchtime 3s -test.cpuprofile /tmp/cpu.out
//	/tmp/bench.test -test.run '^$' -test.bench '^BenchmarkDecisions$/^g=1$/^keys=10000$/^traffic=allowed$/^impl=ours-plain$' -test.benchtime 20000x -test.memprofile /tmp/mem.out -test.memprofilerate 1
//	go tool pprof -top -cum /tmp/bench.test /tmp/cpu.out
//	go tool pprof -sample_index=alloc_objects -top /tmp/bench.test /tmp/mem.out
//
// Every cell also reports the Redis server's CPU per decision
// (redis-cpu-µs/op): used_cpu_user + used_cpu_sys from INFO, read right
// before the measured goroutines are released and right after the last one
// returns, divided by the decisions made in between; and the time Redis
// spent executing script calls per decision (script-µs/op): INFO
// commandstats' usec of FCALL, EVALSHA and EVAL, diffed over the same
// window (the server's stats are never reset; usec is wall-clock time
// inside the command, so it reads high when other load deschedules Redis). Every Redis client of the
// process counts the bytes it writes, so a window in which Redis read more
// than that (another client's commands, whose CPU the reading then
// includes) is flagged.
//
// Every contender has a go-redis client of its own with the same options
// (ContextTimeoutEnabled, a pool of 320, PoolTimeout 5s; TestClientOptions
// checks them) and the same hook. Before a cell is measured, our Limiter's
// background work is waited out: its first health check, the FUNCTION LOAD
// of its library (its decisions must reach Redis as FCALL on Redis 7), and
// whatever the pool's new connections start while priming (the client must
// be quiet for 50ms).
//
// The go-redis-alone contender (impl=goredis) and the ceiling's
// redis-benchmark commands are captured, not rebuilt: one real decision of
// the implementation is made under a recording context, and the exact
// command it sent (FCALL or EVALSHA, function or SHA, keys, arguments) is
// replayed with each key swapped in. TestOneCallScript checks the replay
// against a fresh capture, byte for byte.
//
// Every key written starts with a prefix unique to the run
// ("rlbench-<pid>-<nanotime>"); each cell's keys are deleted after it, and
// whatever is left when the run ends: the benchmarks never flush the
// database. The ceiling's FCALL of return 1 loads a library named for the
// run and deletes it at the end.
package bench
