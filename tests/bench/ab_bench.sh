#!/usr/bin/env bash
# ab_bench.sh OLD_BUILD NEW_BUILD
#
# Two builds of mycel side by side in one run, for "is the new code as fast
# as the old?" (the machine is shared and noisy: each row alternates old and
# new, round after round, and reports medians and the new/old ratio).
# Needs root. Each build runs its own myceld (own state dir, socket and
# cgroup subtree) and is driven by its own CLI.
#
# Rows:
#   - the API, from a connected client (NEW_BUILD's cells_api_bench against
#     each daemon; the proto is the same): create+start+wait+delete, each
#     step, and Cells.Run;
#   - `mycel run` as a user types it (hyperfine, no shell): the cells
#     bench's cell (pid,mount,uts,ipc, memory 64M, pids 100, default
#     seccomp) running /bin/true, back to back;
#   - the same `mycel run`, one every SPACING_MS (200 ms): how users start
#     work. On a cgroup v1 host without favordynmods each start then waits
#     for an RCU grace period that back-to-back starts do not (the previous
#     move is recent), so this row costs more;
#   - 8 concurrent `mycel run`, started together: the wall time until all
#     eight have ended (how far concurrent starts overlap).
#
# Knobs (environment): ROUNDS (5), API_RUNS (100), RUNS (20 per round and
# row), SPACED (20 per round), SPACING_MS (200), CONCURRENT (8).
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  echo "ab_bench.sh: must run as root (cells need cgroups and namespaces)" >&2
  exit 1
fi
[[ $# -eq 2 ]] || {
  echo "usage: ab_bench.sh OLD_BUILD NEW_BUILD" >&2
  exit 2
}
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
ROUNDS=${ROUNDS:-5}
API_RUNS=${API_RUNS:-100}
RUNS=${RUNS:-20}
SPACED=${SPACED:-20}
SPACING_MS=${SPACING_MS:-200}
CONCURRENT=${CONCURRENT:-8}
api_bench=$new/tests/bench/cells_api_bench
for b in "$old" "$new"; do
  for f in daemon/myceld cli/mycel; do
    [[ -x $b/$f ]] || { echo "ab_bench.sh: $b/$f is missing" >&2; exit 1; }
  done
done
[[ -x $api_bench ]] || { echo "ab_bench.sh: build cells_api_bench" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "ab_bench.sh: hyperfine missing" >&2; exit 1; }
command -v jq >/dev/null || { echo "ab_bench.sh: jq missing" >&2; exit 1; }

tmp=$(mktemp -d /tmp/ab-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The daemons' log keepers end once their streams are gone; make sure.
  for side in old new; do
    [[ -f $tmp/$side/state/logkeeper.lock ]] &&
      kill "$(cat "$tmp/$side/state/logkeeper.lock")" 2>/dev/null || true
    for h in "" cpu/ cpuacct/ memory/ pids/ freezer/ cpuset/; do
      rmdir "/sys/fs/cgroup/${h}ab-$side-$$" 2>/dev/null || true
    done
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

start_daemon() {  # SIDE BUILD
  mkdir -p "$tmp/$1"
  "$2/daemon/myceld" --state-dir "$tmp/$1/state" --socket "$tmp/$1/sock" \
    --cgroup-subtree "ab-$1-$$" --log-level warn 2>"$tmp/$1/log" &
  pids+=($!)
  for _ in $(seq 200); do
    "$2/cli/mycel" --socket "$tmp/$1/sock" node health >/dev/null 2>&1 && return
    sleep 0.05
  done
  echo "ab_bench.sh: $1 daemon did not start" >&2
  cat "$tmp/$1/log" >&2
  exit 1
}
start_daemon old "$old"
start_daemon new "$new"

cell_flags=(--isolate pid,mount,uts,ipc --memory-max 64M --pids-max 100)
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now_ms() { date +%s%N | awk '{printf "%.3f", $1/1e6}'; }

declare -A samples
add() { samples[$1]+="$2 "; }  # KEY VALUE

for round in $(seq "$ROUNDS"); do
  order=(old new)
  ((round % 2 == 0)) && order=(new old)
  echo "ab_bench: round $round of $ROUNDS (${order[*]})" >&2
  for side in "${order[@]}"; do
    b=$old; [[ $side == new ]] && b=$new
    sock=$tmp/$side/sock
    # API rows: cells_api_bench --tsv prints "row<TAB>p50<TAB>p90<TAB>p99<TAB>busy CPUs".
    # The busy-CPU figure of the Cells.Run rows says how far the machine's
    # CPUs were in use while they ran (2 of 2: CPU-bound, not waiting).
    while IFS=$'\t' read -r row p50 _ _ busy; do
      add "api|$row|$side" "$p50"
      [[ $busy == - || $row != *Cells.Run* ]] ||
        add "api|$row: busy CPUs (mean)|$side" "$busy"
    done < <("$api_bench" --socket "$sock" --runs "$API_RUNS" --warmup 5 --tsv)
    # `mycel run` back to back.
    hyperfine -N --style none -w 3 -r "$RUNS" --export-json "$tmp/hf.json" \
      "$b/cli/mycel --socket $sock run ${cell_flags[*]} -- /bin/true" >/dev/null
    add "run|back to back|$side" \
      "$(jq '.results[0].median * 1000' "$tmp/hf.json")"
    # `mycel run` spaced out.
    for _ in $(seq "$SPACED"); do
      sleep "$(awk "BEGIN {print $SPACING_MS/1000}")"
      t0=$(now_ms)
      "$b/cli/mycel" --socket "$sock" run "${cell_flags[@]}" -- /bin/true
      t1=$(now_ms)
      add "run|spaced ${SPACING_MS} ms|$side" "$(awk "BEGIN {print $t1-$t0}")"
    done
    # Concurrent runs.
    t0=$(now_ms)
    (
      for _ in $(seq "$CONCURRENT"); do
        "$b/cli/mycel" --socket "$sock" run "${cell_flags[@]}" -- /bin/true &
      done
      wait
    )
    t1=$(now_ms)
    add "run|${CONCURRENT} concurrent (all done)|$side" \
      "$(awk "BEGIN {print $t1-$t0}")"
  done
done

printf '\n%-40s %10s %10s %8s\n' "row (median, ms)" old new new/old
while IFS= read -r key; do
  o=$(tr ' ' '\n' <<<"${samples[$key|old]:-}" | grep . | median)
  n=$(tr ' ' '\n' <<<"${samples[$key|new]:-}" | grep . | median)
  [[ -n $o && -n $n ]] || continue
  printf '%-40s %10.2f %10.2f %8.2f\n' "${key#*|}" "$o" "$n" \
    "$(awk "BEGIN {print $n/$o}")"
done < <(printf '%s\n' "${!samples[@]}" | sed 's/|[^|]*$//' | sort -u)
