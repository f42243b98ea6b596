#!/usr/bin/env bash
# boot_bench.sh [N]
#
# Boot time of the myceld microVM image against its anchor, the same kernel
# with a busybox /init that prints a line and powers off. In one run it
# alternates N boots (default 5) of each:
#   anchor  QEMU start -> MYCEL-ANCHOR-INIT on the console
#   myceld  QEMU start -> myceld's "myceld ready" line on the console, and
#           QEMU start -> `mycel node health` answers over mTLS from the host;
#           then boot_to_start and start_to_ready as myceld reports them
#           (guest clock), and `node shutdown` -> QEMU exit.
# It prints medians (min, max) and the ratio myceld/anchor.
#
# Environment: MYCEL_BUILD_DIR (default: the repo's build/), MYCEL_IMAGE_DIR
# (default: $MYCEL_BUILD_DIR/image; built with packaging/image/build.sh when
# it has no image yet).
set -euo pipefail

n=${1:-5}
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [N]" >&2; exit 2; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${MYCEL_BUILD_DIR:-$repo/build}
image=${MYCEL_IMAGE_DIR:-$build/image}
boot=$repo/packaging/image/boot.sh
mycel=$build/cli/mycel
anchor_marker=MYCEL-ANCHOR-INIT
ready_marker='msg="myceld ready"'
boot_timeout=120  # seconds; TCG on a busy host is slow, a hang is not

[ -x "$mycel" ] || { echo "boot_bench: $mycel is missing; build mycel first" >&2; exit 1; }
if [ ! -f "$image/initramfs.img" ] || [ ! -f "$image/busybox-initramfs.img" ]; then
  "$repo/packaging/image/build.sh" --build-dir "$build" "$image"
fi

tmp=$(mktemp -d)
qemu_pid=""
cleanup() {
  if [ -n "$qemu_pid" ]; then
    kill -KILL -- "-$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

now_ms() {  # wall clock in ms, without forking
  local t=${EPOCHREALTIME/./}
  echo $((t / 1000))
}

free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ] && { echo "$p"; return; }
  done
  echo "boot_bench: no free port found" >&2
  return 1
}

cli() {  # cli PORT ARGS...
  local port=$1
  shift
  "$mycel" --node "127.0.0.1:$port" --tls-ca "$image/pki/ca.crt" \
    --tls-cert "$image/pki/client.crt" --tls-key "$image/pki/client.key" "$@"
}

start_guest() {  # start_guest CONSOLE PORT [boot.sh args]; sets qemu_pid
  local console=$1 port=$2
  shift 2
  setsid "$boot" "$image" --api-port "$port" "$@" >"$console" 2>&1 </dev/null &
  qemu_pid=$!
}

alive() { kill -0 "$qemu_pid" 2>/dev/null; }

wait_exit() {  # wait_exit SECONDS: QEMU's exit status, or 124 on timeout
  local deadline=$(( $(now_ms) + $1 * 1000 )) rc
  while alive && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.02; done
  if alive; then
    kill -KILL -- "-$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
    qemu_pid=""
    return 124
  fi
  rc=0
  wait "$qemu_pid" || rc=$?
  qemu_pid=""
  return "$rc"
}

fail() {  # fail WHAT CONSOLE
  echo "boot_bench: $1; console:" >&2
  tail -n 40 "$2" >&2
  exit 1
}

# Seconds of a protobuf JSON Duration ("1.5s") for FIELD in node info JSON.
duration_ms() {  # duration_ms JSON FIELD
  sed -n "s/.*\"$2\": \"\\([0-9.]*\\)s\".*/\\1/p" <<<"$1" | awk '{printf "%.1f\n", $1 * 1000}'
}

anchor_ms=() ready_ms=() api_ms=() b2s_ms=() s2r_ms=() off_ms=()

boot_anchor() {
  local console=$tmp/anchor.log port t0 t
  port=$(free_port)
  t0=$(now_ms)
  start_guest "$console" "$port" --initrd "$image/busybox-initramfs.img"
  until grep -qF "$anchor_marker" "$console"; do
    alive || fail "anchor guest exited before its marker" "$console"
    [ $(( $(now_ms) - t0 )) -lt $((boot_timeout * 1000)) ] || fail "anchor marker timed out" "$console"
    sleep 0.01
  done
  t=$(now_ms)
  anchor_ms+=($((t - t0)))
  wait_exit 60 || fail "anchor guest did not power off cleanly (status $?)" "$console"
}

