#include "runtime/seccomp/capabilities.h"

#include <errno.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel {
namespace {

constexpr const char* kCapLastCapPath = "/proc/sys/kernel/cap_last_cap";

struct NamedCapability {
  int number;
  const char* name;
};

// In capability-number order (checked below); the numbers are the kernel's
// ABI, taken from its header.
#define MYCEL_CAP(name) \
  NamedCapability { name, #name }
constexpr NamedCapability kCapabilities[] = {
    MYCEL_CAP(CAP_CHOWN),
    MYCEL_CAP(CAP_DAC_OVERRIDE),
    MYCEL_CAP(CAP_DAC_READ_SEARCH),
    MYCEL_CAP(CAP_FOWNER),
    MYCEL_CAP(CAP_FSETID),
    MYCEL_CAP(CAP_KILL),
    MYCEL_CAP(CAP_SETGID),
    MYCEL_CAP(CAP_SETUID),
    MYCEL_CAP(CAP_SETPCAP),
    MYCEL_CAP(CAP_LINUX_IMMUTABLE),
    MYCEL_CAP(CAP_NET_BIND_SERVICE),
    MYCEL_CAP(CAP_NET_BROADCAST),
    MYCEL_CAP(CAP_NET_ADMIN),
    MYCEL_CAP(CAP_NET_RAW),
    MYCEL_CAP(CAP_IPC_LOCK),
    MYCEL_CAP(CAP_IPC_OWNER),
    MYCEL_CAP(CAP_SYS_MODULE),
    MYCEL_CAP(CAP_SYS_RAWIO),
    MYCEL_CAP(CAP_SYS_CHROOT),
    MYCEL_CAP(CAP_SYS_PTRACE),
    MYCEL_CAP(CAP_SYS_PACCT),
    MYCEL_CAP(CAP_SYS_ADMIN),
    MYCEL_CAP(CAP_SYS_BOOT),
    MYCEL_CAP(CAP_SYS_NICE),
    MYCEL_CAP(CAP_SYS_RESOURCE),
    MYCEL_CAP(CAP_SYS_TIME),
    MYCEL_CAP(CAP_SYS_TTY_CONFIG),
    MYCEL_CAP(CAP_MKNOD),
    MYCEL_CAP(CAP_LEASE),
    MYCEL_CAP(CAP_AUDIT_WRITE),
    MYCEL_CAP(CAP_AUDIT_CONTROL),
    MYCEL_CAP(CAP_SETFCAP),
    MYCEL_CAP(CAP_MAC_OVERRIDE),
    MYCEL_CAP(CAP_MAC_ADMIN),
    MYCEL_CAP(CAP_SYSLOG),
    MYCEL_CAP(CAP_WAKE_ALARM),
    MYCEL_CAP(CAP_BLOCK_SUSPEND),
    MYCEL_CAP(CAP_AUDIT_READ),
    MYCEL_CAP(CAP_PERFMON),
    MYCEL_CAP(CAP_BPF),
    MYCEL_CAP(CAP_CHECKPOINT_RESTORE),
};
#undef MYCEL_CAP
constexpr int kKnownCaps =
    static_cast<int>(sizeof(kCapabilities) / sizeof(kCapabilities[0]));
static_assert(kKnownCaps == CAP_LAST_CAP + 1,
              "a capability in <linux/capability.h> has no name here");

constexpr bool InNumberOrder() {
  for (int i = 0; i < kKnownCaps; ++i) {
    if (kCapabilities[i].number != i) return false;
  }
  return true;
}
static_assert(InNumberOrder(), "kCapabilities must be indexed by number");

constexpr uint64_t Bit(int cap) { return uint64_t{1} << cap; }

// -1 if `name` is not a capability.
int CapabilityNumber(absl::string_view name) {
  std::string upper = absl::AsciiStrToUpper(name);
  absl::string_view bare = upper;
  absl::ConsumePrefix(&bare, "CAP_");
  if (bare.empty()) return -1;
  for (int cap = 0; cap < kKnownCaps; ++cap) {
    absl::string_view known = kCapabilities[cap].name;
    known.remove_prefix(4);  // "CAP_"
    if (bare == known) return cap;
  }
  return -1;
}

// The capset(2) data words for one set: index 0 holds bits 0-31, index 1 bits
// 32-63 (_LINUX_CAPABILITY_VERSION_3).
void SplitBits(uint64_t bits, __u32* low, __u32* high) {
  *low = static_cast<__u32>(bits);
  *high = static_cast<__u32>(bits >> 32);
}

}  // namespace

CapabilitySet DefaultCapabilities() {
  return CapabilitySet{Bit(CAP_CHOWN) | Bit(CAP_DAC_OVERRIDE) |
                       Bit(CAP_FSETID) | Bit(CAP_FOWNER) | Bit(CAP_MKNOD) |
                       Bit(CAP_NET_RAW) | Bit(CAP_SETGID) | Bit(CAP_SETUID) |
                       Bit(CAP_SETFCAP) | Bit(CAP_SETPCAP) |
                       Bit(CAP_NET_BIND_SERVICE) | Bit(CAP_SYS_CHROOT) |
                       Bit(CAP_KILL) | Bit(CAP_AUDIT_WRITE)};
}

absl::StatusOr<CapabilitySet> ParseCapabilities(
    const std::vector<std::string>& names) {
  CapabilitySet set;
  for (const std::string& name : names) {
    if (absl::EqualsIgnoreCase(name, "all")) {
      for (int cap = 0; cap < kKnownCaps; ++cap) {
        // 1: in the bounding set; -1 (EINVAL): the kernel has no such cap.
        if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) set.bits |= Bit(cap);
      }
      continue;
    }
    int cap = CapabilityNumber(name);
    if (cap < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("capabilities: unknown capability \"", name, "\""));
    }
    set.bits |= Bit(cap);
  }
  return set;
}

