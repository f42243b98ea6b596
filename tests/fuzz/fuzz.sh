#!/usr/bin/env bash
# Fuzzes one target of tests/fuzz with libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer (tests/fuzz/README.md).
#
#   tests/fuzz/fuzz.sh TARGET [SECONDS] [libFuzzer options...]
#   tests/fuzz/fuzz.sh --list
#
# Builds the instrumented tree in build-fuzz/ (clang; installs Debian's
# libclang-rt-14-dev, libFuzzer's runtime, through install-deps.sh
# --fuzz), then runs TARGET for SECONDS (default 60) on its corpus in
# build-fuzz/corpus/TARGET, which starts from the target's seeds and keeps
# what libFuzzer found interesting. A finding is written to
# build-fuzz/findings/ and the script exits non-zero; to keep it as a
# regression, copy it into tests/fuzz/corpus/TARGET/ (ctest replays that
# directory) once the bug is fixed.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
targets=(gossip_fuzz replication_fuzz query_fuzz parsers_fuzz cells_fuzz)
die() { echo "fuzz.sh: $*" >&2; exit 2; }

[[ $# -ge 1 ]] || die "usage: fuzz.sh TARGET [SECONDS] [libFuzzer options...] (--list for the targets)"
if [[ $1 == --list ]]; then
  printf '%s\n' "${targets[@]}"
  exit 0
fi
target=$1
shift
[[ " ${targets[*]} " == *" $target "* ]] || die "unknown target $target (--list)"
seconds=60
if [[ $# -ge 1 && $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi

"$src/packaging/install-deps.sh" --fuzz
build=${MYCEL_FUZZ_BUILD:-$src/build-fuzz}
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S "$src" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMYCEL_FUZZ=ON >/dev/null
fi
ninja -C "$build" "$target"

corpus=$build/corpus/$target
findings=$build/findings
mkdir -p "$corpus" "$findings"
# The seeds join the corpus (LLVMFuzzerInitialize writes them there); the
# checked-in regressions too.
regressions=()
[[ -d $src/tests/fuzz/corpus/$target ]] && regressions=("$src/tests/fuzz/corpus/$target")
dict=()
[[ -f $src/tests/fuzz/$target.dict ]] && dict=(-dict="$src/tests/fuzz/$target.dict")
export MYCEL_FUZZ_SEEDS_OUT=$corpus
# detect_leaks=0: the targets keep one world per process on purpose.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "$build/tests/$target" -max_total_time="$seconds" -timeout=20 \
  -rss_limit_mb=4096 -artifact_prefix="$findings/$target-" \
  -print_final_stats=1 "${dict[@]}" "$@" "$corpus" "${regressions[@]}"