boot_myceld() {
  local console=$tmp/myceld.log port t0 t_ready t_api info t_off
  port=$(free_port)
  t0=$(now_ms)
  start_guest "$console" "$port"
  # Ask the API only once myceld says it serves: until the guest's network
  # is up, a forwarded call hangs for its whole deadline, which would blur
  # the measurement by up to a second.
  until grep -qF "$ready_marker" "$console"; do
    alive || fail "myceld guest exited before it was ready" "$console"
    [ $(( $(now_ms) - t0 )) -lt $((boot_timeout * 1000)) ] || fail "myceld ready line timed out" "$console"
    sleep 0.01
  done
  t_ready=$(now_ms)
  until cli "$port" --timeout 2 node health >/dev/null 2>&1; do
    alive || fail "myceld guest exited before its API answered" "$console"
    [ $(( $(now_ms) - t0 )) -lt $((boot_timeout * 1000)) ] || fail "myceld API timed out" "$console"
    sleep 0.01
  done
  t_api=$(now_ms)
  ready_ms+=($((t_ready - t0)))
  api_ms+=($((t_api - t0)))
  info=$(cli "$port" -o json node info) || fail "node info failed" "$console"
  b2s_ms+=("$(duration_ms "$info" boot_to_start)")
  s2r_ms+=("$(duration_ms "$info" start_to_ready)")
  t_off=$(now_ms)
  cli "$port" node shutdown >/dev/null || fail "node shutdown failed" "$console"
  wait_exit 60 || fail "myceld guest did not power off cleanly (status $?)" "$console"
  off_ms+=($(($(now_ms) - t_off)))
  ! grep -q "Kernel panic" "$console" || fail "the guest kernel panicked" "$console"
}

accel=TCG
[ -r /dev/kvm ] && [ -w /dev/kvm ] && accel=KVM
echo "boot_bench: $n alternating boots of each image ($accel, $(nproc) host cores, load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
for i in $(seq "$n"); do
  boot_anchor
  boot_myceld
  echo "boot_bench: round $i: anchor ${anchor_ms[-1]} ms, myceld ready ${ready_ms[-1]} ms, API ${api_ms[-1]} ms" >&2
done

stats() {  # stats VALUES...: "median min max"
  printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1}
    END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
         printf "%.1f %.1f %.1f\n", m, v[1], v[NR]}'
}
row() {  # row LABEL VALUES...
  local label=$1
  shift
  read -r med lo hi < <(stats "$@")
  printf '%-44s %10.1f %10.1f %10.1f\n' "$label" "$med" "$lo" "$hi"
}
median() { stats "$@" | cut -d' ' -f1; }

kernel=$(awk '$1 == "kernel_release" {print $2}' "$image/manifest.txt" 2>/dev/null || true)
printf '\nboot benchmark: %d boots each, %s, kernel %s\n' "$n" "$accel" "${kernel:-?}"
printf 'initramfs: myceld %s KiB, anchor %s KiB (gzip)\n\n' \
  "$(( $(stat -c %s "$image/initramfs.img") / 1024 ))" \
  "$(( $(stat -c %s "$image/busybox-initramfs.img") / 1024 ))"
printf '%-44s %10s %10s %10s\n' "ms" "median" "min" "max"
row "anchor:  QEMU start -> marker on console" "${anchor_ms[@]}"
row "myceld:  QEMU start -> \"myceld ready\" line" "${ready_ms[@]}"
row "myceld:  QEMU start -> API answers (host)" "${api_ms[@]}"
row "myceld:  boot_to_start (guest clock)" "${b2s_ms[@]}"
row "myceld:  start_to_ready (guest clock)" "${s2r_ms[@]}"
row "myceld:  node shutdown -> QEMU exit" "${off_ms[@]}"
printf '%-44s %10.2f\n' "ratio myceld API / anchor (medians)" \
  "$(awk -v a="$(median "${api_ms[@]}")" -v b="$(median "${anchor_ms[@]}")" 'BEGIN {print a / b}')"
printf '%-44s %10.1f ms (target <= 50 ms of userspace work)\n' \
  "median start_to_ready" "$(median "${s2r_ms[@]}")"
