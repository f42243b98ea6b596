#!/usr/bin/env bash
# cells_bench.sh [BUILD_DIR]
#
# The cost of running one sandboxed /bin/true, mycel against runc and crun,
# side by side in one run (the machine is shared and noisy: medians and
# ratios, never lone absolute times). Needs root. Prints one table.
#
# 1. Whole process, with hyperfine (its shell start-up is subtracted):
#    /bin/true and `mycel --version` as floors; `mycel run` with
#    pid+mount+uts+ipc namespaces, memory 64M, pids 100 and the default
#    seccomp profile, on the host's filesystem (as the brief asks) and on a
#    busybox rootfs; `runc run` and `crun run` of OCI bundles with the same
#    namespaces (no network namespace for anyone: mycel's cell has none),
#    the same limits, Docker's capability set, and a seccomp profile built
#    from the very allow-list of mycel's default profile
#    (runtime/seccomp/internal/syscall_tables.cc). Two bundles: "runc spec
#    mounts" (runc's defaults: proc, dev, devpts, shm, mqueue, sysfs, cgroup,
#    masked and read-only paths, read-only root) and "proc only", which does
#    what `mycel run --rootfs` does (bind the rootfs, mount proc,
#    pivot_root). Rows are measured in ROUNDS rounds, the order reversed
#    each round, and each row's samples are pooled.
# 2. The API, from a client that is already connected (cells_api_bench):
#    Create, Start, Wait, Delete, and the single Cells.Run call.
# 3. An experiment, not a mycel feature (cgroup v1 only): the same mycel
#    rows while an empty freezer cgroup of this script is kept FROZEN. On v1
#    the kernel flips a static key (patching kernel text on every CPU) when
#    the first cgroup freezes and the last thaws; myceld freezes each cell
#    to kill it, so every delete pays two flips unless another cgroup is
#    frozen. The difference between the two runs is that cost.
# Before measuring, each runtime runs a probe inside its sandbox that prints
# the memory limit, pids.max, seccomp mode, no_new_privs, CapEff and whether
# the net namespace is the host's: the settings are seen, not assumed, to
# be equal.
#
# Knobs (environment): RUNS (per row, default 50), WARMUP (5), ROUNDS (2),
# API_RUNS (200), API_WARMUP (10), EXPERIMENT (1; 0 skips part 3).
# Defaults take about 2-3 minutes on a 2-CPU machine.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  echo "cells_bench.sh: must run as root: cells, runc and crun need cgroups," \
    "namespaces and pivot_root (try: sudo $0 $*)" >&2
  exit 1
fi

src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-2}
API_RUNS=${API_RUNS:-200}
API_WARMUP=${API_WARMUP:-10}
EXPERIMENT=${EXPERIMENT:-1}

myceld=$build/daemon/myceld
mycel=$build/cli/mycel
api_bench=$build/tests/bench/cells_api_bench

die() {
  echo "cells_bench.sh: $*" >&2
  exit 1
}
log() { echo "cells_bench: $*" >&2; }

for bin in "$myceld" "$mycel" "$api_bench"; do
  [[ -x $bin ]] ||
    die "$bin is missing: build it (ninja -C $build myceld mycel cells_api_bench)"
done
for tool in hyperfine jq runc unshare mountpoint; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
busybox=/bin/busybox
[[ -x $busybox ]] || die "$busybox is missing (apt-get install busybox-static)"
if ldd "$busybox" >/dev/null 2>&1; then
  die "$busybox is dynamically linked; the rootfs needs busybox-static"
fi
((RUNS / ROUNDS >= 2)) || die "RUNS/ROUNDS must be at least 2"

tmp=$(mktemp -d /tmp/cells-bench.XXXXXX)
# Container ids and the experiment's cgroup start with this, so cleanup
# finds exactly ours.
idp=cb$$
sentinel=/sys/fs/cgroup/freezer/$idp-frozen-sentinel
daemon_pid=

