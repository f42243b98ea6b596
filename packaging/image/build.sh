#!/usr/bin/env bash
# build.sh [--build-dir DIR] [--kernel-package NAME] OUTDIR
#
# Builds a bootable microVM image whose PID 1 is myceld, plus a busybox
# anchor image on the same kernel for the boot benchmark. Writes:
#
#   OUTDIR/vmlinuz                  Debian's cloud kernel
#   OUTDIR/initramfs.img            /init = myceld (gzip'd newc cpio)
#   OUTDIR/busybox-initramfs.img    anchor: /init prints MYCEL-ANCHOR-INIT
#                                   on the console and powers off
#   OUTDIR/pki/                     the image's throwaway PKI; the host uses
#                                   ca.crt, client.crt and client.key
#   OUTDIR/manifest.txt             what went in (kernel, modules, libraries)
#
# Boot it with packaging/image/boot.sh OUTDIR --api-port PORT.
#
# The kernel .deb is downloaded with apt once and kept in
# ${MYCEL_CACHE_DIR:-/var/cache/mycel}. Running this again rebuilds the
# initramfs images from the current binaries and reuses the kernel and PKI.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${MYCEL_CACHE_DIR:-/var/cache/mycel}
build_dir=$repo/build
kernel_pkg=${MYCEL_KERNEL_PACKAGE:-}
out=""
extras=()

# Loaded by myceld in this order; build.sh adds whatever their modinfo
# `depends=` names, ahead of the module that needs it.
modules=(virtio_ring virtio virtio_mmio failover net_failover virtio_net)

# The marker the anchor image prints; tests/bench/boot_bench.sh waits for it.
anchor_marker=MYCEL-ANCHOR-INIT

usage() {
  cat <<EOF
usage: $0 [--build-dir DIR] [--kernel-package NAME] [--extra FILE]... OUTDIR

Builds OUTDIR/vmlinuz, OUTDIR/initramfs.img (PID 1 = myceld),
OUTDIR/busybox-initramfs.img (anchor) and OUTDIR/pki/.

  --build-dir DIR        where myceld and mycel were built
                         (default: $repo/build; uses DIR/daemon/myceld and
                         DIR/cli/mycel)
  --kernel-package NAME  Debian kernel package (default: the one that
                         linux-image-cloud-amd64 depends on)
  --extra FILE           also install the (static) program FILE as
                         /usr/libexec/mycel/NAME in the image; repeatable
                         (the e2e tests carry a test binary this way)

Environment: MYCEL_CACHE_DIR (default /var/cache/mycel) keeps the kernel .deb.
EOF
}

die() {
  echo "build.sh: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --kernel-package) kernel_pkg=${2:?--kernel-package needs a name}; shift 2 ;;
    --kernel-package=*) kernel_pkg=${1#*=}; shift ;;
    --extra) extras+=("${2:?--extra needs a file}"); shift 2 ;;
    --extra=*) extras+=("${1#*=}"); shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) [ -z "$out" ] || die "more than one OUTDIR given ($out, $1)"; out=$1; shift ;;
  esac
done
[ -n "$out" ] || { usage >&2; exit 2; }

for tool in apt-get apt-cache dpkg cpio gzip modinfo openssl ldd find sort; do
  command -v "$tool" >/dev/null ||
    die "$tool is missing; run packaging/install-deps.sh"
