#!/usr/bin/env bash
# run_overlap.sh OLD_BUILD NEW_BUILD
#
# Do concurrent Cells.Run calls overlap inside myceld, or wait for each
# other? Wall time cannot say on a 2-CPU machine: one run already keeps
# more than one CPU busy, so 8 runs take about 8 times one run whether
# the daemon serialises them or not (docs/performance.md). This looks
# inside instead. During cells_api_bench's concurrent rows (8 calls at
# once, back to back and after 200 ms idle), perf records every clone3
# the daemon makes; a cell's spawn is one clone3 that returns once the
# cell's first process has set itself up (namespaces, cgroup move, seccomp)
# and exec'd, so a daemon that spawns one cell at a time never has two in
# flight. Thread creations are clone3 calls too; they take tens of
# microseconds and are left out by a floor of MIN_US (300) on a call's
# time.
#
# Per build, pooled over the rounds: how many spawns, the most in flight at
# once, the share of spawning time during which two or more were in flight,
# the mean number in flight while any was, and the rows' median wall times.
# Both daemons run side by side, old and new alternating round by round.
#
# Needs root and perf (linux-perf). Knobs (environment): ROUNDS (3), RUNS
# (20 iterations of each row per round), CONCURRENCY (8), MIN_US (300).
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  echo "run_overlap.sh: must run as root (cells need cgroups and namespaces)" >&2
  exit 1
fi
[[ $# -eq 2 ]] || {
  echo "usage: run_overlap.sh OLD_BUILD NEW_BUILD" >&2
  exit 2
}
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-20}
CONCURRENCY=${CONCURRENCY:-8}
MIN_US=${MIN_US:-300}
api_bench=$new/tests/bench/cells_api_bench
command -v perf >/dev/null || { echo "run_overlap.sh: perf missing (apt install linux-perf)" >&2; exit 1; }
[[ -x $api_bench ]] || { echo "run_overlap.sh: build cells_api_bench" >&2; exit 1; }
for b in "$old" "$new"; do
  [[ -x $b/daemon/myceld ]] || { echo "run_overlap.sh: $b/daemon/myceld is missing" >&2; exit 1; }
done
events=syscalls:sys_enter_clone3,syscalls:sys_exit_clone3
[[ -d /sys/kernel/tracing/events/syscalls/sys_enter_clone3 ||
  -d /sys/kernel/debug/tracing/events/syscalls/sys_enter_clone3 ]] || {
  echo "run_overlap.sh: no syscalls:sys_enter_clone3 tracepoint (mount tracefs?)" >&2
  exit 1
}

