#!/usr/bin/env bash
# etcd_bench.sh [--impl etcd[,mycel]] [--clients 1,16,64] [--rounds 3]
#               [--duration 10] [--out FILE] [options]
#
# Local durable writes per second, the anchor for mycel's store: a
# single-node etcd 3.4 (Debian's etcd-server) on 127.0.0.1, fresh data dir
# for every row, driven by etcdload (tests/bench/etcd/main.go, Go with
# Debian's go.etcd.io/etcd/clientv3, built offline): C concurrent clients,
# each with its own gRPC connection and one Put in flight (closed loop),
# distinct keys, 256-byte random values, --warmup 1 s unmeasured then a
# --duration 10 s window; puts/s and nearest-rank p50/p90/p99 latency over
# every put of the window. Rows of every implementation and concurrency are
# measured in --rounds rounds, the order reversed every round; the table
# gives the median of the rounds (and their range), and mycel rows as a
# ratio of etcd's at the same C.
#
# mycel (--impl etcd,mycel): a fresh myceld per row (its own state dir in
# the same data dir as etcd's, not in a mesh: replication is off, so a put
# is a local write), driven over its unix socket by state_put_bench's load
# mode (tests/bench/state_put_bench.cc, C++) in the same shape as etcdload:
# C threads, each with its own gRPC channel and connection, one State.Put
# in flight each, distinct keys bench/<client>/<seq>, values that are a
# JSON string of --value-size bytes (quotes included), the same warm-up and
# window. It counts only puts answered OK and fails the run on any other
# status. "mycel" is two rows per C, measured in the same rounds:
# mycel-normal (myceld --durability normal) and mycel-full (--durability
# full); --impl mycel-normal or mycel-full picks one.
#
# Durability, as run here (etcd's defaults; nothing is turned off):
#   - etcd fsyncs its WAL on every commit: each raft Ready that carries
#     entries is appended to the WAL and fdatasync'ed before the put is
#     answered (wal.Save → fdatasync; 64 MB preallocated segments).
#     Concurrent puts share an fsync (raft batches proposals), which is why
#     puts/s grows with C. --unsafe-no-fsync exists in 3.4.23 (not in
#     --help) and is off; --with-nofsync adds rows with it on, to show what
#     the fsync costs (not durable; not a result to race against).
#   - the bbolt backend commits (and fsyncs) every 100 ms or 10000 writes
#     (--backend-batch-interval/--backend-batch-limit defaults); durability
#     of an answered put rests on the WAL.
#   - snapshot-count is 100000 entries, more than a row writes.
#   - mycel (daemon/store/store.cc): SQLite in WAL mode, one connection
#     with locking_mode=EXCLUSIVE; a put is one transaction (the object row
#     and its change_log entry), committed before the answer; commits are
#     grouped (a write that arrives while another commits waits, and the
#     next commit takes all that wait, in one transaction: concurrent puts
#     share a commit and, with full, its fsync). mycel-normal:
#     synchronous=NORMAL, the commit appends to the WAL with no fsync
#     (the WAL is fsync'ed at
#     checkpoints, every 1000 pages by SQLite's default); an answered put
#     survives kill -9 of myceld, not a power loss. It is not the same race
#     as etcd's and is shown as what mycel runs by default. mycel-full:
#     synchronous=FULL, the WAL is fsync'ed at every commit before the
#     answer: the like-for-like row against etcd.
# The data dir's filesystem is printed; tmpfs is refused (fsync would be a
# no-op) unless --allow-tmpfs. A "disk floor" row measures one writer doing
# 256-byte appends + fdatasync to a preallocated file in the same
# directory: C=1 cannot beat it by much.
#
# A reference the issue cites is `etcdctl check perf --load=l` (about 3,400
# writes/s here with etcd 3.4): 500 clients with their own connections, a
# rate limit of 8000 puts/s, 256-byte keys, 1 KiB values, 60 s, PASS only if
# it reaches 90% of the limit. It is one row (after the rounds, on a fresh
# etcd; --no-check-perf skips it). It gives no latency percentiles.
#
# The machine is shared: run it under nice and note the load it prints, e.g.
#   nice -n 10 tests/bench/etcd_bench.sh --out build-bench/puts.jsonl
# Defaults take about 4 minutes.
#
# Options:
#   --impl LIST        etcd, mycel (= mycel-normal,mycel-full), mycel-normal,
#                      mycel-full, comma-separated (etcd)
#   --mycel-build DIR  CMake build dir with myceld, mycel and
#                      tests/bench/state_put_bench (<repo>/build)
#   --clients LIST     concurrencies (1,16,64)
#   --conns K          gRPC connections shared by the clients (0: one each)
#   --rounds R (3)  --duration S (10)  --warmup S (1)  --value-size B (256)
#   --out FILE         append one JSON line per measured row and round
#   --data-parent DIR  where data dirs are made (${TMPDIR:-/tmp})
#   --allow-tmpfs      measure even if DIR is tmpfs
#   --port P           etcd client port; the peer port is P+1 (22379)
#   --build-dir DIR    Go build output (<repo>/build-bench)
#   --no-check-perf    skip the etcdctl check perf row (60 s)
#   --no-fsync-floor   skip the disk floor row
#   --with-nofsync     add etcd --unsafe-no-fsync rows
#
# Results (--out): one JSON object per line: bench "durable_puts", session,
# impl, impl_version, row (put | put_nofsync | fsync_floor | check_perf_l),
# round, clients, conns, value_size, duration_s, ops, ops_per_s, p50_ms,
# p90_ms, p99_ms, max_ms, errors, load1, fs (type and source of the data
# dir), durability (text); check_perf_l has ops_per_s, slowest_ms,
# stddev_ms, pass instead of percentiles. A row whose load generator met an
# error status has failed: true, errors, first_error, ops_ok_before_error
# and no figures; the table says FAILED and lists the errors under it.
# Exit status 77: an implementation is not available (mycel not built).
#
# ---- What an implementation provides (the plug-in contract) --------------
# impl_prepare_mycel: build/find myceld and a load generator; set
#   impl_version and a one-line `durability` text saying what a committed
#   put has been through (for a race with etcd's fsync'ed WAL, mycel's
#   SQLite must fsync each commit: journal_mode=WAL with synchronous=FULL;
#   synchronous=NORMAL does not fsync at commit and would not be the same
#   race - if mycel uses it, say so and show both).
# impl_start_mycel DATADIR: start one myceld with its state in DATADIR (the
#   same filesystem as etcd's), listening on a unix socket in DATADIR (or
#   127.0.0.1), wait until it answers, set server_pid.
# impl_load_mycel C: run a closed-loop load generator with C concurrent
#   clients (each its own connection, one unary put in flight), distinct
#   keys, $value_size-byte values, $warmup s unmeasured, $duration s
#   measured, where a put returns only after the write is committed
#   (e.g. a Store.Put / replicated-table write RPC), and print etcdload's
#   JSON line: {"mode":"put","clients":C,"conns":K,"value_size":..,
#   "duration_s":..,"ops":..,"ops_per_s":..,"p50_ms":..,"p90_ms":..,
#   "p99_ms":..,"max_ms":..,"errors":..}. A C++ tool next to
#   cells_api_bench, or etcdload's loop with mycel's generated Go client.
# impl_stop_mycel: stop it (SIGTERM, wait).
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
"$src/packaging/install-deps.sh" --bench

