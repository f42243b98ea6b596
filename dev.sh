#!/usr/bin/env bash
# The two entry points of the README.
#   ./dev.sh start   install what is missing, build, start a node here
#   ./dev.sh test    install what is missing, build, run every test
set -euo pipefail
cd "$(dirname "$0")"
root=$PWD
build=${MYCEL_BUILD_DIR:-$root/build}

build() {
  packaging/install-deps.sh
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  fi
  cmake --build "$build"
}

case "${1:-}" in
  start)
    build
    state=$root/.mycel
    mkdir -p "$state"
    cat >&2 <<MSG

myceld is starting in the foreground (state in $state/state, ctrl-c stops it).
In another terminal, try:
  $build/cli/mycel --socket $state/mycel.sock node info
  $build/cli/mycel --socket $state/mycel.sock node health
  $build/cli/mycel --socket $state/mycel.sock -o json node info
  $build/cli/mycel --socket $state/mycel.sock node shutdown
(or export MYCEL_SOCKET=$state/mycel.sock and leave out --socket)

MSG
    exec "$build/daemon/myceld" --state-dir "$state/state" --socket "$state/mycel.sock" "${@:2}"
    ;;
  test)
    build
    cd "$build"
    ctest --output-on-failure -j2 "${@:2}"
    ;;
  *)
    echo "usage: ./dev.sh start|test" >&2
    exit 2
    ;;
esac
