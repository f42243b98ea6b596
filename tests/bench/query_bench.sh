#!/usr/bin/env bash
# query_bench.sh OLD_BUILD NEW_BUILD
#
# What a `mycel query` costs as a user types it, for two builds of mycel
# side by side in one run (the machine is shared and noisy: the builds
# alternate, round after round, and the table gives medians and the
# new/old ratio). Each build's myceld runs in turn on its own copy of one
# state directory on tmpfs, holding KEYS keys of VALUE_BYTES-byte JSON
# values in the kv namespace, and each query runs RUNS times through that
# build's CLI (a process per query: what `mycel query` costs, connection
# included).
#
# Queries: count(*) over kv (its relation holds every value), count(*)
# over members, and the node list (small relations, next to the large kv).
#
# Knobs (environment): KEYS (at least 85000: written by 4 clients of
# NEW_BUILD's state_put_bench for as long as it takes), VALUE_BYTES (512),
# ROUNDS (3), RUNS (5 per round and query).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: query_bench.sh OLD_BUILD NEW_BUILD (build directories)" >&2
  exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
KEYS=${KEYS:-85000}
VALUE_BYTES=${VALUE_BYTES:-512}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-5}
for b in "$OLD" "$NEW"; do
  for f in daemon/myceld cli/mycel; do
    [[ -x $b/$f ]] || { echo "query_bench.sh: no $b/$f" >&2; exit 1; }
  done
done
[[ -x $NEW/tests/bench/state_put_bench ]] || {
  echo "query_bench.sh: no $NEW/tests/bench/state_put_bench" >&2
  exit 1
}

work=$(mktemp -d /dev/shm/mycel-query-bench.XXXXXX)
pid=""
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# start BUILD STATE_DIR: runs that build's myceld; sets $pid.
start() {
  "$1/daemon/myceld" --node-name qb --state-dir "$2" --socket "$work/s.sock" \
    --cgroup-subtree mycel-query-bench --cell-pool 0 --log-level warn \
    >"$work/d.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    "$1/cli/mycel" --socket "$work/s.sock" node health >/dev/null 2>&1 &&
      return 0
    sleep 0.1
  done
  echo "query_bench.sh: myceld of $1 did not start: $(tail -2 "$work/d.log")" >&2
  exit 1
}

stop() {
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}

# The state directory every round copies: KEYS keys, written once.
start "$NEW" "$work/base"
M="$NEW/cli/mycel --socket $work/s.sock"
# Each run writes keys bench/<client>/<seq> from seq 0, over the last
# run's: run for twice as long until one run wrote enough.
have=0
seconds=5
while ((have < KEYS)); do
  "$NEW/tests/bench/state_put_bench" --socket "$work/s.sock" --clients 4 \
    --value-size "$VALUE_BYTES" --duration "$seconds" --warmup 0 >/dev/null
  have=$($M -o json query "SELECT count(*) AS n FROM kv" | jq '.[0].n')
  seconds=$((seconds * 2))
done
stop
db_mb=$(du -m "$work/base/mycel.db" | cut -f1)

queries=(
  "SELECT count(*) FROM kv"
  "SELECT count(*) FROM members"
  "SELECT name FROM nodes"
)
declare -A times  # "<build> <query index>" -> ms list

for ((round = 1; round <= ROUNDS; ++round)); do
  for build in old new; do
    dir=$OLD
    [[ $build == new ]] && dir=$NEW
    rm -rf "$work/st" && cp -a "$work/base" "$work/st"
    start "$dir" "$work/st"
    for q in "${!queries[@]}"; do
      for ((i = 0; i < RUNS; ++i)); do
        s=$(date +%s%N)
        "$dir/cli/mycel" --socket "$work/s.sock" query "${queries[$q]}" \
          >/dev/null
        e=$(date +%s%N)
        times["$build $q"]+="$(((e - s) / 1000000)) "
      done
    done
    stop
  done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "mycel query, through the CLI: $have keys of $VALUE_BYTES B in kv" \
  "(database ${db_mb} MB, tmpfs), $ROUNDS rounds x $RUNS runs, builds alternating"
printf '%-32s %10s %10s %8s\n' "query" "old ms" "new ms" "new/old"
for q in "${!queries[@]}"; do
  o=$(echo "${times["old $q"]}" | median)
  n=$(echo "${times["new $q"]}" | median)
  printf '%-32s %10s %10s %8s\n' "${queries[$q]}" "$o" "$n" \
    "$(awk -v o="$o" -v n="$n" 'BEGIN { printf "%.2fx", n / o }')"
done
