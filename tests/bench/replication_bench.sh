#!/usr/bin/env bash
# replication_bench.sh [--nodes 50] [--writes 50] [--interval-ms 200]
#                      [--idle 30] [--rate 100] [--load 30] [options]
#
# The replicated store in a mesh of N myceld on one machine (issue 14's
# benchmarks (a) and (c)): how long a write takes to be readable on every
# node, and the bytes each node sends at rest and under a steady write
# rate; each myceld's resident memory at the end. Needs root (myceld's
# cgroups, and the network namespace below).
#
# What it does, in order:
#  1. Runs itself in a new network namespace (unshare --net) with only its
#     own loopback up: the nodes talk over 127.0.0.1 there, and nothing
#     else on the machine sends on that loopback.
#  2. Starts N myceld (node nI: its own state dir, unix socket, TCP port
#     BASE+I on 127.0.0.1, --cell-pool 0, --cgroup-subtree
#     replbench-PID/nI, --durability as given), `mycel mesh init` on n0,
#     one token `mesh token create --uses N-1`, and `mycel mesh join
#     127.0.0.1:BASE --token T` on each other node, one after another
#     (retried after a pause if n0 refuses: its listener admits 64 new
#     connections per source address in 10 s, and every node here has the
#     same source address). Then waits until every node's ListMembers shows
#     N members alive, and --settle more seconds.
#  3. Convergence (a): replication_probe converge (tests/bench/
#     replication_probe.cc, one gRPC channel per node's unix socket):
#     --writes W State.Puts, one every --interval-ms, each on a random
#     node; per write, the time from just before the Put was sent until
#     the key is in State.List's answer on every node (polled on all nodes
#     at once, a round every --poll-ms: the figure is an upper bound by up
#     to one round, whose duration is printed). p50/p90/p99/max over writes.
#  4. Traffic (c), at rest (--idle s) and then while replication_probe load
#     puts --rate writes/s (256-byte JSON string values, each on a random
#     node, open loop) for --load s. Two counts:
#       - every byte: the loopback's tx_bytes (/proc/net/dev of this
#         namespace) over the window, divided by N and by the window's
#         length. On loopback every packet is sent once, by one of the
#         nodes (the probe speaks over unix sockets), so this is the mean
#         bytes per node per second, IP and TCP headers, ACKs, TLS and
#         HTTP/2 framing included, connections opened and closed in the
#         window included.
#       - per node: bytes_sent (TCP payload, TLS records, retransmissions
#         included) of each myceld's TCP sockets (ss -tinp), read at the
#         start and end of the window and subtracted per socket (a socket
#         new in the window counts whole). Bytes of a socket that closed
#         within the window are missed; the sockets that closed are
#         counted and printed. Gives the median/min/max over the nodes.
#     Also the CPU time of all myceld together over each window
#     (/proc/PID/stat utime + stime), in cores, and the bytes on the wire
#     per write (the load window's loopback bytes above the idle rate,
#     divided by the writes made).
#  5. Memory: VmRSS of every myceld at the end (/proc/PID/status): median,
#     min, max.
#
# The machine is shared: run it under nice and read the load it prints,
#   nice -n 10 tests/bench/replication_bench.sh --out build/repl.jsonl
# Defaults take about 3 minutes after the build.
#
# Options:
#   --nodes N (50)        --writes W (50)     --interval-ms MS (200)
#   --idle S (30)         --rate R (100)      --load S (30)
#   --settle S (10)       seconds after every node sees N alive
#   --poll-ms MS (25)     convergence: a poll round at most every MS ms
#                         (each round is one State.List per node)
#   --durability D        normal (default) or full, for every node
#   --port BASE (27000)   TCP ports BASE..BASE+N-1 (in the namespace)
#   --build DIR           CMake build dir with myceld, mycel and
#                         tests/bench/replication_probe (<repo>/build)
#   --out FILE            append the results as JSON lines
#   --keep                keep the work dir (logs, state) for a post-mortem
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

die() {
  echo "replication_bench.sh: $*" >&2
  exit 1
}
log() { echo "replication_bench: $(date -u +%H:%M:%S) $*" >&2; }

nodes=50
writes=50
interval_ms=200
idle=30
rate=100
load_s=30
settle=10
poll_ms=25
durability=normal
base_port=27000
build=$src/build
out=
keep=0
args=("$@")
while (($# > 0)); do
  opt=$1
  case $opt in
  --keep) keep=1 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *)
    (($# >= 2)) || die "$opt needs a value (or is unknown: --help)"
    case $opt in
    --nodes) nodes=$2 ;;
    --writes) writes=$2 ;;
    --interval-ms) interval_ms=$2 ;;
    --idle) idle=$2 ;;
    --rate) rate=$2 ;;
    --load) load_s=$2 ;;
    --settle) settle=$2 ;;
    --poll-ms) poll_ms=$2 ;;
    --durability) durability=$2 ;;
    --port) base_port=$2 ;;
    --build) build=$2 ;;
    --out) out=$2 ;;
    *) die "unknown option $opt (--help)" ;;
    esac
    shift
    ;;
  esac
  shift
