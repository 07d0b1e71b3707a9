#!/usr/bin/env bash
# Counts the instructions Redis executes per decision (TestInstructions):
# starts a redis-server under valgrind's callgrind on a port of its own,
# runs the test against it, and stops it. Needs valgrind (callgrind_control
# comes with it) and redis-server on PATH; takes a few minutes.
#
#   bash bench/instructions.sh            # the table on stdout
#   BENCH_TABLE_OUT=/tmp/ir.md bash bench/instructions.sh
set -euo pipefail
cd "$(dirname "$0")"
port=${BENCH_CALLGRIND_PORT:-6399}
dir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
  redis-server --port "$port" --save "" --appendonly no >"$dir/valgrind.log" 2>&1 &
vg=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
redis-cli -p "$port" ping >/dev/null
REDIS_URL="redis://127.0.0.1:$port/0" BENCH_CALLGRIND_PID=$vg BENCH_CALLGRIND_OUT="$dir/cg.out" \
  go test -count=1 -run '^TestInstructions$' -v -timeout 30m .