cleanup() {
  set +e
  if [[ -n $daemon_pid ]]; then
    kill -TERM "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  for rt in runc crun; do
    command -v "$rt" >/dev/null || continue
    for id in $("$rt" list -q 2>/dev/null | grep "^$idp"); do
      "$rt" delete -f "$id" >/dev/null 2>&1
    done
  done
  if [[ -d $sentinel ]]; then
    echo THAWED >"$sentinel/freezer.state"
    rmdir "$sentinel"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the OCI bundles ----------------------------------------------------------
rootfs=$tmp/rootfs
mkdir -p "$rootfs/bin" "$rootfs/proc" "$rootfs/dev" "$rootfs/sys" "$rootfs/tmp"
cp "$busybox" "$rootfs/bin/busybox"
# The measured command is /bin/true; the other applets serve the probe.
for applet in true sh cat grep cut readlink; do
  ln -s busybox "$rootfs/bin/$applet"
done

# A Docker-like seccomp profile for runc/crun from mycel's own default
# allow-list, so that both sides filter the same syscalls: default EPERM;
# clone only without namespace flags (Docker's mask 0x7E020000); clone3
# ENOSYS (libc falls back to clone); personality and socket limited to the
# values mycel's kDefaultConditional allows.
tables=$src/runtime/seccomp/internal/syscall_tables.cc
awk '/kDefaultAllow\[\] = \{/ {f = 1; next} f && /^};/ {exit} f' "$tables" |
  grep -E '^\s*"' | grep -oE '[a-z0-9_]+' >"$tmp/allow.txt"
(($(wc -l <"$tmp/allow.txt") > 250)) ||
  die "could not read mycel's default allow-list from $tables"
# The AF_* numbers of mycel's kSocketFamilies (linux/socket.h).
families='[1,2,3,4,5,6,7,8,9,10,11,13,14,15,16,17,18,21,22,24,26,27,28,29,
  30,31,32,34,35,36,37,42,43,44,45]'
jq -n --rawfile allow "$tmp/allow.txt" --argjson fams "$families" '{
  defaultAction: "SCMP_ACT_ERRNO",
  defaultErrnoRet: 1,
  architectures: ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
  syscalls: ([
    {names: ($allow | split("\n") | map(select(length > 0))),
     action: "SCMP_ACT_ALLOW"},
    {names: ["clone"], action: "SCMP_ACT_ALLOW",
     args: [{index: 0, value: 2114060288, valueTwo: 0,
             op: "SCMP_CMP_MASKED_EQ"}]},
    {names: ["clone3"], action: "SCMP_ACT_ERRNO", errnoRet: 38}]
    + ([0, 8, 131072, 131080, 4294967295] | map(
      {names: ["personality"], action: "SCMP_ACT_ALLOW",
       args: [{index: 0, value: ., op: "SCMP_CMP_EQ"}]}))
    + ($fams | map(
      {names: ["socket"], action: "SCMP_ACT_ALLOW",
       args: [{index: 0, value: ., op: "SCMP_CMP_EQ"}]})))
}' >"$tmp/seccomp.json"

(cd "$tmp" && runc spec) # runc's own defaults are the starting point
caps='["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER",
  "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP",
  "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL",
  "CAP_AUDIT_WRITE"]'
# bundle NAME JQ-FILTER [JQ-ARGS...]: $tmp/oci-NAME, the common settings,
# then the filter.
bundle() {
  local name=$1 filter=$2
  shift 2
  mkdir -p "$tmp/oci-$name"
  jq --arg root "$rootfs" --argjson caps "$caps" \
    --slurpfile seccomp "$tmp/seccomp.json" "$@" '
    .root.path = $root
    | .process.terminal = false
    | .process.args = ["/bin/true"]
    | .process.capabilities = {bounding: $caps, effective: $caps,
                               permitted: $caps}
    | .linux.namespaces = [{type: "pid"}, {type: "mount"}, {type: "uts"},
                           {type: "ipc"}]
    | .linux.resources.memory = {limit: 67108864}
    | .linux.resources.pids = {limit: 100}
    | .linux.seccomp = $seccomp[0]
    | '"$filter" "$tmp/config.json" >"$tmp/oci-$name/config.json"
}
bundle full '.'
bundle proc '.root.readonly = false
  | .mounts = [{destination: "/proc", type: "proc", source: "proc",
                options: ["nosuid", "noexec", "nodev"]}]
  | del(.linux.maskedPaths) | del(.linux.readonlyPaths)'

# The settings probe. Under runc/crun /sys/fs/cgroup/<controller> is the
# container's own cgroup; under mycel the host's tree is visible and
# /proc/self/cgroup gives the path.
# shellcheck disable=SC2016 # expanded inside the sandbox, not here
probe='cg() { d=$(grep ":$1:" /proc/self/cgroup | cut -d: -f3);
  cat "/sys/fs/cgroup/$1$d/$2" 2>/dev/null || cat "/sys/fs/cgroup/$1/$2"; }