done
for v in "$nodes" "$writes" "$interval_ms" "$idle" "$rate" "$load_s" \
  "$settle" "$base_port" "$poll_ms"; do
  [[ $v =~ ^[0-9]+$ ]] || die "not a whole number: $v"
done
((nodes >= 2)) || die "--nodes must be at least 2"
[[ $durability == normal || $durability == full ]] ||
  die "--durability: normal or full"
((EUID == 0)) || die "needs root (myceld's cgroups, unshare --net)"
for tool in jq ss unshare ip python3 awk; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
build=$(cd "$build" && pwd) || die "no build dir $build (--build)"
myceld=$build/daemon/myceld
mycel=$build/cli/mycel
probe=$build/tests/bench/replication_probe
for f in "$myceld" "$mycel" "$probe"; do
  [[ -x $f ]] || die "$f is not built (cmake --build $build --target" \
    "myceld mycel replication_probe)"
done
[[ -z $out ]] || out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")

# 1. Our own network namespace: its loopback carries the nodes' traffic only.
if [[ ${REPLBENCH_NETNS:-} != 1 ]]; then
  exec env REPLBENCH_NETNS=1 unshare --net -- "$self" "${args[@]}"
fi
ip link set lo up

work=$(mktemp -d /tmp/replbench.XXXXXX)
pids=()
subtree=replbench-$$
cleanup() {
  set +e
  local p i
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for ((i = 0; i < 100; i++)); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  # The daemons' (empty) cgroup subtrees.
  find /sys/fs/cgroup -depth -type d -path "*/$subtree*" \
    -exec rmdir {} + 2>/dev/null
  if ((keep)); then
    echo "replication_bench: kept $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

session=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
fs=$(findmnt -no FSTYPE,SOURCE -T "$work" | awk '{$1 = $1; print}')
log "session $session, load $load_start, $nodes nodes, work dir $work ($fs)"

sockets=$work/sockets
: >"$sockets"
for ((i = 0; i < nodes; i++)); do
  d=$work/n$i
  mkdir -p "$d"
  echo "$d/sock" >>"$sockets"
  "$myceld" --node-name "n$i" --state-dir "$d/state" --socket "$d/sock" \
    --listen "127.0.0.1:$((base_port + i))" --cell-pool 0 \
    --cgroup-subtree "$subtree/n$i" --durability "$durability" \
    --log-level warn >"$d/log" 2>&1 &
  pids+=($!)
done
for ((i = 0; i < nodes; i++)); do
  for ((t = 0; ; t++)); do
    "$mycel" --socket "$work/n$i/sock" --timeout 1 node health \
      >/dev/null 2>&1 && break
    kill -0 "${pids[$i]}" 2>/dev/null ||
      die "n$i exited: $(tail -n 5 "$work/n$i/log")"
    ((t < 600)) || die "n$i did not answer in 60 s"
    sleep 0.1
  done
done
log "$nodes myceld answer; mesh init on n0"
export XDG_CONFIG_HOME=$work/config
"$mycel" --socket "$work/n0/sock" mesh init --name replbench >/dev/null ||
  die "mesh init failed: $(tail -n 5 "$work/n0/log")"
token=$("$mycel" --socket "$work/n0/sock" mesh token create \
  --uses "$((nodes - 1))" --ttl 1h) || die "token create failed"
t_join=$(date +%s.%N)
join_retries=0
for ((i = 1; i < nodes; i++)); do
  for ((t = 0; ; t++)); do
    if "$mycel" --socket "$work/n$i/sock" --timeout 30 mesh join \
      "127.0.0.1:$base_port" --token "$token" >"$work/n$i/join.out" \
      2>"$work/n$i/join.err"; then
      break
    fi
    ((t < 10)) || die "n$i could not join: $(cat "$work/n$i/join.err")"
    join_retries=$((join_retries + 1))
    log "n$i join failed ($(head -c 200 "$work/n$i/join.err")); again in 3 s"
    sleep 3
  done
done
t_joined=$(date +%s.%N)
log "$((nodes - 1)) joined in $(awk -v a="$t_join" -v b="$t_joined" \
  'BEGIN {printf "%.1f", b - a}') s ($join_retries retries); waiting for" \
  "$nodes alive everywhere"
members_json=$("$probe" members "$sockets" --want "$nodes" --timeout 180) ||
  die "the mesh did not converge"
members_s=$(jq -r .members_s <<<"$members_json")
log "every node sees $nodes alive ${members_s} s after the last join;" \
  "settling ${settle} s"
sleep "$settle"

# 3. Convergence of writes.
load_conv=$(cut -d' ' -f1-3 /proc/loadavg)
log "convergence: $writes writes, one every $interval_ms ms (load $load_conv)"
conv_json=$("$probe" converge "$sockets" --writes "$writes" \
  --interval-ms "$interval_ms" --poll-ms "$poll_ms" --prefix conv/ \
  --timeout 30) ||
  die "convergence: some writes did not reach every node: $conv_json"
log "convergence: $conv_json"

# 4. Traffic.
lo_tx() { sed -n 's/^ *lo: *//p' /proc/net/dev | awk '{print $9}'; }
# One line per myceld TCP socket: PID LOCAL PEER BYTES_SENT.
ss_snapshot() {
  ss -tinpH | awk '
    /^[^ \t]/ { pid = ""; if (match($0, /pid=[0-9]+/)) pid = substr($0, RSTART + 4,
        RLENGTH - 4); loc = $4; peer = $5; next }
    pid != "" && match($0, /bytes_sent:[0-9]+/) {
      print pid, loc, peer, substr($0, RSTART + 11, RLENGTH - 11); pid = "" }'
}
# Per node bytes/s over a window: PIDS-FILE BEFORE AFTER SECONDS -> JSON.
per_node() {
  python3 - "$@" <<'EOF'
import json, statistics, sys
pids = [l.split()[1] for l in open(sys.argv[1])]
def load(path):
    d = {}
    for line in open(path):
        pid, loc, peer, sent = line.split()
        d[(pid, loc, peer)] = int(sent)
    return d
a, b, secs = load(sys.argv[2]), load(sys.argv[3]), float(sys.argv[4])
per = {p: 0 for p in pids}
closed = sum(1 for k in a if k not in b)
opened = sum(1 for k in b if k not in a)
for k, v in b.items():
    if k[0] in per:
        per[k[0]] += v - a.get(k, 0)
rates = sorted(v / secs for v in per.values())
print(json.dumps({"per_node_median_Bps": round(statistics.median(rates)),
                  "per_node_min_Bps": round(rates[0]),
                  "per_node_max_Bps": round(rates[-1]),
                  "payload_sum_Bps": round(sum(rates)),
                  "sockets_closed": closed, "sockets_opened": opened,
                  "sockets_open_at_end": len(b)}))
EOF
}
pidfile=$work/pids
for ((i = 0; i < nodes; i++)); do echo "n$i ${pids[$i]}"; done >"$pidfile"

# CPU seconds (user + system) used so far by every myceld together.
cpu_s() {
  local p
  for p in "${pids[@]}"; do
    # Fields after the command's closing parenthesis: utime is the 12th.
    sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}'
  done | awk -v hz="$(getconf CLK_TCK)" '{s += $1} END {printf "%.2f", s / hz}'
}
window() { # NAME SECONDS [COMMAND...]: measure traffic over the window
  local name=$1 secs=$2 t0 t1 tx0 tx1 elapsed lo_bps node_json run_json=null
  local cpu0 cpu1
  shift 2
  ss_snapshot >"$work/ss-$name-0"
  cpu0=$(cpu_s)
  tx0=$(lo_tx)
  t0=$(date +%s.%N)
  if (($# > 0)); then
    run_json=$("$@") || die "$name: $* failed"
  else
    sleep "$secs"
  fi
  tx1=$(lo_tx)
  t1=$(date +%s.%N)
  cpu1=$(cpu_s)
  ss_snapshot >"$work/ss-$name-1"
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  lo_bps=$(awk -v a="$tx0" -v b="$tx1" -v s="$elapsed" -v n="$nodes" \
    'BEGIN {printf "%.0f", (b - a) / s / n}')
  node_json=$(per_node "$pidfile" "$work/ss-$name-0" "$work/ss-$name-1" \
    "$elapsed")
  jq -nc --arg name "$name" --argjson s "$elapsed" --argjson lo "$lo_bps" \
    --argjson node "$node_json" --argjson run "$run_json" \
    --argjson load1 "$(cut -d' ' -f1 /proc/loadavg)" \
    --argjson lo_bytes "$((tx1 - tx0))" \
    --argjson cpu "$(awk -v a="$cpu0" -v b="$cpu1" -v s="$elapsed" \
      'BEGIN {printf "%.3f", (b - a) / s}')" \
    '{window: $name, seconds: $s, lo_tx_per_node_Bps: $lo,
      lo_tx_bytes: $lo_bytes, myceld_cpus: $cpu, load1: $load1}
     + $node + {load_run: $run}'
}
log "traffic at rest: ${idle} s"
idle_json=$(window idle "$idle")
log "idle: $idle_json"
log "traffic under $rate writes/s for ${load_s} s"
busy_json=$(window load "$load_s" "$probe" load "$sockets" --rate "$rate" \
  --duration "$load_s" --prefix load/)
log "load: $busy_json"

# 5. Memory at the end.
rss_json=$(for p in "${pids[@]}"; do
  awk '/^VmRSS:/ {print $2}' "/proc/$p/status"
done | sort -n | awk '{a[NR] = $1} END {
  printf "{\"rss_median_kib\":%d,\"rss_min_kib\":%d,\"rss_max_kib\":%d}\n",
    a[int((NR + 1) / 2)], a[1], a[NR]}')
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
dead=0
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || dead=$((dead + 1)); done
((dead == 0)) || die "$dead myceld died during the run (logs in $work)"

result=$(jq -nc --arg session "$session" --argjson nodes "$nodes" \
  --arg durability "$durability" --arg ls "$load_start" --arg le "$load_end" \
  --arg fs "$fs" --argjson members "$members_json" --argjson conv "$conv_json" \
  --argjson idle "$idle_json" --argjson busy "$busy_json" \
  --argjson rss "$rss_json" --argjson retries "$join_retries" \
  '{bench: "replication", session: $session, nodes: $nodes,
    durability: $durability, load_start: $ls, load_end: $le, fs: $fs,
    join_retries: $retries, members: $members, convergence: $conv,
    idle: $idle, load: $busy, rss: $rss}')
[[ -z $out ]] || echo "$result" >>"$out"

jq -r '
  def r0: . | round | tostring;
  "",
  "== replicated state, \(.nodes) myceld on 127.0.0.1 (own netns), --durability \(.durability);" +
  " session \(.session)",
  "   kernel '"$(uname -r)"', '"$(nproc)"' CPUs shared by every node and the probe;" +
  " load \(.load_start) at start, \(.load_end) at end; state on \(.fs)",
  "   joins retried: \(.join_retries); every node saw \(.nodes) alive \(.members.members_s) s after the last join",
  "",
  "convergence: \(.convergence.writes) writes, one every \(.convergence.interval_ms) ms, each on a random node",
  "   visible on all \(.nodes) nodes: p50 \(.convergence.p50_ms) ms, p90 \(.convergence.p90_ms) ms," +
  " p99 \(.convergence.p99_ms) ms, max \(.convergence.max_ms) ms, min \(.convergence.min_ms) ms",
  "   the put itself: p50 \(.convergence.put_p50_ms) ms, p99 \(.convergence.put_p99_ms) ms;" +
  " poll round (every \(.convergence.poll_ms) ms at most) p50 \(.convergence.poll_round_p50_ms) ms," +
  " p99 \(.convergence.poll_round_p99_ms) ms",
  "",
  "traffic per node, bytes/s:",
  "   window                       every byte (lo)   TCP payload median (min-max)   sockets closed"
' <<<"$result"
jq -r '.idle, .load | [.window, .seconds, .load1, .lo_tx_per_node_Bps,
  .per_node_median_Bps, .per_node_min_Bps, .per_node_max_Bps,
  .sockets_closed] | @tsv' <<<"$result" |
  awk -F'\t' '{ printf "   %-28s %15d   %18d (%d-%d)   %14d\n",
    $1 " (" $2 " s, load1 " $3 ")", $4, $5, $6, $7, $8 }'
jq -r '
  ((.load.lo_tx_bytes - .idle.lo_tx_bytes / .idle.seconds * .load.seconds)
   / .load.load_run.puts | round) as $per_write |
  "   under load: \(.load.load_run.puts) puts, \(.load.load_run.achieved_per_s)/s achieved," +
  " put p50 \(.load.load_run.put_p50_ms) ms, p99 \(.load.load_run.put_p99_ms) ms;",
  "   \($per_write) bytes on the wire per write, the mesh over (above the idle rate)",
  "   CPU of all myceld together: \(.idle.myceld_cpus) cores at rest," +
  " \(.load.myceld_cpus) under load",
  "",
  "memory: VmRSS per myceld at the end: median \(.rss.rss_median_kib / 1024 | . * 10 | round / 10) MiB" +
  " (min \(.rss.rss_min_kib / 1024 | . * 10 | round / 10), max \(.rss.rss_max_kib / 1024 | . * 10 | round / 10))"
' <<<"$result"
