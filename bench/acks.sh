#!/usr/bin/env bash
# Counts what core.WithReplicaAcks costs Redis per decision
# (TestInstructionsReplicaAcks): starts a master under valgrind's callgrind
# and a replica of it (not under valgrind), each on a port of its own, runs
# the test against the master, and stops both. Needs valgrind and
# redis-server on PATH; takes a few minutes.
#
#   bash bench/acks.sh            # the table on stdout
#   BENCH_TABLE_OUT=/tmp/acks.md bash bench/acks.sh
set -euo pipefail
cd "$(dirname "$0")"
port=${BENCH_CALLGRIND_PORT:-6398}
rport=${BENCH_REPLICA_PORT:-6397}
dir=$(mktemp -d)
trap 'redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true; redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
  redis-server --port "$port" --save "" --appendonly no >"$dir/valgrind.log" 2>&1 &
vg=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
redis-cli -p "$port" ping >/dev/null
redis-server --port "$rport" --save "" --appendonly no --replicaof 127.0.0.1 "$port" --dir "$dir" >"$dir/replica.log" 2>&1 &
for _ in $(seq 300); do redis-cli -p "$rport" info replication 2>/dev/null | grep -q master_link_status:up && break; sleep 0.2; done
redis-cli -p "$rport" info replication | grep -q master_link_status:up
REDIS_URL="redis://127.0.0.1:$port/0" BENCH_CALLGRIND_PID=$vg BENCH_CALLGRIND_OUT="$dir/cg.out" BENCH_REPLICA=1 \
  go test -count=1 -run '^TestInstructionsReplicaAcks$' -v -timeout 30m .