st() { grep "^$1:" /proc/self/status | cut -f2; }
echo "$(cg memory memory.limit_in_bytes) $(cg pids pids.max) $(st Seccomp)" \
  "$(st NoNewPrivs) $(st CapEff) $(readlink /proc/self/ns/net)"'
# shellcheck disable=SC2016 # $probe is a jq variable
bundle probe '.process.args = ["/bin/sh", "-c", $probe]' --arg probe "$probe"

# --- crun on this host ----------------------------------------------------------
# crun 1.8 refuses to run at all on a hybrid cgroup host whose cgroup2
# hierarchy has a controller (here hugetlb, which no v1 hierarchy mounts):
# "cgroups in hybrid mode not supported, drop all controllers from
# cgroupv2", even with --cgroup-manager=disabled. It works in a private
# mount namespace in which /sys/fs/cgroup/unified is unmounted (legacy v1
# mode; the host is not changed), so its rows are measured there.
crun_mode=none
crun_wrap=()
crun_note=
if command -v crun >/dev/null; then
  if err=$(crun run --bundle "$tmp/oci-full" "${idp}c0" 2>&1); then
    crun_mode=host
  elif [[ $err == *hybrid* ]] && mountpoint -q /sys/fs/cgroup/unified &&
    unshare -m --propagation private sh -c \
      'umount /sys/fs/cgroup/unified && exec "$@"' _ \
      crun run --bundle "$tmp/oci-full" "${idp}c1" >/dev/null 2>&1; then
    crun_mode=private-v1
    crun_wrap=(unshare -m --propagation private sh -c
      'umount /sys/fs/cgroup/unified && exec "$@"' _)
    crun_note="crun refuses this host: \"$err\" (cgroup2 controllers:
    $(cat /sys/fs/cgroup/unified/cgroup.controllers)); its rows run in a
    private mount ns with /sys/fs/cgroup/unified unmounted"
  else
    crun_note="crun cannot run here, its rows are left out: $err"
  fi
else
  crun_note="crun is not installed, its rows are left out"
fi

# --- myceld -----------------------------------------------------------------------
sock=$tmp/myceld.sock
"$myceld" --state-dir "$tmp/state" --socket "$sock" --log-level warn \
  >"$tmp/myceld.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  "$mycel" --socket "$sock" node health >/dev/null 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null ||
    die "myceld exited: $(cat "$tmp/myceld.log")"
  sleep 0.1
done
"$mycel" --socket "$sock" node health >/dev/null ||
  die "myceld did not answer within 10 s: $(cat "$tmp/myceld.log")"

cell_flags="--isolate pid,mount,uts,ipc --memory-max 64M --pids-max 100"
cell_flags+=" --seccomp default"

# --- settings probe -----------------------------------------------------------------
host_net=$(readlink /proc/self/ns/net)
want="64M 100 2 1"
probe_ok=1
probe_cap=
probe_row() { # NAME OUTPUT
  local mem pids sec nnp cap net
  read -r mem pids sec nnp cap net <<<"$2"
  [[ $net == "$host_net" ]] && net="host's" || net="own"
  [[ $mem =~ ^[0-9]+$ ]] && mem="$((mem / 1048576))M"
  printf '  %-30s %8s %6s %8s %4s %17s %7s\n' "$1" \
    "$mem" "$pids" "$sec" "$nnp" "$cap" "$net"
  [[ "$mem $pids $sec $nnp" == "$want" && $net == "host's" ]] || probe_ok=0
  [[ -z $probe_cap || $cap == "$probe_cap" ]] || probe_ok=0
  probe_cap=$cap
}
{
  printf '  %-30s %8s %6s %8s %4s %17s %7s\n' "seen inside the sandbox" \
    "memory" "pids" "Seccomp" "NNP" "CapEff" "net ns"
  # shellcheck disable=SC2086
  probe_row "mycel run" \
    "$("$mycel" --socket "$sock" run $cell_flags -- /bin/sh -c "$probe")"
  probe_row "runc run" "$(runc run --bundle "$tmp/oci-probe" "${idp}p0")"
  if [[ $crun_mode != none ]]; then
    probe_row "crun run" \
      "$("${crun_wrap[@]}" crun run --bundle "$tmp/oci-probe" "${idp}p1")"
  fi
  if ((probe_ok)); then
    echo "  (equal: 64M, 100, seccomp filter, no_new_privs, same capabilities, no net ns)"
  else
    echo "  WARNING: the sandboxes differ (want $want, equal CapEff, host's net ns)"
  fi
} >"$tmp/probe.txt"

