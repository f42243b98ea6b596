#!/usr/bin/env bash
# memberlist_bench.sh [--impl memberlist[,mycel][,mycelhost]] [--nodes 10,50] [--runs 10]
#                     [--out FILE] [options]
#
# Membership on one host, the anchor for mycel's SWIM + Lifeguard:
# hashicorp/memberlist 0.2.2 (Debian's golang-github-hashicorp-memberlist-dev,
# built offline against /usr/share/gocode with Debian's Go 1.19), one process
# per node, all on 127.0.0.1. For each N and each run, with fresh processes:
#
# 1. Convergence. The seed (--seeds 1) or seeds (2: the second joins the
#    first) start and report START; then, at t0, the other N-seeds nodes are
#    launched together and join the seed(s) at about the same moment (a
#    failed join is retried every second, as Consul's retry_join does).
#    Convergence is the first moment at which every node sees all N members
#    alive (itself included), from t0 (the results also count it from the
#    first seed's launch: converge_from_seed_start_s). A node that saw N
#    and then lost one again (a false "dead" during the join storm) has not
#    converged: the mesh must be complete at one instant. Also recorded:
#    the last node's first sight of N members (a weaker measure), the
#    launch time (t0 to the last START line) and the removals seen before
#    the kill (false deaths).
#    A run that has not converged after --timeout (120 s) is recorded as a
#    timeout; its steps 2 and 3 are skipped.
# 2. Failure detection. One random non-seed node is SIGKILLed at t_kill.
#    Detection is the time from t_kill until the last survivor has marked it
#    dead (its "dead" event; "left"/"leave" would be counted and reported
#    too); the first survivor's time is recorded as well. Cap --detect-timeout.
# 3. Idle traffic. After --settle seconds (the death's broadcasts drain), the
#    survivors' send counters are read (SIGUSR1), again --idle seconds later;
#    each survivor's bytes sent per second, UDP and TCP separately and total.
#    Pooled over the survivors of all runs for the table.
#
# Median, p90 and max (nearest rank) per N; every run's convergence time is
# listed, so outliers show (a timeout prints as "T/O" and counts as the
# largest value). Runs of several implementations are interleaved (the order
# flips every run), so they share the machine's noise; the table then gives
# each row's median as a ratio of the first implementation's.
#
# The machine is shared: run it under nice and note the load it prints, e.g.
#   nice -n 10 tests/bench/memberlist_bench.sh --nodes 10,50 --runs 10 \
#     --out build-bench/membership.jsonl
# Defaults take about 30 minutes (10+10 runs of ~85 s: the idle window is
# 60 s, one full push-pull period at N=50 where memberlist scales 30 s to
# 60 s). --idle 20 --settle 5 for a quick look.
#
# Options:
#   --impl LIST          memberlist, mycel, mycelhost (all nodes in one
#                        process), comma-separated (memberlist)
#   --nodes LIST         node counts (10,50)
#   --runs R             runs per N and implementation (10)
#   --out FILE           append one JSON line per run (see "results" below)
#   --seeds 1|2          nodes everybody joins (1)
#   --timeout S          convergence cap (120); --detect-timeout S (60)
#   --settle S           wait after detection before the idle window (10)
#   --idle S             idle window (60)
#   --base-port P        first port; node i uses P+i, UDP and TCP (20100);
#                        below the ephemeral range, or a node may find its
#                        port taken by another node's outgoing connection
#   --build-dir DIR      Go build output (<repo>/build-bench)
#   --keep-logs DIR      copy every run's node logs there
#   --encrypt            gossip encryption on (memberlist: AES-GCM keyring);
#                        mycel always runs mTLS, so this is the fairer anchor
#                        for bytes (off by default, as in memberlist)
#   protocol parameters, passed to both sides alike (memberlist's
#   DefaultLANConfig values; the nodes print what they use, and the script
#   checks it against these):
#   --probe-interval-ms 1000  --probe-timeout-ms 500  --indirect-checks 3
#   --suspicion-mult 4  --suspicion-max-timeout-mult 6  --retransmit-mult 4
#   --gossip-interval-ms 200  --gossip-nodes 3  --push-pull-interval-ms 30000
#
# Results (--out): one JSON object per line and run: bench "membership",
# session (this invocation's start, UTC), impl, impl_version, nodes, run,
# seeds, params, config (node 0's CONFIG line), load1, converge_status
# (ok|timeout|error), converge_s, converge_from_seed_start_s,
# converge_weak_s, launch_s, removals_before_kill, victim, detect_status
# (ok|timeout|skipped), detect_s, detect_first_s, detect_kinds, idle_window_s (the mean of the
# nodes' own windows), idle_nodes, and per survivor node
# idle_udp_Bps / idle_tcp_Bps / idle_total_Bps / idle_payload_Bps /
# idle_udp_pps arrays (idle_payload_Bps: see payload_bytes below).
# Exit status 77: an implementation is not available.
#
# ---- What an implementation must provide (the plug-in contract) ----------
# A node program, one process per node, started by impl_node_<impl> below
# with a name, a port on 127.0.0.1 and the comma-separated seeds (empty for
# the first node), that writes these lines to its stdout, each line in one
# write, timestamps in nanoseconds of CLOCK_MONOTONIC (std::chrono::
# steady_clock on Linux; the script reads the same clock with `mlnode -now`):
#   CONFIG name=N probe_interval_ms=.. probe_timeout_ms=.. indirect_checks=..
#          suspicion_mult=.. gossip_interval_ms=.. gossip_nodes=..
#          push_pull_interval_ms=.. [any other key=value]   once, at start
#   START <ns> name=N addr=127.0.0.1:PORT        once it accepts peers
#   EVENT <ns> join|update|dead|left|leave <member-name> <member-addr>
#          as this node sees it; "join" for itself too; "dead" when it (or
#          the gossip it trusts) declares a member failed, "left" for a
#          member that announced its departure. Suspicion needs no event.
#   BYTES <ns> reason=usr1 udp_bytes=B udp_pkts=P tcp_bytes=B tcp_conns=C
#          [payload_bytes=B]
#          on SIGUSR1 (within 5 s): totals SENT since start. For mycel
#          over gRPC: tcp_bytes = bytes written to its peer TCP sockets
#          (TLS records, HTTP/2 framing and all: what write/sendmsg
#          accepted), udp_* = 0 unless it has a UDP path; tcp_conns =
#          connections opened or accepted; payload_bytes = the protocol's
#          own messages, encoded, before TLS, HTTP/2 and TCP (myceld's
#          membership.bytes_sent; -1 when unknown). Absent: the node sends
#          its messages as they are, and they are udp_bytes + tcp_bytes
#          (memberlist without encryption).
#   It must exit on SIGTERM and tolerate SIGKILL. Member names are the
#   --name values the script gives (n0, n1, ...).
# If myceld cannot print these lines itself, a small adapter can: run the
# daemon, poll its member list (e.g. `mycel mesh members --json` every
# 50 ms, if that is cheaper than the event stream) and print EVENT lines
# for the differences, and answer SIGUSR1 from the daemon's counters. Poll
# granularity then adds to every time measured here; say so beside results.
# For mycel, impl_prepare_mycel would also make the CA and each node's
# certificate/join token in $tmp before the runs (not timed).
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
"$src/packaging/install-deps.sh" --bench