tmp=$(mktemp -d /tmp/run-overlap.XXXXXX)
declare -A pid
cleanup() {
  for side in old new; do
    [[ -n ${pid[$side]:-} ]] && kill "${pid[$side]}" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  for side in old new; do
    [[ -f $tmp/$side/state/logkeeper.lock ]] &&
      kill "$(cat "$tmp/$side/state/logkeeper.lock")" 2>/dev/null || true
    for h in "" cpu/ cpuacct/ memory/ pids/ freezer/ cpuset/; do
      rmdir "/sys/fs/cgroup/${h}overlap-$side-$$" 2>/dev/null || true
    done
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

for side in old new; do
  b=$old; [[ $side == new ]] && b=$new
  mkdir -p "$tmp/$side"
  "$b/daemon/myceld" --state-dir "$tmp/$side/state" --socket "$tmp/$side/sock" \
    --cgroup-subtree "overlap-$side-$$" --log-level warn 2>"$tmp/$side/log" &
  pid[$side]=$!
done
for side in old new; do
  for _ in $(seq 200); do
    "$api_bench" --socket "$tmp/$side/sock" --runs 1 --warmup 0 --gap-ms 0 \
      --concurrent-only --concurrency 1 >/dev/null 2>&1 && continue 2
    sleep 0.05
  done
  echo "run_overlap.sh: the $side daemon did not start" >&2
  cat "$tmp/$side/log" >&2
  exit 1
done

for round in $(seq "$ROUNDS"); do
  order=(old new)
  ((round % 2 == 0)) && order=(new old)
  echo "run_overlap: round $round of $ROUNDS (${order[*]})" >&2
  for side in "${order[@]}"; do
    perf record -q -e "$events" -p "${pid[$side]}" \
      -o "$tmp/$side/r$round.data" 2>/dev/null &
    rec=$!
    sleep 0.5  # perf attaches
    "$api_bench" --socket "$tmp/$side/sock" --runs "$RUNS" --warmup 2 \
      --concurrency "$CONCURRENCY" --concurrent-only --tsv \
      >>"$tmp/$side/rows.tsv"
    kill -INT "$rec"
    wait "$rec" || true
    perf script -i "$tmp/$side/r$round.data" 2>/dev/null >>"$tmp/$side/trace.txt"
  done
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# trace.txt lines: "COMM TID [CPU] SECONDS: syscalls:sys_enter_clone3: ..."
# Each round's trace is its own time line; spans never cross rounds.
overlap() {  # TRACE
  awk -v min_us="$MIN_US" '
    {
      ev = ""
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^\[[0-9]+\]$/) { tid = $(i - 1); t = $(i + 1); sub(/:$/, "", t) }
        if ($i ~ /sys_enter_clone3/) ev = "enter"
        if ($i ~ /sys_exit_clone3/) ev = "exit"
      }
      if (ev == "enter") start[tid] = t
      else if (ev == "exit" && (tid in start)) {
        if ((t - start[tid]) * 1e6 >= min_us) { n++; s[n] = start[tid]; e[n] = t }
        delete start[tid]
      }
    }
    END {
      if (n == 0) { print "0 0 0 0"; exit }
      # Sweep: +1 at each start, -1 at each end, in time order.
      m = 0
      for (i = 1; i <= n; i++) { m++; et[m] = s[i]; ed[m] = 1; m++; et[m] = e[i]; ed[m] = -1 }
      # insertion sort is fine for a few thousand events
      for (i = 2; i <= m; i++) {
        tt = et[i]; dd = ed[i]; j = i - 1
        while (j > 0 && (et[j] > tt || (et[j] == tt && ed[j] > dd))) { et[j+1] = et[j]; ed[j+1] = ed[j]; j-- }
        et[j+1] = tt; ed[j+1] = dd
      }
      cur = 0; mx = 0; any = 0; two = 0; weighted = 0
      for (i = 1; i <= m; i++) {
        if (i > 1 && cur > 0) {
          dt = et[i] - et[i-1]
          # Rounds are minutes apart: a gap that long is not in flight.
          if (dt < 1) { any += dt; weighted += cur * dt; if (cur >= 2) two += dt }
        }
        cur += ed[i]; if (cur > mx) mx = cur
      }
      printf "%d %d %.1f %.2f\n", n, mx, 100 * two / any, weighted / any
    }' "$1"
}

printf '\n%-52s %10s %10s\n' "8 concurrent Cells.Run, inside the daemon" old new
declare -A r
for side in old new; do
  read -r n mx two mean < <(overlap "$tmp/$side/trace.txt")
  r[$side,n]=$n r[$side,max]=$mx r[$side,two]=$two r[$side,mean]=$mean
  r[$side,back]=$(awk -F'\t' '$1 ~ /concurrent Cells.Run \(all done\)/ {print $2}' "$tmp/$side/rows.tsv" | median)
  r[$side,idle]=$(awk -F'\t' '$1 ~ /concurrent Cells.Run after/ {print $2}' "$tmp/$side/rows.tsv" | median)
done
printf '%-52s %10s %10s\n' "spawns traced (clone3 of ${MIN_US} us or more)" "${r[old,n]}" "${r[new,n]}"
printf '%-52s %10s %10s\n' "most spawns in flight at once" "${r[old,max]}" "${r[new,max]}"
printf '%-52s %9s%% %9s%%\n' "spawning time with 2 or more in flight" "${r[old,two]}" "${r[new,two]}"
printf '%-52s %10s %10s\n' "mean spawns in flight while any is" "${r[old,mean]}" "${r[new,mean]}"
printf '%-52s %10s %10s\n' "row wall time, median ms: back to back" "${r[old,back]}" "${r[new,back]}"
printf '%-52s %10s %10s\n' "row wall time, median ms: after 200 ms idle" "${r[old,idle]}" "${r[new,idle]}"
