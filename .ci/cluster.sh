#!/usr/bin/env bash
# Start or stop a throwaway 6-node Redis Cluster on loopback for the
# redlimit tests: ports 7001-7006 (REDLIMIT_CLUSTER_PORT moves them), 3
# masters with 1 replica each.
#
#   bash .ci/cluster.sh start    # (re)start it fresh and wait until it is healthy
#   bash .ci/cluster.sh status   # show cluster info / nodes
#   bash .ci/cluster.sh stop     # shut the nodes down and remove their data
#
# Then: REDIS_CLUSTER_ADDRS=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005,127.0.0.1:7006
#
# To run the Cluster suites on another server (the compatibility runs of the
# README), REDIS_SERVER names the server program as it does for the tests,
# REDIS_CLI the client, and REDLIMIT_CLUSTER_PORT the first of the 6 ports,
# so that such a cluster can run beside the default one:
#
#   REDIS_SERVER=/path/to/valkey-server REDLIMIT_CLUSTER_PORT=7101 bash .ci/cluster.sh start
#
# "start" first shuts down any Redis already answering on 7001-7006 (e.g. left
# over from an earlier run), so the cluster always starts from a known state.
# Each node gets its own directory under a fresh `mktemp -d` directory named
# redlimit-cluster.*; "stop" finds it through CONFIG GET dir and removes it.
set -euo pipefail

HOST=127.0.0.1
BASE=${REDLIMIT_CLUSTER_PORT:-7001}
PORTS=("$BASE" $((BASE + 1)) $((BASE + 2)) $((BASE + 3)) $((BASE + 4)) $((BASE + 5)))
SERVER=${REDIS_SERVER:-redis-server}
CLI=${REDIS_CLI:-redis-cli}
READY_TIMEOUT=${REDLIMIT_CLUSTER_READY_TIMEOUT:-30} # seconds
TMP_PREFIX=redlimit-cluster

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cli() { # cli PORT ARGS... : redis-cli that cannot hang forever
	local port=$1
	shift
	timeout 5 "$CLI" -h "$HOST" -p "$port" "$@"
}

answers() { [[ "$(cli "$1" ping 2>/dev/null)" == PONG ]]; }

port_open() { # something accepts TCP connections on the port
	timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

info_field() { # info_field PORT SECTION FIELD
	{ cli "$1" info "$2" 2>/dev/null | tr -d '\r' | sed -n "s/^$3://p"; } || true
}

cluster_field() { # cluster_field PORT FIELD
	{ cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"; } || true
}

# stop_node PORT: shut down the Redis on PORT (if any) and wait until it is
# gone; prints the node's data dir (CONFIG GET dir) so cmd_stop can remove it
# once every node is down (a node whose cwd was deleted can't answer CONFIG GET dir).
stop_node() {
	local port=$1 pid dir i
	if ! answers "$port"; then
		if port_open "$port"; then
			die "port $port is in use by something that is not a Redis answering PING; free it first"
		fi
		return 0
	fi
	pid=$(info_field "$port" server process_id)
	dir=$({ cli "$port" config get dir 2>/dev/null | tr -d '\r' | sed -n 2p; } || true)
	log "shutting down redis on port $port (pid ${pid:-?}, dir ${dir:-?})"
	cli "$port" shutdown nosave >/dev/null 2>&1 || true
	for ((i = 0; i < 100; i++)); do # up to 10 s
		if ! port_open "$port" && { [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; }; then
			break
		fi
		sleep 0.1
	done
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		log "pid $pid still alive after SHUTDOWN; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	if port_open "$port"; then
		die "port $port is still in use after shutting its Redis down"
	fi
	printf '%s\n' "$dir"
}

cmd_stop() {
	local port dir parent dirs=()
	for port in "${PORTS[@]}"; do
		dir=$(stop_node "$port") || exit 1
		[[ -n "$dir" ]] && dirs+=("$dir")
	done
	# Remove data dirs only if they are ours: <tmp>/redlimit-cluster.XXXXXX/<port>.
	for dir in "${dirs[@]}"; do
		parent=$(dirname "$dir")
		if [[ "$(basename "$parent")" == "$TMP_PREFIX".* && -d "$parent" ]]; then
			log "removing $parent"
			rm -rf -- "$parent"
		fi
	done
	log "stopped; ports ${PORTS[0]}-${PORTS[-1]} are free"
}

# nodes_view_ok PORT: in PORT's CLUSTER NODES, all 6 nodes are connected with
# no fail/pfail/handshake/noaddr flag, 3 masters own slots, and 3 replicas
# each follow one of those masters, one per master.
nodes_view_ok() {
	{ cli "$1" cluster nodes 2>/dev/null || true; } | tr -d '\r' | awk '
		NF < 8 { next }
		{ n++ }
		$3 ~ /(^|,)(fail[?]?|handshake|noaddr)(,|$)/ || $8 != "connected" { bad++ }
		$3 ~ /(^|,)master(,|$)/ && NF >= 9 { m[$1] = 1; nm++ }
		$3 ~ /(^|,)slave(,|$)/ { s[$4]++; ns++ }
		END {
			if (n != 6 || bad || nm != 3 || ns != 3) exit 1
			for (id in s) if (!(id in m) || s[id] != 1) exit 1
		}'
}

# healthy: every node sees cluster_state:ok with all 16384 slots served, 6
# known nodes and 3 shards, and the same 3-masters-3-replicas topology in
# CLUSTER NODES; exactly 3 masters, each with one online replica; every
# replica's link to its master is up; redis-cli --cluster check agrees.
healthy() {
	local port role masters=0 replicas=0 check
	for port in "${PORTS[@]}"; do
		nodes_view_ok "$port" || return 1
		[[ "$(cluster_field "$port" cluster_state)" == ok ]] || return 1
		[[ "$(cluster_field "$port" cluster_slots_assigned)" == 16384 ]] || return 1
		[[ "$(cluster_field "$port" cluster_slots_ok)" == 16384 ]] || return 1
		[[ "$(cluster_field "$port" cluster_known_nodes)" == 6 ]] || return 1
		[[ "$(cluster_field "$port" cluster_size)" == 3 ]] || return 1
		role=$(info_field "$port" replication role)
		case $role in
		master)
			masters=$((masters + 1))
			[[ "$(info_field "$port" replication connected_slaves)" == 1 ]] || return 1
			[[ "$(info_field "$port" replication slave0)" == *state=online* ]] || return 1
			;;
		slave)
			replicas=$((replicas + 1))
			[[ "$(info_field "$port" replication master_link_status)" == up ]] || return 1
			;;
		*) return 1 ;;
		esac
	done
	((masters == 3 && replicas == 3)) || return 1
	check=$(TERM=dumb timeout 10 "$CLI" --cluster check "$HOST:${PORTS[0]}" 2>&1) || return 1
	grep -q '\[OK\] All nodes agree about slots configuration' <<<"$check" || return 1
	grep -q '\[OK\] All 16384 slots covered' <<<"$check" || return 1
	! grep -q '\[ERR\]' <<<"$check"
}

