// Facts about the host kernel, measured (not assumed) by probing the
// filesystems and syscalls involved. Each probe is cheap and side-effect
// free apart from the file descriptors it opens and closes.
#ifndef MYCEL_RUNTIME_HOST_INFO_H_
#define MYCEL_RUNTIME_HOST_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mycel {

enum class CgroupMode { kNone, kV1, kHybrid, kV2 };

absl::string_view CgroupModeName(CgroupMode mode);

struct HostInfo {
  std::string kernel_release;
  CgroupMode cgroup_mode = CgroupMode::kNone;
  // Mount point of the cgroup2 hierarchy ("" when there is none):
  // /sys/fs/cgroup on v2, usually /sys/fs/cgroup/unified on hybrid.
  std::string cgroup2_mount;
  std::vector<std::string> cgroup_v1_controllers;
  std::vector<std::string> cgroup_v2_controllers;
  // A cgroup mount has favordynmods (see CgroupMovesFavored).
  bool cgroup_favordynmods = false;
  bool seccomp = false;
  bool bpf = false;
  bool btf = false;
  bool kvm = false;
  bool user_namespaces = false;
};

// Probes the host. `cgroup_root` is where cgroup filesystems are expected
// (normally /sys/fs/cgroup); tests point it elsewhere.
HostInfo ProbeHost(const std::string& cgroup_root = "/sys/fs/cgroup");

// Determines the cgroup layout under `cgroup_root` from its mounts.
CgroupMode DetectCgroupMode(const std::string& cgroup_root,
                            std::string* cgroup2_mount);

// Whether a cgroup mount (v2 or v1) in `mountinfo` (/proc/self/mountinfo's
// text) has the favordynmods super option. Moving a process into a cgroup takes
// the kernel's cgroup threadgroup rwsem for writing; without favordynmods that
// waits for an RCU grace period (7-15 ms measured here) whenever the last
// move was more than a few milliseconds ago. The rwsem is shared by every
// hierarchy, so the option on any mount (the hybrid layout's empty unified
// one included) spares every hierarchy.
bool CgroupMovesFavored(absl::string_view mountinfo);

// The number of memory nodes the kernel may bring online (one past the
// highest in /sys/devices/system/node/possible), or 0 when it does not say.
int PossibleMemoryNodes();

// The number of CPUs online (at least 1).
int OnlineCpus();

// The host's physical memory in bytes, or 0 when the kernel does not say.
uint64_t PhysicalMemoryBytes();

// The node's hostname (gethostname), or an error naming the call.
absl::StatusOr<std::string> Hostname();

}  // namespace mycel

#endif  // MYCEL_RUNTIME_HOST_INFO_H_