die() {
  echo "etcd_bench.sh: $*" >&2
  exit 1
}
log() { echo "etcd_bench: $*" >&2; }

impls=etcd
clients_list=1,16,64
conns=0
rounds=3
duration=10
warmup=1
value_size=256
out=
data_parent=${TMPDIR:-/tmp}
allow_tmpfs=0
port=22379
build=$src/build-bench
mycel_build=$src/build
check_perf=1
fsync_floor=1
with_nofsync=0

while (($# > 0)); do
  opt=$1
  case $opt in
  --allow-tmpfs) allow_tmpfs=1 ;;
  --no-check-perf) check_perf=0 ;;
  --no-fsync-floor) fsync_floor=0 ;;
  --with-nofsync) with_nofsync=1 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *)
    (($# >= 2)) || die "$opt needs a value (or is unknown: --help)"
    case $opt in
    --impl) impls=$2 ;;
    --clients) clients_list=$2 ;;
    --conns) conns=$2 ;;
    --rounds) rounds=$2 ;;
    --duration) duration=$2 ;;
    --warmup) warmup=$2 ;;
    --value-size) value_size=$2 ;;
    --out) out=$2 ;;
    --data-parent) data_parent=$2 ;;
    --port) port=$2 ;;
    --build-dir) build=$2 ;;
    --mycel-build) mycel_build=$2 ;;
    *) die "unknown option $opt (--help)" ;;
    esac
    shift
    ;;
  esac
  shift