std::vector<std::string> CapabilityNames(CapabilitySet set) {
  std::vector<std::string> names;
  for (int cap = 0; cap < 64; ++cap) {
    if (!set.Has(cap)) continue;
    names.push_back(cap < kKnownCaps ? std::string(kCapabilities[cap].name)
                                     : absl::StrCat("CAP_", cap));
  }
  return names;
}

absl::StatusOr<PreparedCapabilities> PrepareCapabilities(CapabilitySet set) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(kCapLastCapPath));
  int last_cap = -1;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &last_cap) ||
      last_cap < 0 || last_cap > 63) {
    return absl::InternalError(absl::StrCat(
        kCapLastCapPath, ": not a capability number: \"", text, "\""));
  }
  PreparedCapabilities prepared;
  prepared.last_cap = last_cap;
  prepared.set.bits =
      last_cap == 63 ? set.bits : set.bits & (Bit(last_cap + 1) - 1);
  return prepared;
}

int ApplyCapabilitiesInChild(const PreparedCapabilities& caps) noexcept {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};

  // Shrinking the bounding set needs CAP_SETPCAP in the effective set, which
  // a uid change (with PR_SET_KEEPCAPS) clears while it keeps the permitted
  // set: make everything permitted effective first.
  if (syscall(SYS_capget, &header, data) != 0) return errno;
  data[0].effective = data[0].permitted;
  data[1].effective = data[1].permitted;
  if (syscall(SYS_capset, &header, data) != 0) return errno;

  for (int cap = 0; cap <= caps.last_cap; ++cap) {
    if (caps.set.Has(cap)) continue;
    const unsigned long c = static_cast<unsigned long>(cap);
    if (syscall(SYS_prctl, PR_CAPBSET_DROP, c, 0UL, 0UL, 0UL) == 0) continue;
    const int error = errno;
    // Dropping what is already gone still needs CAP_SETPCAP: only then ask
    // (one call per capability, not two, in the usual case).
    if (error == EPERM &&
        syscall(SYS_prctl, PR_CAPBSET_READ, c, 0UL, 0UL, 0UL) == 0) {
      continue;
    }
    return error;
  }

  if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0UL, 0UL,
              0UL) != 0) {
    return errno;
  }

  // Inheritable too: the ambient set may only hold capabilities that are
  // both permitted and inheritable.
  SplitBits(caps.set.bits, &data[0].permitted, &data[1].permitted);
  SplitBits(caps.set.bits, &data[0].effective, &data[1].effective);
  SplitBits(caps.set.bits, &data[0].inheritable, &data[1].inheritable);
  header = {_LINUX_CAPABILITY_VERSION_3, 0};
  if (syscall(SYS_capset, &header, data) != 0) return errno;

  // The ambient set only matters to a process that is not root when it
  // execs: root (unless SECBIT_NOROOT) gets the bounding set, which is now
  // `caps.set`, and a root process that changes its uid later loses its
  // ambient set with that change. Raising it costs a call per capability.
  if (syscall(SYS_getuid) == 0 && syscall(SYS_geteuid) == 0) {
    const long securebits =
        syscall(SYS_prctl, PR_GET_SECUREBITS, 0UL, 0UL, 0UL, 0UL);
    if (securebits < 0) return errno;
    if ((securebits & SECBIT_NOROOT) == 0) return 0;
  }
  for (int cap = 0; cap <= caps.last_cap; ++cap) {
    if (!caps.set.Has(cap)) continue;
    if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE,
                static_cast<unsigned long>(cap), 0UL, 0UL) != 0) {
      return errno;
    }
  }
  return 0;
}

int ApplyCapabilitiesStep(const void* caps) noexcept {
  return ApplyCapabilitiesInChild(
      *static_cast<const PreparedCapabilities*>(caps));
}

}  // namespace mycel
