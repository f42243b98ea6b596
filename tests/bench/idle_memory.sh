#!/usr/bin/env bash
# idle_memory.sh BUILD_DIR
# Starts myceld and the bare gRPC anchor side by side, lets both idle, makes
# the same 20 health calls to each, lets them idle again, and prints VmRSS and
# RssAnon for both (median of 5 samples, one second apart).
set -euo pipefail
build=${1:-build}
tmp=$(mktemp -d)
trap 'kill $d $a 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT

"$build/daemon/myceld" --state-dir "$tmp/state" --socket "$tmp/myceld.sock" 2>"$tmp/d.log" &
d=$!
"$build/tests/bench/bare_grpc_server" "$tmp/bare.sock" 2>"$tmp/a.log" &
a=$!
sleep 2
for i in $(seq 20); do
  "$build/cli/mycel" --socket "$tmp/myceld.sock" node health >/dev/null
  "$build/cli/mycel" --socket "$tmp/bare.sock" node health >/dev/null
done
sleep 2

kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
sample() {  # sample PID KEY
  for i in 1 2 3 4 5; do kib "$1" "$2"; sleep 1; done | median
}
dr=$(sample $d VmRSS); da=$(sample $d RssAnon)
ar=$(sample $a VmRSS); aa=$(sample $a RssAnon)
printf '%-22s %12s %12s\n' "process" "VmRSS MiB" "RssAnon MiB"
printf '%-22s %12.1f %12.1f\n' "myceld" "$(echo "$dr/1024" | bc -l)" "$(echo "$da/1024" | bc -l)"
printf '%-22s %12.1f %12.1f\n' "bare gRPC (anchor)" "$(echo "$ar/1024" | bc -l)" "$(echo "$aa/1024" | bc -l)"
printf '%-22s %12.2f %12.2f\n' "ratio myceld/anchor" "$(echo "$dr/$ar" | bc -l)" "$(echo "$da/$aa" | bc -l)"