die() {
  echo "memberlist_bench.sh: $*" >&2
  exit 1
}
log() { echo "memberlist_bench: $*" >&2; }

impls=memberlist
nodes_list=10,50
runs=10
out=
seeds=1
conv_timeout=120
detect_timeout=60
settle=10
idle=60
base_port=20100
build=$src/build-bench
keep_logs=
encrypt=0
p_probe_interval_ms=1000
p_probe_timeout_ms=500
p_indirect_checks=3
p_suspicion_mult=4
p_suspicion_max_timeout_mult=6
p_retransmit_mult=4
p_gossip_interval_ms=200
p_gossip_nodes=3
p_push_pull_interval_ms=30000

while (($# > 0)); do
  opt=$1
  [[ $opt == --encrypt || $opt == -h || $opt == --help ]] || (($# >= 2)) ||
    die "$opt needs a value"
  case $opt in
  --impl) impls=$2 ;;
  --nodes) nodes_list=$2 ;;
  --runs) runs=$2 ;;
  --out) out=$2 ;;
  --seeds) seeds=$2 ;;
  --timeout) conv_timeout=$2 ;;
  --detect-timeout) detect_timeout=$2 ;;
  --settle) settle=$2 ;;
  --idle) idle=$2 ;;
  --base-port) base_port=$2 ;;
  --build-dir) build=$2 ;;
  --keep-logs) keep_logs=$2 ;;
  --encrypt) encrypt=1 ;;
  --probe-interval-ms) p_probe_interval_ms=$2 ;;
  --probe-timeout-ms) p_probe_timeout_ms=$2 ;;
  --indirect-checks) p_indirect_checks=$2 ;;
  --suspicion-mult) p_suspicion_mult=$2 ;;
  --suspicion-max-timeout-mult) p_suspicion_max_timeout_mult=$2 ;;
  --retransmit-mult) p_retransmit_mult=$2 ;;
  --gossip-interval-ms) p_gossip_interval_ms=$2 ;;
  --gossip-nodes) p_gossip_nodes=$2 ;;
  --push-pull-interval-ms) p_push_pull_interval_ms=$2 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *) die "unknown option $opt (--help)" ;;
  esac
  if [[ $opt == --encrypt ]]; then shift; else shift 2; fi
done

IFS=, read -r -a impl_arr <<<"$impls"
IFS=, read -r -a n_arr <<<"$nodes_list"
for v in "$runs" "$seeds" "$conv_timeout" "$detect_timeout" "$settle" \
  "$idle" "$base_port" "${n_arr[@]}"; do
  [[ $v =~ ^[0-9]+$ ]] || die "not a whole number: $v"
done
((seeds == 1 || seeds == 2)) || die "--seeds is 1 or 2"
read -r eph_lo eph_hi </proc/sys/net/ipv4/ip_local_port_range
for n in "${n_arr[@]}"; do
  ((n > seeds + 1)) || die "--nodes $n: need more nodes than seeds + 1"
  # The alternative base (+1000, when the first is in use) must fit too.
  hi=$((base_port + 1000 + n - 1))
  ((hi < 65536)) || die "--base-port $base_port + $n is too high"
  ((hi < eph_lo || base_port > eph_hi)) ||
    die "ports $base_port-$hi overlap the ephemeral range $eph_lo-$eph_hi" \
      "(ip_local_port_range): choose --base-port outside it"