done
busybox=/bin/busybox
# The anchor image has no libraries: busybox must be the static build.
if ! [ -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  die "$busybox is not a static busybox; install busybox-static (packaging/install-deps.sh)"
fi

[ -d "$build_dir" ] || die "--build-dir $build_dir: no such directory"
build_dir=$(cd "$build_dir" && pwd)
myceld=$build_dir/daemon/myceld
mycel=$build_dir/cli/mycel
for bin in "$myceld" "$mycel"; do
  [ -x "$bin" ] || die "$bin does not exist; build it first:
  cmake -S $repo -B $build_dir -G Ninja && ninja -C $build_dir myceld mycel
(or pass --build-dir DIR of a build that has them)"
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mycel-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- kernel -----------------------------------------------------------------

# The package name carries the kernel ABI (linux-image-6.1.0-NN-cloud-amd64);
# the metapackage says which one is current.
# Both print nothing (and succeed) when there is no answer.
lookup_kernel() {
  { apt-cache depends linux-image-cloud-amd64 2>/dev/null || true; } |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-/ && !found {print $2; found = 1}'
}

newest_cached_deb() {
  { ls -1t "$cache"/linux-image-*-cloud-amd64_*.deb 2>/dev/null || true; } | head -n1
}

deb=""
if [ -z "$kernel_pkg" ]; then
  kernel_pkg=$(lookup_kernel)
  if [ -z "$kernel_pkg" ]; then
    echo "build.sh: apt does not know linux-image-cloud-amd64; running apt-get update" >&2
    apt-get update -qq >&2 || true
    kernel_pkg=$(lookup_kernel)
  fi
  if [ -z "$kernel_pkg" ]; then
    # Offline with a warm cache still works.
    deb=$(newest_cached_deb)
    [ -n "$deb" ] || die "cannot find the cloud kernel package with apt-cache, and $cache has none"
    echo "build.sh: apt-cache is not answering; using cached $(basename "$deb")" >&2
  fi
fi
if [ -z "$deb" ]; then
  deb=$(ls -1t "$cache/${kernel_pkg}_"*.deb 2>/dev/null | head -n1 || true)
fi
if [ -z "$deb" ]; then
  if ! mkdir -p "$cache" 2>/dev/null || ! [ -w "$cache" ]; then
    die "cannot write the kernel cache $cache; set MYCEL_CACHE_DIR to a writable directory"
  fi
  dl=$(mktemp -d "$cache/.download.XXXXXX")
  echo "build.sh: downloading $kernel_pkg into $cache" >&2
  # As root, apt drops to the _apt user to download, which cannot write
  # here; the download is verified against the signed index either way.
  sandbox=()
  [ "$(id -u)" -ne 0 ] || sandbox=(-o APT::Sandbox::User=root)
  if ! (cd "$dl" && apt-get "${sandbox[@]}" download -q "$kernel_pkg" >&2); then
    rm -rf "$dl"
    die "apt-get download $kernel_pkg failed"
  fi
  got=$(ls -1 "$dl"/*.deb 2>/dev/null | head -n1 || true)
  [ -n "$got" ] || { rm -rf "$dl"; die "apt-get download $kernel_pkg wrote no .deb"; }
  # Rename into place so a killed download never looks like a cached one.
  mv "$got" "$cache/"
  rm -rf "$dl"
  deb=$cache/$(basename "$got")
fi

kroot=$work/kernel
dpkg -x "$deb" "$kroot"
vmlinuz=$(ls -1 "$kroot"/boot/vmlinuz-* 2>/dev/null | head -n1 || true)
[ -n "$vmlinuz" ] || die "$deb has no boot/vmlinuz-*"
kver=${vmlinuz##*/vmlinuz-}
kmods=$kroot/lib/modules/$kver
[ -d "$kmods" ] || die "$deb has no lib/modules/$kver"
cp "$vmlinuz" "$out/vmlinuz.tmp"
mv "$out/vmlinuz.tmp" "$out/vmlinuz"

# --- modules ----------------------------------------------------------------

# Module file for a module name: names use '_', files may use '-'.
module_file() {
  local name=$1 f
  f=$(find "$kmods/kernel" \( -name "$name.ko*" -o -name "${name//_/-}.ko*" \) \
    -print -quit)
  [ -n "$f" ] || die "module $name is not in $(basename "$deb")"
  echo "$f"
}

ordered=()
declare -A seen=()
resolve() {  # resolve NAME: appends NAME after everything it depends on
  local name=$1 dep deps
  [ -z "${seen[$name]:-}" ] || return 0
  seen[$name]=1
  deps=$(modinfo -F depends "$(module_file "$name")")
  for dep in ${deps//,/ }; do resolve "$dep"; done
  ordered+=("$name")
}
for m in "${modules[@]}"; do resolve "$m"; done

# --- the myceld image -------------------------------------------------------

root=$work/root
mkdir -p "$root"/{proc,sys,dev,run,tmp,etc,root,bin,usr/bin} \
  "$root"/var/lib/mycel "$root"/etc/mycel/pki "$root"/lib/modules/mycel
chmod 1777 "$root/tmp"
chmod 0700 "$root/root"

# The kernel opens /dev/console for PID 1's stdio before anything is mounted.
# Its built-in initramfs has that node too, so an unprivileged build (which
# cannot mknod) still boots.
make_nodes() {  # make_nodes ROOT
  if [ "$(id -u)" -eq 0 ]; then
    mknod -m 0600 "$1/dev/console" c 5 1
    mknod -m 0666 "$1/dev/null" c 1 3
  fi
}
make_nodes "$root"

for m in "${ordered[@]}"; do
  src=$(module_file "$m")
  dst=$root/lib/modules/mycel/$m.ko
  case "$src" in
    *.ko) cp "$src" "$dst" ;;
    *.ko.xz)
      command -v xz >/dev/null || die "$src is xz-compressed; install xz-utils"
      xz -dc "$src" >"$dst" ;;
    *.ko.zst)
      command -v zstd >/dev/null || die "$src is zstd-compressed; install zstd"
      zstd -q -dc "$src" >"$dst" ;;
    *.ko.gz) gzip -dc "$src" >"$dst" ;;
    *) die "unknown module compression: $src" ;;
  esac