done

impl_arr=()
IFS=, read -r -a raw_impls <<<"$impls"
for impl in "${raw_impls[@]}"; do
  if [[ $impl == mycel ]]; then
    impl_arr+=(mycel-normal mycel-full)
  else
    impl_arr+=("$impl")
  fi
done
IFS=, read -r -a c_arr <<<"$clients_list"
for v in "$conns" "$rounds" "$duration" "$warmup" "$value_size" "$port" \
  "${c_arr[@]}"; do
  [[ $v =~ ^[0-9]+$ ]] || die "not a whole number: $v"
done
((rounds >= 1 && duration >= 1)) || die "--rounds and --duration must be >= 1"
for tool in jq awk ss findmnt; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
[[ -d $data_parent ]] || die "--data-parent $data_parent is not a directory"
fs=$(findmnt -no FSTYPE,SOURCE,OPTIONS -T "$data_parent" | awk '{$1 = $1; print}')
if [[ $fs == tmpfs* || $fs == ramfs* ]] && ((!allow_tmpfs)); then
  die "$data_parent is on $fs: fsync is a no-op there (--data-parent DIR" \
    "on a disk, or --allow-tmpfs)"
fi

etcdload=$build/etcd/etcdload

go_build() { # SRC-DIR OUTPUT
  command -v go >/dev/null ||
    die "go is missing (packaging/install-deps.sh --bench)"
  mkdir -p "$build/gopath" "$(dirname "$2")"
  (cd "$1" && GO111MODULE=off GOPATH="$build/gopath:/usr/share/gocode" \
    GOCACHE="$build/go-cache" GOPROXY=off GOFLAGS='' CGO_ENABLED=0 \
    go build -o "$2" .) || die "go build of $1 failed"
}

# --- implementations ----------------------------------------------------------
# impl_prepare_<impl>: binaries, impl_version, durability.
# impl_start_<impl> DATADIR [EXTRA...]: start a fresh server, set server_pid.
# impl_load_<impl> C: run the load, print etcdload's JSON line.
# impl_stop_<impl>: stop the server.

server_pid=
endpoint=127.0.0.1:$port

impl_prepare_etcd() {
  command -v etcd >/dev/null || die "etcd is missing (etcd-server)"
  command -v etcdctl >/dev/null || die "etcdctl is missing (etcd-client)"
  impl_version="etcd $(etcd --version | awk '/^etcd Version/ {print $3}')"
  impl_version+=" (Debian $(dpkg-query -W -f='${Version}' etcd-server)),"
  impl_version+=" etcdload with clientv3 $(dpkg-query -W -f='${Version}' \
    golang-etcd-server-dev)"
  durability="WAL fdatasync per raft batch before the answer (default);"
  durability+=" bbolt commit+fsync every 100 ms/10000 writes"
}