dump_logs() {
	local base=$1 port
	for port in "${PORTS[@]}"; do
		if [[ -f "$base/$port/log" ]]; then
			log "---- tail of $base/$port/log"
			tail -n 20 "$base/$port/log" >&2 || true
		fi
	done
	for port in "${PORTS[@]}"; do
		if answers "$port"; then
			log "---- port $port: cluster info / replication"
			cli "$port" cluster info 2>&1 | tr -d '\r' | grep -E '^cluster_(state|slots_|known_nodes|size)' >&2 || true
			cli "$port" info replication 2>&1 | tr -d '\r' | grep -E '^(role|connected_slaves|slave0|master_link_status)' >&2 || true
		else
			log "---- port $port: not answering"
		fi
	done
}

cmd_start() {
	command -v "$SERVER" >/dev/null || die "$SERVER not found (apt-get install -y redis-server, or set REDIS_SERVER)"
	command -v "$CLI" >/dev/null || die "$CLI not found (apt-get install -y redis-tools, or set REDIS_CLI)"

	log "making sure ports ${PORTS[0]}-${PORTS[-1]} are free (shutting down any previous nodes)"
	cmd_stop

	local base port i
	base=$(mktemp -d -t "$TMP_PREFIX.XXXXXX")
	log "node directories under $base"
	# On any failure from here on: show the logs, stop what was started.
	trap 'rc=$?; if ((rc != 0)); then log "start failed"; dump_logs "'"$base"'"; cmd_stop || true; fi' EXIT

	for port in "${PORTS[@]}"; do
		mkdir -p "$base/$port"
		log "starting $SERVER on $HOST:$port"
		"$SERVER" \
			--cluster-enabled yes \
			--cluster-config-file nodes.conf \
			--cluster-node-timeout 2000 \
			--save "" \
			--appendonly no \
			--repl-diskless-sync-delay 0 \
			--daemonize yes \
			--bind "$HOST" \
			--port "$port" \
			--dir "$base/$port" \
			--pidfile "$base/$port/redis.pid" \
			--logfile "$base/$port/log"
	done
	for port in "${PORTS[@]}"; do
		for ((i = 0; i < 100; i++)); do # up to 10 s
			answers "$port" && break
			sleep 0.1
		done
		answers "$port" || die "redis-server on port $port did not come up"
	done

	local addrs=()
	for port in "${PORTS[@]}"; do addrs+=("$HOST:$port"); done
	log "$CLI --cluster create ${addrs[*]} --cluster-replicas 1 --cluster-yes"
	TERM=dumb timeout 60 "$CLI" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes </dev/null |
		sed 's/^/[cluster create] /' >&2

	log "waiting up to ${READY_TIMEOUT}s for the cluster to be healthy"
	local start=$SECONDS
	until healthy; do
		if ((SECONDS - start >= READY_TIMEOUT)); then
			die "cluster not healthy after ${READY_TIMEOUT}s"
		fi
		sleep 0.5
	done
	log "cluster healthy after $((SECONDS - start))s: 3 masters + 3 replicas, 16384 slots covered"
	cli "${PORTS[0]}" cluster nodes | sed 's/^/[cluster nodes] /' >&2
	trap - EXIT
}

cmd_status() {
	local port
	for port in "${PORTS[@]}"; do
		if answers "$port"; then
			printf '%s: %s, %s\n' "$port" "$(info_field "$port" replication role)" \
				"cluster_state:$(cluster_field "$port" cluster_state)"
		else
			printf '%s: down\n' "$port"
		fi
	done
	if answers "${PORTS[0]}"; then cli "${PORTS[0]}" cluster nodes; fi
	if healthy; then echo "healthy"; else echo "NOT healthy"; return 1; fi
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