done

# Debug info and symbols are of no use in the guest, and every megabyte
# costs boot time to unpack (about a quarter of myceld's size).
install_bin() {  # install_bin SRC DST
  if command -v strip >/dev/null; then
    strip --strip-all -o "$2" "$1"
  else
    cp "$1" "$2"
  fi
  chmod 0755 "$2"
}
install_bin "$myceld" "$root/usr/bin/myceld"
install_bin "$mycel" "$root/usr/bin/mycel"
ln -s usr/bin/myceld "$root/init"
for extra in "${extras[@]}"; do
  [ -f "$extra" ] || die "--extra $extra: no such file"
  mkdir -p "$root/usr/libexec/mycel"
  install_bin "$extra" "$root/usr/libexec/mycel/$(basename "$extra")"
done

# Shared libraries at the paths ldd resolves them to, and the loader at the
# path the binaries name as their interpreter. A static build needs none.
libs=()
for bin in "$myceld" "$mycel"; do
  if ! lddout=$(LC_ALL=C ldd "$bin" 2>&1); then
    grep -q 'not a dynamic executable' <<<"$lddout" && continue
    die "ldd $bin failed: $lddout"
  fi
  if grep -q 'not found' <<<"$lddout"; then
    die "ldd $bin: $(grep 'not found' <<<"$lddout" | tr -s ' \t' ' ')"
  fi
  while read -r path; do libs+=("$path"); done < <(
    awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$lddout")
done
for lib in $(printf '%s\n' "${libs[@]+"${libs[@]}"}" | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

cat >"$root/etc/hosts" <<EOF
127.0.0.1 localhost
::1 localhost
EOF
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"

modules_json=$(printf '"%s", ' "${ordered[@]}")
cat >"$root/etc/mycel/myceld.json" <<EOF
{
  "node_name": "guest",
  "state_dir": "/var/lib/mycel",
  "socket": "/run/mycel/mycel.sock",
  "listen": "0.0.0.0:7443",
  "tls_cert": "/etc/mycel/pki/server.crt",
  "tls_key": "/etc/mycel/pki/server.key",
  "tls_ca": "/etc/mycel/pki/ca.crt",
  "modules": [${modules_json%, }],
  "module_dir": "/lib/modules/mycel",
  "interfaces": [
    {"name": "eth0", "address": "10.0.2.15/24", "gateway": "10.0.2.2"}
  ]
}
EOF

# gen-pki.sh keeps existing files, so the host's client certificate stays
# valid across rebuilds.
bash "$repo/packaging/gen-pki.sh" "$out/pki"
install -m 0644 "$out/pki/ca.crt" "$root/etc/mycel/pki/ca.crt"
install -m 0644 "$out/pki/server.crt" "$root/etc/mycel/pki/server.crt"
install -m 0600 "$out/pki/server.key" "$root/etc/mycel/pki/server.key"

pack() {  # pack ROOT OUTFILE
  # Sorted, owned by root, without device numbers of the build host: the same
  # inputs give the same archive.
  (cd "$1" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
    cpio --null --create --format=newc --owner=0:0 --reproducible --quiet) |
    gzip -n -6 >"$2.tmp"
  mv "$2.tmp" "$2"
}
pack "$root" "$out/initramfs.img"

# --- the busybox anchor -----------------------------------------------------

anchor=$work/anchor
mkdir -p "$anchor"/{bin,dev,proc}
make_nodes "$anchor"
cp "$busybox" "$anchor/bin/busybox"
cat >"$anchor/init" <<EOF
#!/bin/busybox sh
# Anchor for tests/bench/boot_bench.sh: the least a PID 1 can do.
/bin/busybox echo $anchor_marker
/bin/busybox poweroff -f
EOF
chmod 0755 "$anchor/init"
pack "$anchor" "$out/busybox-initramfs.img"

{
  echo "kernel_package $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
  echo "kernel_release $kver"
  echo "modules ${ordered[*]}"
  echo "myceld $myceld"
  echo "mycel $mycel"
  for lib in $(printf '%s\n' "${libs[@]+"${libs[@]}"}" | sort -u); do
    echo "library $lib"
  done
  echo "initramfs_bytes $(stat -c %s "$out/initramfs.img")"
  echo "anchor_initramfs_bytes $(stat -c %s "$out/busybox-initramfs.img")"
} >"$out/manifest.txt"

echo "build.sh: wrote $out/{vmlinuz,initramfs.img,busybox-initramfs.img,pki/} (kernel $kver)" >&2
