#include "cells/exposures.h"

#include <linux/capability.h>

#include "absl/strings/str_cat.h"
#include "cells/spec_validation.h"
#include "runtime/seccomp/capabilities.h"

namespace mycel::cells {
namespace {

constexpr char kDefaultIdMap[] = "0 100000 65536";

bool Has(const mycel::v1::CellSpec& spec, mycel::v1::Namespace ns) {
  for (int n : spec.isolate()) {
    if (n == ns) return true;
  }
  return false;
}

// Whether `map` (or the default) gives the cell the host's id 0, and the
// first host id it maps otherwise.
bool MapsHostRoot(const std::string& map, uint32_t* first_outside) {
  absl::StatusOr<std::vector<IdMapRange>> ranges =
      ParseIdMap("map", map.empty() ? kDefaultIdMap : map);
  if (!ranges.ok()) return true;  // unreachable for a valid spec
  *first_outside = (*ranges)[0].outside;
  for (const IdMapRange& r : *ranges) {
    if (r.outside == 0) return true;
  }
  return false;
}

// Capabilities that reach past a cell's namespaces, with what they allow.
struct RiskyCapability {
  int cap;
  const char* name;
  const char* why;
  // Only a risk when the cell shares the host's network.
  bool network_only = false;
};
constexpr RiskyCapability kRisky[] = {
    {CAP_SYS_ADMIN, "CAP_SYS_ADMIN",
     "mounts, namespaces and many kernel interfaces: it can undo the cell's "
     "confinement"},
    {CAP_SYS_MODULE, "CAP_SYS_MODULE", "loads kernel modules"},
    {CAP_SYS_RAWIO, "CAP_SYS_RAWIO", "raw access to devices and I/O ports"},
    {CAP_SYS_PTRACE, "CAP_SYS_PTRACE",
     "traces and reads the memory of processes it can see"},
    {CAP_SYS_BOOT, "CAP_SYS_BOOT", "reboots the host"},
    {CAP_SYS_TIME, "CAP_SYS_TIME", "sets the host's clock"},
    {CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH",
     "opens files by handle, past its root directory"},
    {CAP_SYSLOG, "CAP_SYSLOG", "reads the kernel log and kernel addresses"},
    {CAP_MAC_ADMIN, "CAP_MAC_ADMIN", "changes the host's LSM policy"},
    {CAP_MAC_OVERRIDE, "CAP_MAC_OVERRIDE", "bypasses the host's LSM policy"},
    {CAP_AUDIT_CONTROL, "CAP_AUDIT_CONTROL", "changes the host's audit rules"},
    {CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE",
     "overrides resource limits and reserved space"},
    {CAP_SYS_NICE, "CAP_SYS_NICE",
     "raises its priority above the host's processes"},
    {CAP_LINUX_IMMUTABLE, "CAP_LINUX_IMMUTABLE",
     "changes append-only and immutable files"},
    {CAP_BPF, "CAP_BPF", "loads BPF programs"},
    {CAP_PERFMON, "CAP_PERFMON", "reads performance counters of the host"},
    {CAP_CHECKPOINT_RESTORE, "CAP_CHECKPOINT_RESTORE",
     "reads other processes' state and chooses pids"},
    {CAP_NET_ADMIN, "CAP_NET_ADMIN", "configures the host's network", true},
    {CAP_NET_RAW, "CAP_NET_RAW",
     "reads and forges the host's traffic with raw sockets", true},
};

}  // namespace

bool UnprivilegedOnHost(const mycel::v1::CellSpec& spec) {
  if (!Has(spec, mycel::v1::NAMESPACE_USER)) return false;
  uint32_t uid = 0, gid = 0;
  return !MapsHostRoot(spec.uid_map(), &uid) &&
         !MapsHostRoot(spec.gid_map(), &gid);
}

std::vector<std::string> Exposures(const mycel::v1::CellSpec& spec) {
  std::vector<std::string> out;
  const bool own_root =
      !spec.rootfs().empty() && Has(spec, mycel::v1::NAMESPACE_MOUNT);
  if (!own_root) {
    if (UnprivilegedOnHost(spec)) {
      uint32_t outside = 0;
      MapsHostRoot(spec.uid_map(), &outside);
      out.push_back(absl::StrCat(
          "files: sees the host's filesystem as an unprivileged user (uid ",
          outside,
          " on the host): what that user may read or write, it may (give "
          "it a rootfs)"));
    } else {
      out.push_back(
          "files: shares the host's filesystem as root: it can read and "
          "change the host's files (give it a rootfs, or a user namespace)");
    }
  }
  if (!Has(spec, mycel::v1::NAMESPACE_PID)) {
    out.push_back(
        "processes: shares the host's pids: it sees the host's processes "
        "and can signal those of its uid, the host's init and myceld "
        "excepted (isolate pid)");
  }
  const bool own_net = Has(spec, mycel::v1::NAMESPACE_NET);
  if (!own_net) {
    out.push_back(
        "network: shares the host's network: it reaches every service on "
        "the host's interfaces, loopback included (isolate net)");
  }
  if (!Has(spec, mycel::v1::NAMESPACE_IPC)) {
    out.push_back(
        "ipc: shares the host's System V IPC and POSIX message queues "
        "(isolate ipc)");
  }
  if (spec.writable_system_paths()) {
    out.push_back(
        "system paths: /sys and /proc/sys are writable: it can change the "
        "host's kernel settings and any cgroup, its own limits included");
  }
  if (spec.seccomp() == "none") {
    out.push_back("seccomp: none: every system call its capabilities allow");
  }
  CapabilitySet caps = DefaultCapabilities();
  if (spec.capabilities_size() > 0) {
    absl::StatusOr<CapabilitySet> parsed = ParseCapabilities(
        {spec.capabilities().begin(), spec.capabilities().end()});
    if (parsed.ok()) caps = *parsed;
  }
  // In a user namespace, capabilities act on what the namespace owns only.
  if (!UnprivilegedOnHost(spec)) {
    for (const RiskyCapability& r : kRisky) {
      if (!caps.Has(r.cap) || (r.network_only && own_net)) continue;
      out.push_back(absl::StrCat("capability ", r.name, ": ", r.why));
    }
  }
  return out;
}

}  // namespace mycel::cells