# --- 1. whole process ------------------------------------------------------------------
# Commands run through hyperfine's shell (its start-up is subtracted), so a
# container id is made unique per run with the shell's $$.
names=() cmds=() crun_names=() crun_cmds=()
add() { names+=("$1"); cmds+=("$2"); }
add_crun() { crun_names+=("$1"); crun_cmds+=("$2"); }
mycel_run="$mycel --socket $sock run $cell_flags"
runc_full="exec runc run --bundle $tmp/oci-full ${idp}rf\$\$"
add "/bin/true (floor)" "/bin/true"
add "mycel --version (CLI floor)" "$mycel --version"
add "mycel run (host fs)" "$mycel_run -- /bin/true"
add "mycel run --rootfs busybox" "$mycel_run --rootfs $rootfs -- /bin/true"
add "runc run (runc spec mounts)" "$runc_full"
add "runc run (proc only)" "exec runc run --bundle $tmp/oci-proc ${idp}rp\$\$"
if [[ $crun_mode != none ]]; then
  add_crun "crun run (runc spec mounts)" \
    "exec crun run --bundle $tmp/oci-full ${idp}cf\$\$"
  add_crun "crun run (proc only)" \
    "exec crun run --bundle $tmp/oci-proc ${idp}cp\$\$"
fi

