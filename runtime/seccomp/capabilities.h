// Capability sets for cells: parsed and prepared in the parent, applied in
// the child between clone and execve with raw syscalls only.
#ifndef MYCEL_RUNTIME_SECCOMP_CAPABILITIES_H_
#define MYCEL_RUNTIME_SECCOMP_CAPABILITIES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mycel {

// A set of Linux capabilities: bit n is capability n (CAP_CHOWN is bit 0).
struct CapabilitySet {
  uint64_t bits = 0;

  bool Has(int cap) const {
    return cap >= 0 && cap < 64 && (bits >> cap & 1) != 0;
  }
  friend bool operator==(CapabilitySet a, CapabilitySet b) {
    return a.bits == b.bits;
  }
};

// Docker's default set: CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID
// SETUID SETFCAP SETPCAP NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE.
CapabilitySet DefaultCapabilities();

// Parses names such as "CAP_NET_ADMIN", "net_admin" or "NET_ADMIN" (any
// case), or "all": every capability mycel knows (CAP_CHOWN through
// CAP_CHECKPOINT_RESTORE) that this process's bounding set holds, since
// no process it starts can have more (a daemon run in a container may
// lack some). An unknown name is INVALID_ARGUMENT `capabilities: unknown
// capability "x"`. An empty list is the empty set.
absl::StatusOr<CapabilitySet> ParseCapabilities(
    const std::vector<std::string>& names);

// "CAP_CHOWN", ... in bit order. A bit with no name (above
// CAP_CHECKPOINT_RESTORE) comes out as "CAP_<n>", which ParseCapabilities
// rejects.
std::vector<std::string> CapabilityNames(CapabilitySet set);

// Everything ApplyCapabilitiesInChild needs, so that the child reads no file
// and allocates nothing.
struct PreparedCapabilities {
  // Only capabilities the running kernel has (bits <= last_cap): the kernel
  // cannot grant the others, and a process cannot hold them.
  CapabilitySet set;
  // /proc/sys/kernel/cap_last_cap.
  int last_cap = 0;
};

// Reads /proc/sys/kernel/cap_last_cap and drops from `set` the capabilities
// this kernel does not have. In the parent.
absl::StatusOr<PreparedCapabilities> PrepareCapabilities(CapabilitySet set);

// In the child, after uid/gid changes and before seccomp and execve.
// Async-signal-safe: raw syscalls only, no allocation. Leaves the process
// with exactly `caps.set` in its bounding, permitted, effective and
// inheritable sets, so that it keeps exactly these across execve whether it
// runs as root (the kernel grants root the bounding set) or not (the
// ambient set carries them, so it is raised only for a process that is not
// root, or root under SECBIT_NOROOT). Steps: raise effective to permitted
// (so that the bounding set can be changed), drop every other capability
// from the bounding set (PR_CAPBSET_DROP, 0..last_cap), clear the ambient
// set, capset(2) effective/permitted/inheritable, and, for a non-root
// process, raise each ambient capability.
// Returns 0 or an errno value: EPERM when the process does not hold a
// capability of the set or lacks CAP_SETPCAP to shrink the bounding set
// (a non-root uid keeps its capabilities across setresuid only with
// PR_SET_KEEPCAPS set before the uid change).
int ApplyCapabilitiesInChild(const PreparedCapabilities& caps) noexcept;

// ApplyCapabilitiesInChild shaped as a spawn PreExecStep function: `caps` is
// a const PreparedCapabilities*.
int ApplyCapabilitiesStep(const void* caps) noexcept;

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SECCOMP_CAPABILITIES_H_
