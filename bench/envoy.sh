#!/usr/bin/env bash
# bench/envoy.sh: redlimit serve against envoyproxy/ratelimit, side by side,
# on one Redis of this script's own, with one configuration (envoy/*.yaml),
# driven by cmd/rlsload (go-control-plane's client). The tables of
# BENCHMARKS.md's "Envoy's rate limit service" section come from it.
#
#   RATELIMIT_BIN=/path/to/ratelimit bash bench/envoy.sh [throughput] [instructions] [restart] [failover]
#
# RATELIMIT_BIN is a binary of envoyproxy/ratelimit (src/service_cmd) that you
# built yourself from its source; nothing here fetches or builds it. Needs
# redis-server and redis-cli on PATH, valgrind for "instructions". With no
# section named, runs them all. Prints one JSON line per measurement
# (rlsload's, with the service and the cell) and a summary table per section.
#
# throughput:   decisions per second through gRPC at 1, 16 and 256 concurrent
#               streams (one descriptor, 1000 keys), 5 s a cell after a 1 s
#               warm-up, ROUNDS rounds (default 3), the services' order
#               alternating.
# instructions: Redis' instructions per descriptor (callgrind on redis-server,
#               as bench/instructions.sh counts them) for N requests (default
#               2000) at 1, 16 and 256 streams, of 1 and of 3 descriptors.
# restart:      over-admission under a Redis restart: 16 streams on one key
#               limited to 1000 an hour, Redis shut down (no persistence) at 2 s
#               and started again 1 s later, 6 s in all.
# failover:     the same against a Redis Cluster of this script's own (3 masters,
#               3 replicas, cluster-node-timeout 1000 ms), the key's master
#               killed at 2 s, its replica promoted by the Cluster.
# Over-admission counts as admitted both the OK answers and the errors: Envoy
# admits a request whose rate limit call fails unless failure_mode_deny is set.
set -euo pipefail
cd "$(dirname "$0")"
: "${RATELIMIT_BIN:?set RATELIMIT_BIN to an envoyproxy/ratelimit binary you built}"
ROUNDS=${ROUNDS:-3}
N=${N:-2000}
sections=("$@")
((${#sections[@]})) || sections=(throughput instructions restart failover)

work=$(mktemp -d -t envoy-bench.XXXXXX)
pids=()
cleanup() {
	# (the services start in command substitutions, which cannot add to pids)
	mapfile -t -O "${#pids[@]}" pids < <(cat "$work/pids" 2>/dev/null || true)
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in $(cat "$work/redis-ports" 2>/dev/null); do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	if [[ -n "${KEEP:-}" ]]; then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
go build -o "$work/redlimit" ../cmd/redlimit
go build -o "$work/rlsload" ./cmd/rlsload
mkdir -p "$work/rt/ratelimit/config"
cp envoy/*.yaml "$work/rt/ratelimit/config/"
echo $((20000 + RANDOM % 20000)) >"$work/next-port"
inuse() { (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port() { # a free loopback port (and, for a Cluster node, its bus port + 10000), never the same twice
	local p; p=$(<"$work/next-port")
	while inuse "$p" || inuse $((p + 10000)); do p=$((p + 1)); done
	echo $((p + 1)) >"$work/next-port"
	echo "$p"
}
wait_port() { for _ in $(seq 200); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "nothing on port $1" >&2; return 1; }
redis_up() { for _ in $(seq 200); do [[ "$(redis-cli -p "$1" ping 2>/dev/null)" == PONG ]] && return 0; sleep 0.1; done; return 1; }

# start_redis PORT [extra args]: a redis-server without persistence.
start_redis() {
	local p=$1; shift
	echo "$p" >>"$work/redis-ports" # (a restarted server is not this shell's child)
	redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" "$@" >>"$work/redis-$p.log" 2>&1 &
	pids+=($!)
	redis_up "$p"
}
# ours NAME REDISFLAG ADDR [flags]: redlimit serve; prints its gRPC address.
ours() {
	local g; g=$(port)
	"$work/redlimit" serve "$2" "$3" "${@:4}" -config envoy -grpc-addr "127.0.0.1:$g" -http-addr "" -prefix "bench-$1" \
		>"$work/ours-$1.log" 2>&1 &
	echo $! >>"$work/pids"
	wait_port "$g" && echo "127.0.0.1:$g"
}
# ref NAME TYPE URL: envoyproxy/ratelimit; prints its gRPC address.
ref() {
	local g h dbg; g=$(port); h=$(port); dbg=$(port)
	env USE_STATSD=false LOG_LEVEL=error REDIS_SOCKET_TYPE=tcp REDIS_TYPE="$2" REDIS_URL="$3" \
		REDIS_PIPELINE_WINDOW="$([[ $2 == cluster ]] && echo 150us || echo 0)" \
		GRPC_HOST=127.0.0.1 GRPC_PORT="$g" HOST=127.0.0.1 PORT="$h" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$dbg" \
		RUNTIME_ROOT="$work/rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_APPDIRECTORY=config RUNTIME_WATCH_ROOT=false \
		"$RATELIMIT_BIN" >"$work/ref-$1.log" 2>&1 &
	echo $! >>"$work/pids"
	wait_port "$g" && echo "127.0.0.1:$g"
}
load() { "$work/rlsload" "$@"; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

throughput() {
	local rp o r; rp=$(port); start_redis "$rp"
	o=$(ours tp -redis "redis://127.0.0.1:$rp/0"); r=$(ref tp SINGLE "127.0.0.1:$rp")
	echo "== throughput: decisions per second, one descriptor, 1000 keys"
	for round in $(seq "$ROUNDS"); do
		for s in 1 16 256; do
			local order=("ours $o" "envoyproxy/ratelimit $r")
			((round % 2)) || order=("envoyproxy/ratelimit $r" "ours $o")
			for x in "${order[@]}"; do
				local name=${x% *} addr=${x##* } out
				out=$(load -addr "$addr" -streams "$s" -conns 4 -duration 5s -warmup 1s)
				echo "{\"section\":\"throughput\",\"round\":$round,\"service\":\"$name\",\"result\":$out}"
			done
		done
	done
}

instructions() {
	command -v valgrind >/dev/null || { echo "instructions: valgrind is not installed" >&2; return 1; }
	local rp vg o r; rp=$(port)
	valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" redis-server --port "$rp" --bind 127.0.0.1 --save "" --appendonly no \
		>"$work/valgrind.log" 2>&1 &
	vg=$!; pids+=("$vg"); redis_up "$rp"
	# A Redis under valgrind is some 50 times slower: ours gets the
	# reference's Redis timeout (REDIS_TIMEOUT, 10 s) instead of core's 50 ms,
	# so that every request is decided by Redis, as the reference's are.
	o=$(ours ir -redis "redis://127.0.0.1:$rp/0" -timeout 10s); r=$(ref ir SINGLE "127.0.0.1:$rp")
	echo "== instructions: Redis' instructions per descriptor (callgrind), $N requests a cell"
	for s in 1 16 256; do
		for dd in 1 3; do
			for x in "ours $o" "envoyproxy/ratelimit $r"; do
				local name=${x% *} addr=${x##* } out f tot
				load -addr "$addr" -streams "$s" -descriptors "$dd" -n "$N" >/dev/null # every key exists: the common case
				callgrind_control -z "$vg" >/dev/null
				out=$(load -addr "$addr" -streams "$s" -descriptors "$dd" -n "$N")
				rm -f "$work"/cg.out.*
				callgrind_control -d "$vg" >/dev/null
				for _ in $(seq 200); do
					f=$(ls "$work"/cg.out.* 2>/dev/null | head -1 || true)
					[[ -n "$f" ]] && grep -q '^totals:' "$f" && break
					sleep 0.1
				done
				tot=$(awk '/^totals:/ {print $2}' "$f")
				echo "{\"section\":\"instructions\",\"service\":\"$name\",\"instructions\":$tot,\"result\":$out}"
			done
		done
	done
}

# fault NAME ADDR ACTION: 16 streams on one key for 6 s, ACTION run at 2 s.
fault() {
	local out
	(sleep 2; eval "$3") &
	out=$(load -addr "$2" -streams 16 -keys 1 -domain fault -duration 6s)
	wait $!
	echo "{\"section\":\"$4\",\"service\":\"$1\",\"limit\":1000,\"result\":$out}"
}

restart() {
	echo "== restart: 16 streams on one key limited to 1000 an hour; Redis down at 2 s for 1 s"
	for name in ours envoyproxy/ratelimit; do
		local rp a; rp=$(port); start_redis "$rp"
		if [[ $name == ours ]]; then a=$(ours rs -redis "redis://127.0.0.1:$rp/0"); else a=$(ref rs SINGLE "127.0.0.1:$rp"); fi
		fault "$name" "$a" "redis-cli -p $rp shutdown nosave >/dev/null 2>&1; sleep 1; start_redis $rp" restart
		redis-cli -p "$rp" shutdown nosave >/dev/null 2>&1 || true
	done
}

failover() {
	echo "== failover: a Cluster of 3 masters and 3 replicas; the key's master killed at 2 s"
	for name in ours envoyproxy/ratelimit; do
		local ports=() p d addrs master mpid a
		for _ in 1 2 3 4 5 6; do
			p=$(port); ports+=("$p"); mkdir -p "$work/$RANDOM-$p" && d=$_
			start_redis "$p" --dir "$d" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 1000
		done
		addrs=$(printf '127.0.0.1:%s ' "${ports[@]}")
		redis-cli --cluster create $addrs --cluster-replicas 1 --cluster-yes >"$work/cluster-create.log" 2>&1
		for _ in $(seq 100); do [[ $(redis-cli -p "${ports[0]}" cluster info | tr -d '\r' | awk -F: '/cluster_state/ {print $2}') == ok ]] && break; sleep 0.1; done
		if [[ $name == ours ]]; then
			a=$(ours fo -redis-cluster "$(printf '127.0.0.1:%s,' "${ports[@]}" | sed 's/,$//')")
		else
			a=$(ref fo cluster "$(printf '127.0.0.1:%s,' "${ports[@]}" | sed 's/,$//')")
		fi
		load -addr "$a" -domain fault -streams 1 -keys 1 -n 1 >/dev/null # the key exists: find its master
		master=$(for p in "${ports[@]}"; do
			if [[ $(redis-cli -p "$p" role | head -1) == master && $(redis-cli -p "$p" dbsize) -gt 0 ]]; then echo "$p"; fi
		done | head -1)
		mpid=$(redis-cli -p "$master" info server | tr -d '\r' | awk -F: '/^process_id/ {print $2}')
		fault "$name" "$a" "kill -9 $mpid" failover
		for p in "${ports[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
	done
}

for s in "${sections[@]}"; do "$s"; done