# Waits up to 20 s for CMD... to succeed against the server started as
# $server_pid; dies with the tail of LOG if the server exits or never answers.
await_server() { # NAME LOG CMD...
  local name=$1 log=$2 i
  shift 2
  for ((i = 0; i < 200; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null ||
      die "$name exited: $(tail -n 5 "$log")"
    sleep 0.1
  done
  die "$name did not answer in 20 s: $(tail -n 5 "$log")"
}

impl_start_etcd() { # DATADIR [EXTRA-FLAGS...]
  local d=$1
  shift
  etcd --name bench --data-dir "$d/etcd" \
    --listen-client-urls "http://$endpoint" \
    --advertise-client-urls "http://$endpoint" \
    --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
    --initial-cluster "bench=http://127.0.0.1:$((port + 1))" \
    --logger zap --log-outputs stderr --log-level warn "$@" \
    >"$d/etcd.log" 2>&1 &
  server_pid=$!
  await_server etcd "$d/etcd.log" \
    env ETCDCTL_API=3 etcdctl --endpoints "$endpoint" --command-timeout 1s \
    endpoint health
}

impl_load_etcd() { # C
  "$etcdload" -endpoints "$endpoint" -clients "$1" -conns "$conns" \
    -value-size "$value_size" -warmup "${warmup}s" -duration "${duration}s"
}

impl_stop_etcd() {
  [[ -n $server_pid ]] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}

# mycel-normal and mycel-full: one myceld, --durability normal or full.
mycel_prepare() { # DURABILITY
  local b
  b=$(cd "$mycel_build" 2>/dev/null && pwd) || {
    echo "etcd_bench.sh: mycel: no build dir $mycel_build (--mycel-build)" >&2
    exit 77
  }
  myceld=$b/daemon/myceld
  mycel_cli=$b/cli/mycel
  mycel_load=$b/tests/bench/state_put_bench
  for f in "$myceld" "$mycel_cli" "$mycel_load"; do
    [[ -x $f ]] || {
      echo "etcd_bench.sh: mycel: $f is not built (cmake --build" \
        "$mycel_build --target myceld mycel state_put_bench)" >&2
      exit 77
    }
  done
  impl_version="myceld $("$myceld" --version 2>&1 | head -n 1 | awk '{print $NF}')"
  impl_version+=" (git $(git -C "$src" rev-parse --short HEAD 2>/dev/null ||
    echo '?')), --durability $1, state_put_bench load mode (C++ gRPC, callback API)"
  if [[ $1 == full ]]; then
    durability="SQLite WAL, synchronous=FULL: WAL fsync per commit before"
    durability+=" the answer; concurrent puts share a commit (group commit)"
  else
    durability="SQLite WAL, synchronous=NORMAL: no fsync at commit (WAL"
    durability+=" fsync'ed at checkpoints); survives kill -9, not power loss"
  fi
}
mycel_start() { # DURABILITY DATADIR
  local d=$2
  # The cell pool is off and the cgroup subtree is the row's own: the
  # daemon serves only the store here.
  "$myceld" --node-name bench --state-dir "$d/state" --socket "$d/mycel.sock" \
    --cgroup-subtree "etcd-bench-$$-${d##*.}" --cell-pool 0 \
    --durability "$1" --log-level warn >"$d/myceld.log" 2>&1 &
  server_pid=$!
  await_server myceld "$d/myceld.log" \
    "$mycel_cli" --socket "$d/mycel.sock" --timeout 1 node health
  mycel_socket=$d/mycel.sock
}
mycel_load() { # C
  "$mycel_load" --socket "$mycel_socket" --clients "$1" --conns "$conns" \
    --value-size "$value_size" --warmup "$warmup" --duration "$duration"
}
impl_prepare_mycel-normal() { mycel_prepare normal; }
impl_prepare_mycel-full() { mycel_prepare full; }
impl_start_mycel-normal() { mycel_start normal "$1"; }
impl_start_mycel-full() { mycel_start full "$1"; }
impl_load_mycel-normal() { mycel_load "$1"; }
impl_load_mycel-full() { mycel_load "$1"; }
mycel_stop() {
  impl_stop_etcd # SIGTERM, wait
  # myceld leaves its (empty) cgroup subtree behind; the row's is ours.
  find /sys/fs/cgroup -depth -type d -path "*/etcd-bench-$$-*" \
    -exec rmdir {} + 2>/dev/null || true
}
impl_stop_mycel-normal() { mycel_stop; }
impl_stop_mycel-full() { mycel_stop; }

# --- set-up -------------------------------------------------------------------
declare -A versions durabilities
for impl in "${impl_arr[@]}"; do
  declare -F "impl_prepare_$impl" >/dev/null ||
    die "unknown implementation $impl (etcd, mycel, mycel-normal, mycel-full)"
done
log "building etcdload (go build, GOPATH mode, offline)"
go_build "$src/tests/bench/etcd" "$etcdload"
for impl in "${impl_arr[@]}"; do
  impl_version=
  durability=
  "impl_prepare_$impl"
  versions[$impl]=$impl_version
  durabilities[$impl]=$durability
done
if ! ss -Hanut | awk -v a="$port" -v b="$((port + 1))" '$2 != "TIME-WAIT" {
    n = split($5, x, ":"); if (x[n] == a || x[n] == b) f = 1 } END { exit f }'; then
  die "port $port or $((port + 1)) is in use (--port)"
fi