done
for tool in jq awk ss sort; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done

# --- implementations ----------------------------------------------------------
# impl_prepare_<impl>: build or find the binaries, set impl_version.
# impl_node_<impl> NAME PORT SEEDS: set the array `cmd` to one node's command.

mlnode=$build/memberlist/mlnode

# Go in GOPATH mode over Debian's sources: nothing is fetched; the build
# cache and the binary live in the (git-ignored) build dir.
go_build() { # SRC-DIR OUTPUT
  command -v go >/dev/null ||
    die "go is missing (packaging/install-deps.sh --bench)"
  mkdir -p "$build/gopath" "$(dirname "$2")"
  (cd "$1" && GO111MODULE=off GOPATH="$build/gopath:/usr/share/gocode" \
    GOCACHE="$build/go-cache" GOPROXY=off GOFLAGS='' CGO_ENABLED=0 \
    go build -o "$2" .) || die "go build of $1 failed"
}

impl_prepare_memberlist() {
  [[ -d /usr/share/gocode/src/github.com/hashicorp/memberlist ]] ||
    die "memberlist sources are missing (packaging/install-deps.sh --bench:" \
      "golang-github-hashicorp-memberlist-dev)"
  impl_version="hashicorp/memberlist $(dpkg-query -W -f='${Version}' \
    golang-github-hashicorp-memberlist-dev), $(go version | awk '{print $3}')"
}

impl_node_memberlist() { # NAME PORT SEEDS
  cmd=("$mlnode" -name "$1" -port "$2" -join "$3"
    -probe-interval "${p_probe_interval_ms}ms"
    -probe-timeout "${p_probe_timeout_ms}ms"
    -indirect-checks "$p_indirect_checks"
    -suspicion-mult "$p_suspicion_mult"
    -suspicion-max-timeout-mult "$p_suspicion_max_timeout_mult"
    -retransmit-mult "$p_retransmit_mult"
    -gossip-interval "${p_gossip_interval_ms}ms"
    -gossip-nodes "$p_gossip_nodes"
    -push-pull-interval "${p_push_pull_interval_ms}ms")
  ((encrypt)) && cmd+=(-encrypt)
  return 0
}

