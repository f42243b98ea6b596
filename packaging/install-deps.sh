#!/usr/bin/env bash
# Installs every Debian 12 package that mycel's build, tests and benchmarks
# need. Idempotent: when everything is present it does not touch apt at all.
#
#   install-deps.sh          build, tests, and the anchors of tests/bench/*
#                            that need no Go toolchain
#   install-deps.sh --bench  also what the Go harnesses of the memberlist and
#                            etcd benchmarks build with, and etcd itself
#   install-deps.sh --fuzz   also libFuzzer's runtime (tests/fuzz/fuzz.sh)
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build clang pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libsqlite3-dev libssl-dev libboost-dev libseccomp-dev libbpf-dev libcap-dev
  libjsonnet-dev doctest-dev nlohmann-json3-dev
  # formatting check (part of the test suite)
  clang-format
  # tests: PKI, namespaces, netns, guests
  openssl bc util-linux iproute2 nftables procps sqlite3 busybox-static cpio kmod
  qemu-system-x86
  # benchmarks: the anchors mycel is compared with
  runc crun hyperfine bpftool
)
if [ "${1:-}" = "--bench" ]; then
  packages+=(
    golang-go golang-github-hashicorp-memberlist-dev golang-golang-x-sys-dev
    etcd-server etcd-client golang-etcd-server-dev golang-go.uber-zap-dev jq
  )
elif [ "${1:-}" = "--fuzz" ]; then
  packages+=(libclang-rt-14-dev)
elif [ -n "${1:-}" ]; then
  echo "install-deps: unknown argument $1 (expected --bench or --fuzz)" >&2
  exit 2
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install packages" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2