tmp=$(mktemp -d "$data_parent/etcd-bench.XXXXXX")
cur_impl=
cleanup() {
  set +e
  [[ -z $cur_impl || -z $server_pid ]] || "impl_stop_$cur_impl"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

session=$(date -u +%Y-%m-%dT%H:%M:%SZ)
results=$tmp/results.jsonl
: >"$results"

record() { # IMPL ROW ROUND JSON: add the common fields, keep the line
  local line
  line=$(jq -c --arg session "$session" --arg impl "$1" --arg row "$2" \
    --argjson round "$3" --arg ver "${versions[$1]:-}" --arg fs "$fs" \
    --arg dur "${durabilities[$1]:-}" \
    --argjson load1 "$(cut -d' ' -f1 /proc/loadavg)" '
    {bench: "durable_puts", session: $session, impl: $impl,
     impl_version: $ver, row: $row, round: $round} + . +
    {load1: $load1, fs: $fs, durability: $dur}' <<<"$4") ||
    die "bad result line from $1 $2: $4"
  echo "$line" >>"$results"
  [[ -z $out ]] || echo "$line" >>"$out"
  log "$(jq -r '"\(.impl) \(.row) C=\(.clients) round \(.round):" +
    (if .failed then " FAILED (\(.errors) error(s))" else
    " \(.ops_per_s) ops/s, p50 \(.p50_ms // "-") ms, p99" +
    " \(.p99_ms // "-") ms, errors \(.errors // 0)" end) +
    "; load \(.load1)"' <<<"$line")"
}

measure() { # IMPL ROW C ROUND [EXTRA-SERVER-FLAGS...]
  local impl=$1 row=$2 c=$3 round=$4 d json
  shift 4
  d=$(mktemp -d "$tmp/$impl-$row-c$c-r$round.XXXX")
  cur_impl=$impl
  "impl_start_$impl" "$d" "$@"
  if ! json=$("impl_load_$impl" "$c"); then
    # A load generator that met an error status says so in its line
    # ("failed": true); the row is kept as a failure, loudly, not a figure.
    jq -e '.failed == true' <<<"$json" >/dev/null 2>&1 ||
      die "$impl load C=$c failed: $json"
    log "FAILED: $impl C=$c round $round: $(jq -r .first_error <<<"$json")" \
      "after $(jq -r .ops_ok_before_error <<<"$json") puts answered OK"
  fi
  "impl_stop_$impl"
  cur_impl=
  record "$impl" "$row" "$round" "$json"
  rm -rf "$d"
}

# --- the rounds -----------------------------------------------------------------
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
log "session $session, load $load_start; data in $tmp ($fs)"
combos=()
for impl in "${impl_arr[@]}"; do
  for c in "${c_arr[@]}"; do combos+=("$impl put $c"); done
done
if ((with_nofsync)); then
  for c in "${c_arr[@]}"; do combos+=("etcd put_nofsync $c"); done
fi
for ((round = 1; round <= rounds; round++)); do
  order=("${combos[@]}")
  if ((round % 2 == 0)); then
    order=()
    for ((i = ${#combos[@]} - 1; i >= 0; i--)); do order+=("${combos[$i]}"); done
  fi
  if ((fsync_floor)); then
    record floor fsync_floor "$round" "$("$etcdload" -fsync-floor "$tmp" \
      -value-size "$value_size" -warmup "${warmup}s" -duration "${duration}s")"
  fi
  for combo in "${order[@]}"; do
    read -r impl row c <<<"$combo"
    if [[ $row == put_nofsync ]]; then
      measure etcd put_nofsync "$c" "$round" --unsafe-no-fsync
    else
      measure "$impl" put "$c" "$round"
    fi
  done
done

if ((check_perf)) && [[ " ${impl_arr[*]} " == *" etcd "* ]]; then
  log "etcdctl check perf --load=l (60 s)"
  d=$(mktemp -d "$tmp/check-perf.XXXX")
  cur_impl=etcd
  impl_start_etcd "$d"
  cp_out=$(ETCDCTL_API=3 etcdctl --endpoints "$endpoint" check perf \
    --load=l 2>&1 | tr '\r' '\n') || true
  impl_stop_etcd
  cur_impl=
  printf '%s\n' "$cp_out" | grep -E 'PASS|FAIL|[Tt]hroughput|Slowest|Stddev' \
    >"$tmp/check-perf.txt" || true
  cp_json=$(awk '
    /[Tt]hroughput/ { for (i = 1; i <= NF; i++) if ($i == "writes/s") ops = $(i - 1) }
    /Slowest request/ { v = $NF; sub(/s$/, "", v); slow = v * 1000 }
    /Stddev/ { v = $NF; sub(/s$/, "", v); sd = v * 1000 }
    $0 == "PASS" { pass = "true" } $0 == "FAIL" { pass = "false" }
    END { if (ops == "") exit 1
      printf "{\"mode\":\"check_perf\",\"clients\":500,\"conns\":500," \
        "\"value_size\":1024,\"key_size\":256,\"rate_limit\":8000," \
        "\"duration_s\":60,\"ops_per_s\":%s,\"slowest_ms\":%.1f," \
        "\"stddev_ms\":%.1f,\"pass\":%s}\n", ops, slow, sd,
        (pass == "" ? "false" : pass) }' "$tmp/check-perf.txt") ||
    die "could not read etcdctl check perf's output: $cp_out"
  record etcd check_perf_l 1 "$cp_json"
fi
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the table ----------------------------------------------------------------------
{
  echo
  echo "== durable puts: kernel $(uname -r), $(nproc) CPUs (shared by server" \
    "and load generator), load $load_start at start, $load_end at end;" \
    "session $session"
  echo "   data dir: $tmp on $fs"
  for impl in "${impl_arr[@]}"; do
    echo "   $impl: ${versions[$impl]}"
    echo "     durability: ${durabilities[$impl]}"
  done
  echo "   $rounds rounds; each row: fresh server, closed loop, one put in flight per" \
    "client, conns $([[ $conns == 0 ]] && echo "one per client" || echo "$conns")," \
    "${value_size}-byte values, distinct keys, ${warmup}s warm-up + ${duration}s"
  echo
  printf '%-26s %7s %10s %17s %8s %8s %8s %7s\n' row clients "ops/s" \
    "(rounds min-max)" "p50 ms" "p90 ms" "p99 ms" "×etcd"
  jq -rs --arg first "${impl_arr[0]}" \
    --argjson order "$(printf '%s\n' "${impl_arr[@]}" | jq -R . | jq -sc .)" '
    def med: sort | if length == 0 then null
      else .[((length + 1) / 2 | floor) - 1] end;
    def r($d): if . == null then "-"
      else (. * pow(10; $d) | round) / pow(10; $d) | tostring end;
    . as $all
    | [group_by([.impl, .row, .clients])[]
       | {impl: .[0].impl, row: .[0].row, clients: .[0].clients,
          ops: (map(.ops_per_s // empty) | med),
          lo: (map(.ops_per_s // empty) | min),
          hi: (map(.ops_per_s // empty) | max),
          failed: (map(select(.failed == true)) | length),
          p50: (map(.p50_ms // empty) | med),
          p90: (map(.p90_ms // empty) | med), p99: (map(.p99_ms // empty) | med),
          slow: (map(.slowest_ms // empty) | med),
          pass: (.[0].pass // null), n: length}]
    | sort_by(if .row == "fsync_floor" then 0 elif .row == "put" then 1
              elif .row == "put_nofsync" then 2 else 3 end, .clients,
              (.impl != $first), (.impl as $i | $order | index($i)))
    | . as $rows
    | .[]
    | . as $x
    | ($rows | map(select(.impl == "etcd" and .row == "put" and
        .clients == $x.clients)) | .[0].ops) as $etcd
    | [(if .row == "fsync_floor" then "disk floor (fdatasync)"
        elif .row == "check_perf_l" then "etcdctl check perf l"
        else "\(.impl) \(.row)" end),
       (.clients | tostring),
       (if .failed == .n then "FAILED" else (.ops | r(0)) end),
       (if .failed > 0 then "\(.failed) of \(.n) failed"
        elif .n > 1 then "\(.lo | r(0))-\(.hi | r(0))" else "" end),
       (.p50 | r(2)), (.p90 | r(2)),
       (if .row == "check_perf_l" then "slowest \(.slow | r(0)) ms, " +
          (if .pass then "PASS" else "FAIL" end) else (.p99 | r(2)) end),
       (if .row == "put" and .impl != "etcd" and $etcd != null and
          .ops != null then (.ops / $etcd | r(2)) else "" end)]
    | @tsv' "$results" |
    awk -F'\t' '{ printf "%-26s %7s %10s %17s %8s %8s %8s %7s\n",
      $1, $2, $3, $4, $5, $6, $7, $8 }'
  if jq -e 'select(.failed == true)' "$results" >/dev/null; then
    echo "-- failed rows (the load generator met an error status; no figures):"
    jq -r 'select(.failed == true) | "   \(.impl) C=\(.clients) round" +
      " \(.round): \(.errors) error(s) after \(.ops_ok_before_error) puts" +
      " answered OK; first: \(.first_error)"' "$results"
  fi
  if [[ -s $tmp/check-perf.txt ]]; then
    echo "-- etcdctl check perf --load=l said (500 clients, 8000/s limit," \
      "1 KiB values):"
    sed 's/^/   /' "$tmp/check-perf.txt"
  fi
}
