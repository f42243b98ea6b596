#!/usr/bin/env bash
# boot.sh OUTDIR --api-port PORT [--initrd FILE] [--append EXTRA] [--memory MB]
#
# Boots an image made by build.sh in the foreground: the serial console is
# this script's stdout, and the script execs QEMU, so its pid and exit status
# are QEMU's. With -no-reboot, a guest poweroff or reboot ends QEMU with 0.
#
# myceld's API (guest port 7443) is forwarded to 127.0.0.1:PORT only:
#   build/cli/mycel --node 127.0.0.1:PORT --tls-ca OUTDIR/pki/ca.crt \
#     --tls-cert OUTDIR/pki/client.crt --tls-key OUTDIR/pki/client.key node info
set -euo pipefail

usage() {
  cat <<EOF
usage: $0 OUTDIR --api-port PORT [--initrd FILE] [--append EXTRA] [--memory MB]

  OUTDIR           output of packaging/image/build.sh (vmlinuz, initramfs.img)
  --api-port PORT  host port on 127.0.0.1 forwarded to the guest's 7443
  --initrd FILE    initramfs to boot (default OUTDIR/initramfs.img; the
                   anchor is OUTDIR/busybox-initramfs.img)
  --append EXTRA   more kernel command-line words
  --memory MB      guest memory (default 256)

Environment: MYCEL_QEMU (default qemu-system-x86_64); MYCEL_ACCEL=kvm or
tcg forces the accelerator (default: KVM where it boots a kernel, else TCG).
EOF
}

die() {
  echo "boot.sh: $*" >&2
  exit 2
}

dir="" port="" initrd="" extra="" memory=256
while [ $# -gt 0 ]; do
  case "$1" in
    --api-port) port=${2:-}; shift 2 || die "--api-port needs a port" ;;
    --api-port=*) port=${1#*=}; shift ;;
    --initrd) initrd=${2:-}; shift 2 || die "--initrd needs a file" ;;
    --initrd=*) initrd=${1#*=}; shift ;;
    --append) extra=${2:-}; shift 2 || die "--append needs words" ;;
    --append=*) extra=${1#*=}; shift ;;
    --memory) memory=${2:-}; shift 2 || die "--memory needs megabytes" ;;
    --memory=*) memory=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) [ -z "$dir" ] || die "more than one OUTDIR given ($dir, $1)"; dir=$1; shift ;;
  esac
done
[ -n "$dir" ] || { usage >&2; exit 2; }
if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
  die "--api-port wants a TCP port number, got \"$port\""
fi
[[ "$memory" =~ ^[0-9]+$ ]] || die "--memory wants megabytes, got \"$memory\""
initrd=${initrd:-$dir/initramfs.img}
for f in "$dir/vmlinuz" "$initrd"; do
  [ -f "$f" ] || die "$f does not exist; run packaging/image/build.sh $dir"
done

