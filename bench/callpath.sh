#!/usr/bin/env bash
# Counts the functions, and the files they are in, of the project that one
# Gin request runs through (issue 26), with the Redis round trips it makes:
# for a plain admitted request, and for one under Config.Settle whose
# handler reports its cost.
#
# The test binary of ginlimit is built with coverage over the project's
# packages, and TestCallPath (ginlimit/callpath_test.go) run per case
# twice after the same warm-up: serving no more requests, and serving
# CALLPATH_N (100) more. The blocks whose counters grew by about N are the
# request's path; cmd/callpath credits each to the function around it. (The
# counters cannot be cleared mid-test with runtime/coverage: see
# TestCallPath.) No Redis needed: miniredis. Takes a minute or two, most
# of it the build.
#
#   bash bench/callpath.sh
#   CALLPATH_KEEP=/tmp/cp bash bench/callpath.sh   # keep the profiles there
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n ${CALLPATH_KEEP:-} ]]; then
  dir=$CALLPATH_KEEP
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi
# Every package of the project's modules that the test links is counted;
# the pattern reaches across the modules of go.work.
go test -c -o "$dir/ginlimit.test" -cover -covermode=atomic \
  -coverpkg=github.com/redlimit/redlimit/... ./ginlimit
go build -o "$dir/callpath" ./bench/cmd/callpath
n=${CALLPATH_N:-100}
for c in plain settle; do
  for k in 0 "$n"; do
    mkdir -p "$dir/r$k"
    # The test binary runs in its package's directory, as under go test.
    (cd ginlimit && CALLPATH_DIR="$dir/r$k" CALLPATH_REQUESTS=$k "$dir/ginlimit.test" \
      -test.run "^TestCallPath\$/^$c\$" -test.count=1 \
      -test.coverprofile="$dir/$c.$k.txt" >"$dir/$c.$k.log" 2>&1) ||
      { cat "$dir/$c.$k.log" >&2; exit 1; }
  done
  "$dir/callpath" -root . -case "$c" -n "$n" "$dir/$c.0.txt" "$dir/$c.$n.txt"
  trips=$(cat "$dir/r$n/$c.trips")
  echo "  Redis round trips per request: $((trips / n)) ($trips for $n requests)"
done