# hf OUT.json RUNS NAME CMD [NAME CMD ...]: one hyperfine call over these
# rows, under the command prefix in the array `wrap` (empty, or crun's).
wrap=()
hf() {
  local out=$1 runs=$2 args=()
  shift 2
  while (($# > 0)); do
    args+=(-n "$1" "$2")
    shift 2
  done
  if ! "${wrap[@]}" hyperfine --style none -w "$WARMUP" -r "$runs" \
    --export-json "$out" "${args[@]}" >"$tmp/hf.out" 2>&1; then
    cat "$tmp/hf.out" >&2
    die "hyperfine failed (above)"
  fi
}
# pairs fwd|rev NAMES CMDS: NUL-separated NAME CMD pairs.
pairs() {
  local -n ns=$2 cs=$3
  local i
  if [[ $1 == fwd ]]; then
    for i in "${!ns[@]}"; do printf '%s\0%s\0' "${ns[$i]}" "${cs[$i]}"; done
  else
    for ((i = ${#ns[@]} - 1; i >= 0; i--)); do
      printf '%s\0%s\0' "${ns[$i]}" "${cs[$i]}"
    done
  fi
}
measure_crun() { # ROUND ORDER
  [[ $crun_mode != none ]] || return 0
  local -a p
  mapfile -d '' p < <(pairs "$2" crun_names crun_cmds)
  wrap=("${crun_wrap[@]}")
  hf "$tmp/crun-$1.json" "$((RUNS / ROUNDS))" "${p[@]}"
  wrap=()
}

for ((round = 1; round <= ROUNDS; round++)); do
  log "whole process, round $round/$ROUNDS"
  order=fwd
  ((round % 2 == 1)) || order=rev
  [[ $order == fwd ]] || measure_crun "$round" "$order"
  mapfile -d '' p < <(pairs "$order" names cmds)
  hf "$tmp/host-$round.json" "$((RUNS / ROUNDS))" "${p[@]}"
  [[ $order == rev ]] || measure_crun "$round" "$order"
done

# --- 2. the API ------------------------------------------------------------------------
log "API: $API_RUNS iterations after $API_WARMUP warm-ups"
# --gap-ms 0: the rows after 200 ms idle are ab_bench.sh's; here they would
# add two pauses to each of the iterations.
"$api_bench" --socket "$sock" --runs "$API_RUNS" --warmup "$API_WARMUP" \
  --gap-ms 0 --tsv >"$tmp/api.tsv"

# --- 3. experiment: the freezer static key held on ------------------------------------
experiment=0
if ((EXPERIMENT)) && mountpoint -q /sys/fs/cgroup/freezer &&
  mkdir "$sentinel" 2>/dev/null; then
  experiment=1
  echo FROZEN >"$sentinel/freezer.state"
  log "experiment: an empty freezer cgroup kept FROZEN"
  hf "$tmp/exp.json" "$RUNS" \
    "mycel run (host fs) +frozen sentinel" "$mycel_run -- /bin/true" \
    "runc run (runc spec mounts) +frozen sentinel" "$runc_full"
  "$api_bench" --socket "$sock" --runs "$((API_RUNS / 2))" \
    --warmup "$API_WARMUP" --gap-ms 0 --tsv >"$tmp/api-exp.tsv"
  echo THAWED >"$sentinel/freezer.state"
  rmdir "$sentinel"
fi

# --- the table ---------------------------------------------------------------------------
# name → pooled samples in ms, sorted
jq -s '[.[].results[]] | group_by(.command)
  | map({key: .[0].command,
         value: ([.[].times[]] | map(. * 1000) | sort)})
  | from_entries' "$tmp"/host-*.json "$tmp"/crun-*.json "$tmp"/exp.json \
  2>/dev/null >"$tmp/samples.json" || true
# Nearest-rank percentile, as cells_api_bench computes it.
pct() {
  jq -r --arg n "$1" --argjson q "$2" '.[$n] as $s | ($s | length) as $l
    | $s[([([($q * $l) | ceil, 1] | max), $l] | min) - 1]' "$tmp/samples.json"
}
runc_ms=$(pct "runc run (runc spec mounts)" 0.5)
row() { # NAME P50 P90 P99 [TARGET] [REFERENCE-MS]
  local ratio
  ratio=$(jq -n --argjson a "$2" --argjson b "${6:-$runc_ms}" '$a / $b')
  printf '%-44s %8.2f %8.2f %8.2f %7.2f  %s\n' "$1" "$2" "$3" "$4" "$ratio" \
    "${5:-}"
}
meets() { jq -en --argjson v "$1" --argjson l "$2" '$v <= $l' >/dev/null; }
hf_rows() { # NAME...
  local n p50 target
  for n in "$@"; do
    p50=$(pct "$n" 0.5)
    target=
    if [[ $n == "mycel run (host fs)"* ]]; then
      if meets "$p50" "$(jq -n --argjson r "${ref:-$runc_ms}" '$r / 2')"; then
        target="target ≤ 0.50×runc: met"
      else target="target ≤ 0.50×runc: MISSED"; fi
    fi
    row "$n" "$p50" "$(pct "$n" 0.9)" "$(pct "$n" 0.99)" "$target" "${ref:-}"
  done
}
api_rows() { # TSV [SUFFIX]
  local n p50 p90 p99 target
  while IFS=$'\t' read -r n p50 p90 p99; do
    target=
    if [[ $n == create+start+wait+delete || $n == Cells.Run* ]]; then
      if meets "$p50" 3; then target="target p50 ≤ 3 ms: met"; else
        target="target p50 ≤ 3 ms: MISSED"; fi
    fi
    row "$n${2:-}" "$p50" "$p90" "$p99" "$target" "${ref:-}"
  done <"$1"
}

{
  echo
  echo "== cells bench: kernel $(uname -r), $(nproc) CPUs, load" \
    "$(cut -d' ' -f1-3 /proc/loadavg), runc $(runc --version | awk 'NR == 1 {print $3}')," \
    "crun $(crun --version 2>/dev/null | awk 'NR == 1 {print $3}')"
  echo "   sandboxes: pid+mount+uts+ipc ns and NO net ns for all three; memory 64M," \
    "pids 100; mycel's default seccomp allow-list; Docker's capabilities"
  echo "   whole process: hyperfine, $RUNS runs per row in $ROUNDS rounds" \
    "(+$WARMUP warm-ups each); API: $API_RUNS iterations after $API_WARMUP warm-ups"
  [[ -z $crun_note ]] || echo "   note: $(echo "$crun_note" | tr -s ' \n' ' ')"
  echo
  cat "$tmp/probe.txt"
  echo
  printf '%-44s %8s %8s %8s %7s  %s\n' "row" "p50 ms" "p90 ms" "p99 ms" \
    "×runc" "target"
  echo "-- whole process (p50 = median; ×runc = p50 / runc (runc spec mounts) p50)"
  ref=
  hf_rows "${names[@]}" "${crun_names[@]}"
  echo "-- API, connected client (cells_api_bench; ×runc as above)"
  api_rows "$tmp/api.tsv"
  if ((experiment)); then
    ref=$(pct "runc run (runc spec mounts) +frozen sentinel" 0.5)
    echo "-- experiment: an empty freezer cgroup kept FROZEN (not a mycel" \
      "feature; ×runc against the runc row measured alongside)"
    hf_rows "mycel run (host fs) +frozen sentinel" \
      "runc run (runc spec mounts) +frozen sentinel"
    grep -E '^(create\+start|  Cells.Delete|Cells.Run)' "$tmp/api-exp.tsv" \
      >"$tmp/api-exp-short.tsv" || true
    api_rows "$tmp/api-exp-short.tsv" " +sentinel"
  fi
}