# mycel: tests/bench/memberlist/mycel_node.cc (built as
# tests/bench/mycel_node) runs one myceld per node
# (from $MYCEL_BUILD, default build/) with a node certificate of a shared
# mesh CA, and turns its log into the contract's EVENT lines. The p_*
# parameters are memberlist's LAN defaults, which myceld's "lan" profile
# equals (a mismatch is reported by check_config); --encrypt is ignored
# (always mTLS).
mycel_root=
impl_prepare_mycel() {
  local myceld=${MYCEL_BUILD:-$src/build}/daemon/myceld
  [[ -x $myceld ]] || die "mycel: $myceld is missing (./dev.sh build, or set MYCEL_BUILD)"
  [[ -x ${MYCEL_BUILD:-$src/build}/tests/bench/mycel_node ]] ||
    die "mycel: tests/bench/mycel_node is missing (ninja -C build mycel_node)"
  ((EUID == 0)) || die "mycel: myceld needs root (cgroups)"
  mycel_make_pki
  impl_version="myceld $("$myceld" --version 2>/dev/null | head -1), gRPC over mTLS"
}
# The CA and every node's certificate in $mycel_root/nI (gen-pki.sh's
# file names), once for mycel and mycelhost alike.
mycel_make_pki() {
  local max=0 n i
  [[ -z $mycel_root ]] || return 0
  mycel_root=$(mktemp -d /tmp/mycel-bench.XXXXXX)
  for n in "${n_arr[@]}"; do ((n > max)) && max=$n; done
  log "mycel: a mesh CA and $max node certificates (not timed)"
  MYCEL_MESH=bench MYCEL_NODE=ca "$src/packaging/gen-pki.sh" "$mycel_root/ca" '' >/dev/null
  for ((i = 0; i < max; i++)); do
    mkdir -p "$mycel_root/n$i"
    cp "$mycel_root/ca/ca.crt" "$mycel_root/ca/ca.key" "$mycel_root/n$i/"
    MYCEL_MESH=bench MYCEL_NODE=n$i "$src/packaging/gen-pki.sh" "$mycel_root/n$i" '' >/dev/null
  done
}
mycel_nodes_made=0
impl_node_mycel() { # NAME PORT SEEDS
  # A new work directory per node and run, which mycel_node makes: no
  # mktemp here, whose two forks per node under the load of the nodes
  # already started took about a second of a 50-node launch.
  mycel_nodes_made=$((mycel_nodes_made + 1))
  local work="$mycel_root/run-$1.$mycel_nodes_made"
  cmd=("${MYCEL_BUILD:-$src/build}/tests/bench/mycel_node"
    "${MYCEL_BUILD:-$src/build}/daemon/myceld" "$1" "$2" "$3"
    "$mycel_root/$1" "$work")
}
# mycelhost: every node of a run in one process, tests/bench/memberlist/
# mycel_host.cc (built as tests/bench/mycel_host): each node is the
# membership part of a myceld (its own port, certificate, mutual-TLS
# server, Gossip service, peer channels and SQLite member table), sharing
# the process's gRPC threads and one event loop of two threads. The issue
# allows it ("if fitting 50 on 2 cores honestly needs one process that
# hosts many nodes, do that and say so"). The script drives it through a
# FIFO: "start" for each node (the host writes the node's lines to its
# nI.out), "kill" for the victim (its listener and connections close, no
# leave), "bytes" for the idle windows (each node is given the process's
# bytes divided by the running nodes: the mean, not a per-node figure).
# The host starts before the seeds, so its own start (gRPC's and
# OpenSSL's set-up, once) is not in the launch.
host_bin=
impl_prepare_mycelhost() {
  host_bin=${MYCEL_BUILD:-$src/build}/tests/bench/mycel_host
  [[ -x $host_bin ]] ||
    die "mycelhost: $host_bin is missing (ninja -C build mycel_host)"
  mycel_make_pki
  impl_version="mycel_host (membership of myceld $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')), N nodes in one process, gRPC over mTLS"
}
impl_node_mycelhost() { # NAME PORT SEEDS
  cmd=(start "$1" "$2" "${3:--}")
}
mycel_cleanup() {
  [[ -n $mycel_root ]] || return 0
  rm -rf "$mycel_root"
  # The daemons' (empty) cgroups.
  rmdir /sys/fs/cgroup/*/mlbench/*/ /sys/fs/cgroup/*/mlbench/ 2>/dev/null || true
}

# --- set-up -------------------------------------------------------------------
for impl in "${impl_arr[@]}"; do
  declare -F "impl_prepare_$impl" >/dev/null ||
    die "unknown implementation $impl (memberlist, mycel, mycelhost)"
done
# The script's clock is mlnode's, whatever the implementations.
[[ -d /usr/share/gocode/src/golang.org/x/sys/unix ]] ||
  die "golang.org/x/sys is missing (golang-golang-x-sys-dev)"
log "building mlnode (go build, GOPATH mode, offline)"
go_build "$src/tests/bench/memberlist" "$mlnode"
declare -A versions
for impl in "${impl_arr[@]}"; do
  impl_version=
  "impl_prepare_$impl"
  versions[$impl]=$impl_version
done

now() { "$mlnode" -now; }

tmp=$(mktemp -d /tmp/memberlist-bench.XXXXXX)
pids=()
cleanup() {
  set +e
  local p
  for p in "${pids[@]}"; do
    [[ -n $p ]] && kill -KILL "$p" 2>/dev/null
  done
  for p in "${pids[@]}"; do
    [[ -n $p ]] && wait "$p" 2>/dev/null
  done
  rm -rf "$tmp"
  mycel_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

session=$(date -u +%Y-%m-%dT%H:%M:%SZ)
results=$tmp/results.jsonl
: >"$results"
params=$(jq -nc --argjson pi "$p_probe_interval_ms" \
  --argjson pt "$p_probe_timeout_ms" --argjson ic "$p_indirect_checks" \
  --argjson sm "$p_suspicion_mult" --argjson smx "$p_suspicion_max_timeout_mult" \
  --argjson rm "$p_retransmit_mult" --argjson gi "$p_gossip_interval_ms" \
  --argjson gn "$p_gossip_nodes" --argjson pp "$p_push_pull_interval_ms" \
  --argjson enc "$encrypt" '{probe_interval_ms: $pi, probe_timeout_ms: $pt,
    indirect_checks: $ic, suspicion_mult: $sm, suspicion_max_timeout_mult: $smx,
    retransmit_mult: $rm, gossip_interval_ms: $gi, gossip_nodes: $gn,
    push_pull_interval_ms: $pp, encryption: ($enc == 1)}')

# --- one run ------------------------------------------------------------------
ports_free() { # BASE N: no socket but TIME-WAIT ones (SO_REUSEADDR) on them
  ! ss -Hanut 2>/dev/null | awk -v lo="$1" -v hi="$(($1 + $2 - 1))" '
    $2 == "TIME-WAIT" { next }
    { n = split($5, a, ":"); p = a[n] + 0; if (p >= lo && p <= hi) found = 1 }
    END { exit !found }'
}

start_node() { # DIR IMPL INDEX SEEDS
  local name=n$3
  "impl_node_$2" "$name" "$((port0 + $3))" "$4"
  if [[ -n $host_pid ]]; then
    ln -sf host.err "$1/$name.err" # what the logs of a failed node show
    echo "${cmd[*]} $1/$name.out" >&"$host_ctl"
    pids[$3]=$host_pid
    return
  fi
  "${cmd[@]}" >"$1/$name.out" 2>"$1/$name.err" &
  pids[$3]=$!
}

# mycelhost: the one process of a run, and the FIFO that commands it.
host_pid=
host_ctl=
start_host() { # DIR
  mkfifo "$1/host.ctl"
  mkdir -p "$1/host"
  "$host_bin" "$mycel_root" "$1/host" <"$1/host.ctl" >"$1/host.out" \
    2>"$1/host.err" &
  host_pid=$!
  exec {host_ctl}>"$1/host.ctl"
}
stop_host() {
  [[ -n $host_pid ]] || return 0
  exec {host_ctl}>&-
  kill -KILL "$host_pid" 2>/dev/null || true
  wait "$host_pid" 2>/dev/null || true
  host_pid=
}

# has_line DIR INDEX REGEX: node INDEX's stdout has a line matching REGEX.
has_line() { grep -qE "$3" "$1/n$2.out" 2>/dev/null; }

wait_line() { # DIR INDEX REGEX SECONDS
  local i
  for ((i = 0; i < $4 * 100; i++)); do
    has_line "$1" "$2" "$3" && return 0
    kill -0 "${pids[$2]}" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

all_alive() { # INDEX... (nodes that must still run)
  local i
  for i in "$@"; do
    kill -0 "${pids[$i]}" 2>/dev/null || {
      log "node n$i exited: $(tail -n 3 "$dir/n$i.err" | tr '\n' ' ')"
      return 1
    }
  done
}

# Every node (file) currently sees N members alive.
converged_now() { # DIR N
  awk -v N="$2" '
    FNR == 1 { files++; cnt = 0; delete alive }
    $1 == "EVENT" && $3 == "join" && !($4 in alive) { alive[$4] = 1; cnt++ }
    $1 == "EVENT" && ($3 == "dead" || $3 == "left" || $3 == "leave") &&
      ($4 in alive) { delete alive[$4]; cnt-- }
    { last[FILENAME] = cnt }
    END { if (files < N) exit 1
          for (f in last) if (last[f] != N) exit 1
          exit 0 }' "$1"/n*.out 2>/dev/null
}

# Number of survivors that have removed the victim since TKILL.
detected_count() { # DIR VICTIM TKILL
  awk -v v="$2" -v t="$3" '
    $1 == "EVENT" && $4 == v && $2 >= t &&
      ($3 == "dead" || $3 == "left" || $3 == "leave") { seen[FILENAME] = 1 }
    END { n = 0; for (f in seen) n++; print n }' "$1"/n*.out
}

usr1_count_min() { # DIR INDEX...: the fewest usr1 BYTES lines among them
  local d=$1 i c min=1000000
  shift
  for i in "$@"; do
    c=$(grep -c '^BYTES .*reason=usr1' "$d/n$i.out" || true)
    ((c < min)) && min=$c
  done
  echo "$min"
}

usr1_all() { # DIR WANT INDEX...: signal, wait until each has WANT lines
  local d=$1 want=$2 i k
  shift 2
  if [[ -n $host_pid ]]; then
    echo bytes >&"$host_ctl"
  else
    for i in "$@"; do kill -USR1 "${pids[$i]}"; done
  fi
  for ((k = 0; k < 500; k++)); do
    (($(usr1_count_min "$d" "$@") >= want)) && return 0
    sleep 0.01
  done
  return 1
}

# The post-hoc analysis of one run's logs: every EVENT, START and usr1 BYTES
# line of every node, in time order, then one sweep. Prints key=value lines.
analyze() { # DIR N T0 TKILL VICTIM
  awk '{ node = FILENAME; sub(/.*\//, "", node); sub(/\.out$/, "", node) }
    $1 == "EVENT" || $1 == "START" { print $2, node, $1, $3, $4 }
    $1 == "BYTES" && $3 == "reason=usr1" {
      printf "%s %s BYTES", $2, node
      for (i = 4; i <= NF; i++) { split($i, kv, "="); printf " %s", kv[2] }
      printf "\n" }' "$1"/n*.out |
    sort -n -k1,1 -s |
    awk -v N="$2" -v t0="$3" -v tk="${4:-0}" -v victim="${5:-}" '
    function rm(n, m) { if ((n SUBSEP m) in alive) {
        if (cnt[n] == N) full--; delete alive[n, m]; cnt[n]--; return 1 }
      return 0 }
    $3 == "START" { if ($1 - t0 > launch) launch = $1 - t0 }
    $3 == "EVENT" && (tk == 0 || $1 < tk) {
      n = $2; m = $5
      if ($4 == "join" && !((n SUBSEP m) in alive)) {
        alive[n, m] = 1; cnt[n]++
        if (cnt[n] == N) { full++; if (!(n in first)) first[n] = $1 }
      } else if ($4 == "dead" || $4 == "left" || $4 == "leave") {
        if (rm(n, m)) removals++
      }
      if (full == N && conv == "") conv = $1 - t0
    }
    $3 == "EVENT" && tk > 0 && $1 >= tk && $5 == victim &&
      ($4 == "dead" || $4 == "left" || $4 == "leave") && !($2 in det) {
      det[$2] = $1 - tk; kinds[$4]++
    }
    $3 == "BYTES" { k = ++nb[$2]; bt[$2, k] = $1; ub[$2, k] = $4; up[$2, k] = $5
      tb[$2, k] = $6; pb[$2, k] = ($8 == "" ? "" : $8) }
    # mawk prints numbers above 2^31 as %.6g: every ns value goes through ns().
    function ns(v) { return v == "" ? "" : sprintf("%.0f", v) }
    END {
      printf "converge_ns=%s\n", ns(conv)
      weak = -1; nf = 0
      for (n in first) { nf++; if (first[n] - t0 > weak) weak = first[n] - t0 }
      printf "converge_weak_ns=%s\n", (nf == N ? ns(weak) : "")
      printf "launch_ns=%s\n", ns(launch + 0)
      printf "removals_before_kill=%d\n", removals
      nd = 0; dmax = ""; dmin = ""
      for (n in det) { nd++; if (dmax == "" || det[n] > dmax) dmax = det[n]
        if (dmin == "" || det[n] < dmin) dmin = det[n] }
      printf "detect_count=%d\ndetect_max_ns=%s\ndetect_min_ns=%s\n", nd, ns(dmax), ns(dmin)
      ks = ""; for (k in kinds) ks = ks (ks == "" ? "" : ",") k ":" kinds[k]
      printf "detect_kinds=%s\n", ks
      u = ""; t = ""; a = ""; p = ""; l = ""; w = 0; nw = 0
      for (n in nb) { if (nb[n] < 2) continue
        k = nb[n]; dt = (bt[n, k] - bt[n, 1]) / 1e9; if (dt <= 0) continue
        du = (ub[n, k] - ub[n, 1]) / dt; dtc = (tb[n, k] - tb[n, 1]) / dt
        dp = (up[n, k] - up[n, 1]) / dt
        u = u (u == "" ? "" : ",") sprintf("%.1f", du)
        t = t (t == "" ? "" : ",") sprintf("%.1f", dtc)
        a = a (a == "" ? "" : ",") sprintf("%.1f", du + dtc)
        p = p (p == "" ? "" : ",") sprintf("%.2f", dp)
        # payload_bytes: absent, the messages are the bytes sent; -1, unknown.
        if (pb[n, 1] == "") dl = du + dtc
        else if (pb[n, 1] < 0 || pb[n, k] < 0) dl = ""
        else dl = (pb[n, k] - pb[n, 1]) / dt
        if (dl != "") l = l (l == "" ? "" : ",") sprintf("%.1f", dl)
        w += dt; nw++ }
      printf "idle_udp=%s\nidle_tcp=%s\nidle_total=%s\nidle_pps=%s\n", u, t, a, p
      printf "idle_payload=%s\n", l
      printf "idle_window_s=%s\nidle_nodes=%d\n", (nw ? sprintf("%.2f", w / nw) : ""), nw
    }'
}

secs() { [[ -n $1 ]] && awk -v n="$1" 'BEGIN { printf "%.3f", n / 1e9 }' || echo null; }

run_one() { # IMPL N RUN
  local impl=$1 n=$2 run=$3 i s tfirst t0 tkill victim seedlist='' conv_status=error
  local detect_status=skipped deadline now_ns load1 config survivors=()
  dir=$tmp/$impl-n$n-r$run
  mkdir -p "$dir"
  pids=()
  port0=$base_port
  ports_free "$port0" "$n" || {
    port0=$((base_port + 1000))
    ports_free "$port0" "$n" || die "ports $base_port+$n and $port0+$n are in use"
  }
  load1=$(cut -d' ' -f1 /proc/loadavg)
  [[ $impl != mycelhost ]] || start_host "$dir"
  tfirst=$(now)
  # seeds first, each joining the ones before it
  for ((s = 0; s < seeds; s++)); do
    start_node "$dir" "$impl" "$s" "$seedlist"
    wait_line "$dir" "$s" '^START ' 10 || die "seed n$s did not start:" \
      "$(tail -n 5 "$dir/n$s.err")"
    ((s == 0)) || wait_line "$dir" "$s" '^JOIN [0-9]+ ok' 10 ||
      die "seed n$s did not join n0: $(tail -n 5 "$dir/n$s.err")"
    seedlist+="${seedlist:+,}127.0.0.1:$((port0 + s))"
  done
  t0=$(now)
  for ((i = seeds; i < n; i++)); do
    start_node "$dir" "$impl" "$i" "$seedlist"
  done
  deadline=$((t0 + conv_timeout * 1000000000))
  while :; do
    sleep 0.25
    all_alive $(seq 0 $((n - 1))) || break
    if converged_now "$dir" "$n"; then
      conv_status=ok
      break
    fi
    now_ns=$(now)
    if ((now_ns > deadline)); then
      conv_status=timeout
      break
    fi
  done
  tkill=
  victim=
  if [[ $conv_status == ok ]]; then
    i=$((seeds + RANDOM % (n - seeds)))
    victim=n$i
    tkill=$(now)
    if [[ -n $host_pid ]]; then
      echo "kill $victim" >&"$host_ctl"
    else
      kill -KILL "${pids[$i]}"
      wait "${pids[$i]}" 2>/dev/null || true
    fi
    pids[i]=''
    for ((s = 0; s < n; s++)); do ((s == i)) || survivors+=("$s"); done
    deadline=$((tkill + detect_timeout * 1000000000))
    detect_status=timeout
    while (($(now) < deadline)); do
      sleep 0.1
      if (($(detected_count "$dir" "$victim" "$tkill") >= n - 1)); then
        detect_status=ok
        break
      fi
    done
    sleep "$settle"
    if all_alive "${survivors[@]}" &&
      usr1_all "$dir" 1 "${survivors[@]}"; then
      sleep "$idle"
      usr1_all "$dir" 2 "${survivors[@]}" ||
        log "run $run: some nodes did not answer SIGUSR1"
    else
      log "run $run: no idle measurement (a node exited or ignored SIGUSR1)"
    fi
  fi
  stop_host
  for i in "${!pids[@]}"; do
    [[ -z ${pids[$i]} ]] || kill -KILL "${pids[$i]}" 2>/dev/null || true
  done
  for i in "${!pids[@]}"; do
    [[ -z ${pids[$i]} ]] || wait "${pids[$i]}" 2>/dev/null || true
  done
  pids=()
  # what analyze needs, so that kept logs can be analysed again
  printf 'n=%s\ntfirst=%s\nt0=%s\ntkill=%s\nvictim=%s\nconv_status=%s\ndetect_status=%s\n' \
    "$n" "$tfirst" "$t0" "$tkill" "$victim" "$conv_status" "$detect_status" \
    >"$dir/run.meta"
  [[ -z $keep_logs ]] || { mkdir -p "$keep_logs" && cp -r "$dir" "$keep_logs/"; }

  local -A r
  while IFS='=' read -r k v; do r[$k]=$v; done < <(analyze "$dir" "$n" "$t0" \
    "$tkill" "$victim")
  config=$(grep -m1 '^CONFIG ' "$dir/n0.out" | cut -d' ' -f2- || true)
  jq -nc --arg session "$session" --arg impl "$impl" \
    --arg ver "${versions[$impl]}" --argjson n "$n" --argjson run "$run" \
    --argjson seeds "$seeds" --argjson params "$params" --arg config "$config" \
    --argjson load1 "$load1" --arg cs "$conv_status" \
    --argjson conv "$(secs "${r[converge_ns]}")" \
    --argjson fromfirst "$(secs "${r[converge_ns]:+$((r[converge_ns] + t0 - tfirst))}")" \
    --argjson weak "$(secs "${r[converge_weak_ns]}")" \
    --argjson launch "$(secs "${r[launch_ns]}")" \
    --argjson rbk "${r[removals_before_kill]:-0}" --arg victim "$victim" \
    --arg ds "$detect_status" --argjson det "$(secs "${r[detect_max_ns]}")" \
    --argjson detf "$(secs "${r[detect_min_ns]}")" \
    --arg kinds "${r[detect_kinds]}" \
    --argjson iw "${r[idle_window_s]:-null}" --argjson inodes "${r[idle_nodes]:-0}" \
    --argjson iu "[${r[idle_udp]}]" --argjson it "[${r[idle_tcp]}]" \
    --argjson ia "[${r[idle_total]}]" --argjson ip "[${r[idle_pps]}]" \
    --argjson il "[${r[idle_payload]}]" '
    {bench: "membership", session: $session, impl: $impl, impl_version: $ver,
     nodes: $n, run: $run, seeds: $seeds, params: $params, config: $config,
     load1: $load1, converge_status: $cs,
     converge_s: (if $cs == "ok" then $conv else null end),
     converge_from_seed_start_s: (if $cs == "ok" then $fromfirst else null end),
     converge_weak_s: $weak, launch_s: $launch,
     removals_before_kill: $rbk, victim: (if $victim == "" then null else $victim end),
     detect_status: $ds, detect_s: (if $ds == "ok" then $det else null end),
     detect_first_s: $detf, detect_kinds: $kinds,
     idle_window_s: $iw, idle_nodes: $inodes, idle_udp_Bps: $iu,
     idle_tcp_Bps: $it, idle_total_Bps: $ia, idle_payload_Bps: $il,
     idle_udp_pps: $ip}' \
    >>"$results"
  rm -rf "$dir"
}

# The CONFIG a node printed must carry the parameters asked for.
check_config() { # JSON-LINE
  local c k want got
  c=$(jq -r .config <<<"$1")
  for k in probe_interval_ms probe_timeout_ms indirect_checks suspicion_mult \
    gossip_interval_ms gossip_nodes push_pull_interval_ms; do
    want=$(jq -r ".params.$k" <<<"$1")
    got=$(tr ' ' '\n' <<<"$c" | awk -F= -v k="$k" '$1 == k { print $2 }')
    [[ $got == "$want" ]] ||
      log "WARNING: $(jq -r .impl <<<"$1") node printed $k=${got:-nothing}, asked $want"
  done
}

# --- the runs -------------------------------------------------------------------
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
log "session $session, load $load_start; results in $results${out:+ and $out}"
for n in "${n_arr[@]}"; do
  for ((run = 1; run <= runs; run++)); do
    order=("${impl_arr[@]}")
    if ((run % 2 == 0)); then
      order=()
      for ((i = ${#impl_arr[@]} - 1; i >= 0; i--)); do order+=("${impl_arr[$i]}"); done
    fi
    for impl in "${order[@]}"; do
      run_one "$impl" "$n" "$run"
      line=$(tail -n 1 "$results")
      ((run > 1)) || check_config "$line"
      log "$(jq -r '"\(.impl) N=\(.nodes) run \(.run): converge \(.converge_status)" +
        " \(.converge_s // "-") s (weak \(.converge_weak_s // "-"), launch" +
        " \(.launch_s // "-"), removals before kill \(.removals_before_kill));" +
        " detect \(.detect_status) \(.detect_s // "-") s (first" +
        " \(.detect_first_s // "-")); idle total median B/s " +
        "\(.idle_total_Bps | sort | if length > 0 then .[(length - 1) / 2 | floor]
          else "-" end); load \(.load1)"' <<<"$line")"
      [[ -z $out ]] || echo "$line" >>"$out"
    done
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the table ----------------------------------------------------------------------
# shellcheck disable=SC2016 # jq, not shell, variables
stats='def pct($q): sort as $s | ($s | length) as $l
    | if $l == 0 then null
      else $s[([([($q * $l) | ceil, 1] | max), $l] | min) - 1] end;
  def fmt: if . == null then "-" elif . >= 1e9 then "T/O" else . end;'
row() { # IMPL N METRIC JQ-VALUES-EXPR DIGITS
  jq -rs --arg impl "$1" --argjson n "$2" --arg metric "$3" \
    --arg first "${impl_arr[0]}" --argjson d "$5" "$stats"'
    def vals($i): [.[] | select(.impl == $i and .nodes == $n)] | '"$4"';
    def r: if type == "number" and . < 1e9
      then (. * pow(10; $d) | round) / pow(10; $d) else . end;
    (vals($impl)) as $v | (vals($first)) as $f
    | ($v | pct(0.5)) as $m | ($f | pct(0.5)) as $fm
    | [$impl, ($n | tostring), $metric, ($v | length | tostring),
       ($m | r | fmt | tostring), ($v | pct(0.9) | r | fmt | tostring),
       ($v | max | r | fmt | tostring),
       (if $impl == $first or $m == null or $fm == null or $fm == 0 or
          $m >= 1e9 or $fm >= 1e9 then ""
        else ($m / $fm * 100 | round / 100 | tostring) end)]
    | @tsv' "$results" |
    awk -F'\t' '{ printf "%-11s %4s  %-30s %5s %10s %10s %10s %7s\n",
      $1, $2, $3, $4, $5, $6, $7, $8 }'
}
conv_vals='map(if .converge_status == "ok" then .converge_s
  elif .converge_status == "timeout" then 1e9 else empty end)'
{
  echo
  echo "== membership bench: kernel $(uname -r), $(nproc) CPUs, load" \
    "$load_start at start, $load_end at end; session $session"
  for impl in "${impl_arr[@]}"; do echo "   $impl: ${versions[$impl]}"; done
  echo "   parameters: $(jq -r 'to_entries | map("\(.key)=\(.value)") | join(" ")' \
    <<<"$params")"
  echo "   $runs runs per N, $seeds seed(s), concurrent joins, caps: converge" \
    "${conv_timeout}s, detect ${detect_timeout}s; idle: ${idle}s window after" \
    "${settle}s settle, survivors only, per node"
  for n in "${n_arr[@]}"; do
    awk -v n="$n" -v pi="$p_probe_interval_ms" -v sm="$p_suspicion_mult" \
      -v smx="$p_suspicion_max_timeout_mult" -v rm="$p_retransmit_mult" \
      -v pp="$p_push_pull_interval_ms" 'BEGIN {
      s = log(n) / log(10); if (s < 1) s = 1
      t = sm * s * pi / 1000
      p = pp / 1000; if (n > 32) p *= int(log(n) / log(2) - 5 + 0.999999) + 1
      printf "   memberlist formulas at N=%d: suspicion timeout %.1f s (Lifeguard" \
        " max %.1f s), push-pull every %.0f s, %d retransmits per broadcast\n",
        n, t, t * smx, p, rm * int(log(n + 1) / log(10) + 0.999999) }'
  done
  echo
  printf '%-11s %4s  %-30s %5s %10s %10s %10s %7s\n' impl N metric samples \
    median p90 max "×${impl_arr[0]}"
  for n in "${n_arr[@]}"; do
    for impl in "${impl_arr[@]}"; do
      row "$impl" "$n" "convergence s (T/O: timeout)" "$conv_vals" 2
      row "$impl" "$n" "  weak: last node sees N, s" \
        'map(.converge_weak_s // empty)' 2
      row "$impl" "$n" "  launch (t0 to last START), s" \
        'map(.launch_s // empty)' 2
      row "$impl" "$n" "detection s (last survivor)" \
        'map(if .detect_status == "ok" then .detect_s
          elif .detect_status == "timeout" then 1e9 else empty end)' 2
      row "$impl" "$n" "  first survivor, s" 'map(.detect_first_s // empty)' 2
      row "$impl" "$n" "idle UDP B/s per node" '[.[].idle_udp_Bps[]]' 0
      row "$impl" "$n" "idle TCP B/s per node" '[.[].idle_tcp_Bps[]]' 0
      row "$impl" "$n" "idle total B/s per node" '[.[].idle_total_Bps[]]' 0
      row "$impl" "$n" "  of it the messages, B/s" \
        '[.[].idle_payload_Bps // [] | .[]]' 0
      row "$impl" "$n" "idle UDP packets/s per node" '[.[].idle_udp_pps[]]' 2
    done
  done
  echo
  echo "-- every run (convergence s; detection s; removals before the kill)"
  jq -rs "$stats"'group_by([.impl, .nodes]) | .[]
    | "\(.[0].impl) N=\(.[0].nodes): converge " +
      (map(if .converge_status == "ok" then (.converge_s * 100 | round / 100 | tostring)
           elif .converge_status == "timeout" then "T/O" else "ERR" end) | join(" "))
      + " | detect " + (map(if .detect_status == "ok"
           then (.detect_s * 100 | round / 100 | tostring)
           elif .detect_status == "timeout" then "T/O" else "-" end) | join(" "))
      + " | removals " + (map(.removals_before_kill | tostring) | join(" "))
      + " | load " + (map(.load1 | tostring) | join(" "))' "$results"
}