qemu=${MYCEL_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || die "$qemu is missing; run packaging/install-deps.sh"

# The host's TSC rate in kHz. Under TCG the guest reads the host's TSC, and
# the kernel's calibration of it against the emulated PIT fails when the
# host is busy ("tsc: Unable to calibrate against PIT"); the guest then hung
# before it reached init in every such boot seen. Given the rate with
# tsc_early_khz, the same busy host booted every time. A host kernel that
# knows its TSC rate reports bogomips = kHz / 500.
host_tsc_khz() {
  if [ -n "${MYCEL_TSC_KHZ:-}" ]; then
    echo "$MYCEL_TSC_KHZ"
  elif [ -r /sys/devices/system/cpu/cpu0/tsc_freq_khz ]; then
    cat /sys/devices/system/cpu/cpu0/tsc_freq_khz
  elif grep -qw constant_tsc /proc/cpuinfo; then
    awk -F: '/^bogomips/ {printf "%d\n", $2 * 500; exit}' /proc/cpuinfo
  fi
}

# Whether KVM can boot this kernel. /dev/kvm alone does not tell: a nested
# KVM inside some cloud VMs opens, but QEMU's -cpu host then fails to set
# IA32_ARCH_CAPABILITIES, and without that MSR the guest hangs before its
# first line (both seen on a build machine). So boot the kernel once with no
# initramfs, and look for its banner; a working KVM prints it in well under a
# second. The verdict is kept for this host boot.
kvm_boots() {
  [ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
  local cache
  cache="${TMPDIR:-/tmp}/mycel-kvm-probe.$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown).$(id -u)"
  if [ ! -f "$cache" ]; then
    local verdict=no out
    # Without an initramfs the kernel panics at once, and -no-reboot ends
    # QEMU there.
    out=$(timeout 5 "$qemu" -M microvm -enable-kvm -cpu host -m 256 -smp 1 \
      -display none -serial stdio -no-reboot -kernel "$dir/vmlinuz" \
      -append "console=ttyS0 panic=-1 reboot=t" </dev/null 2>/dev/null || true)
    if [[ "$out" == *"Linux version"* ]]; then verdict=yes; fi
    echo "$verdict" >"$cache.$$" && mv -f "$cache.$$" "$cache"
  fi
  [ "$(cat "$cache")" = yes ]
}

# KVM where it works (the guest gets kvmclock); TCG elsewhere.
# Under TCG the default CPU has no RDRAND, so nothing seeds the guest's CRNG
# until interrupts have gathered enough entropy (about 1.5 s after /init
# was seen), and myceld's first getrandom() for TLS waits for it. TCG
# emulates RDRAND from the host's getrandom(); with it the CRNG is ready
# before /init runs and myceld was ready about 1 s sooner.
accel=(-cpu "qemu64,+rdrand")
tsc=""
case "${MYCEL_ACCEL:-auto}" in
  kvm) use_kvm=yes ;;
  tcg) use_kvm=no ;;
  auto) if kvm_boots; then use_kvm=yes; else use_kvm=no; fi ;;
  *) die "MYCEL_ACCEL wants kvm, tcg or auto, got \"$MYCEL_ACCEL\"" ;;
esac
if [ "$use_kvm" = yes ]; then
  accel=(-enable-kvm -cpu host)
else
  khz=$(host_tsc_khz || true)
  if [[ "$khz" =~ ^[0-9]+$ ]] && [ "$khz" -gt 0 ]; then
    tsc="tsc_early_khz=$khz"
  else
    echo "boot.sh: cannot tell the host's TSC rate (set MYCEL_TSC_KHZ); a busy host may hang the guest's boot" >&2
  fi
fi

# panic=-1: a panic reboots at once, and -no-reboot turns that into an exit,
# so a broken guest never hangs its caller. myceld logs to /dev/kmsg, its
# info lines at priority 6: loglevel=7 (after quiet, so it wins) lets them
# reach the console, together with the kernel's own info lines, which cost
# less than 0.3 s of boot under TCG (measured; within run-to-run noise).
# printk.devkmsg=on: by default the kernel passes 10 lines in 5 s from
# /dev/kmsg writers and drops the rest, which lost myceld's shutdown lines
# after its boot lines.
# reboot=t: microvm's ACPI tables have no reset register, so the kernel's
# default reboot falls through its list of methods to a jump into the
# firmware, which in about one reboot of six booted the guest again inside
# the same QEMU instead of ending it. A triple fault is a CPU reset that QEMU always sees, and
# -no-reboot turns it into an exit with status 0.
exec "$qemu" -M microvm "${accel[@]}" -m "$memory" -smp 1 \
  -display none -serial stdio -no-reboot \
  -kernel "$dir/vmlinuz" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 quiet loglevel=7 printk.devkmsg=on reboot=t${tsc:+ $tsc}${extra:+ $extra}" \
  -netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$port-:7443" \
  -device virtio-net-device,netdev=n0 \
  </dev/null
