// Mount helpers: the pseudo filesystems a system needs, and tearing mounts
// down at shutdown. Kernel calls only; policy lives in daemon/init.
#ifndef MYCEL_RUNTIME_MOUNT_H_
#define MYCEL_RUNTIME_MOUNT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel {

struct MountSpec {
  std::string source;
  std::string target;  // absolute, relative to the root given to MountAll
  std::string fstype;
  unsigned long flags = 0;
  std::string data;
  bool required = false;  // a failure stops the caller; otherwise it is logged
  // Tried instead of `data` when the kernel refuses it (EINVAL), which is
  // how a kernel that predates an option answers. Empty: no second try.
  std::string fallback_data;
};

// The pseudo filesystems myceld mounts as PID 1, in order: /proc, /sys,
// /dev (devtmpfs), /dev/pts, /dev/shm, /run, /tmp, /sys/fs/cgroup (cgroup2
// with nsdelegate and favordynmods), /sys/kernel/tracing, /sys/fs/bpf.
std::vector<MountSpec> SystemMounts();

// Mounts a devtmpfs at `target` (nosuid, mode=0755), creating the
// directory first if it can: what an init does when the kernel did not
// mount /dev for it.
absl::Status MountDevtmpfs(const std::string& target);

// One line of /proc/self/mountinfo, reduced to what we use.
struct MountInfo {
  std::string mount_point;
  std::string fstype;
};

// Parses the text of /proc/self/mountinfo (octal escapes such as \040 are
// decoded). Malformed lines are skipped.
std::vector<MountInfo> ParseMountInfo(absl::string_view text);

// Mounts every spec under `root` (normally "/") whose target is not already
// a mount point, creating target directories. Returns what it mounted and
// what it skipped (already there) through `log` lines; a failure of a
// required mount is returned, other failures are collected in `warnings`.
absl::Status MountAll(const std::string& root,
                      const std::vector<MountSpec>& specs,
                      std::vector<std::string>* warnings);

// Unmounts everything below `root` except `root` itself, deepest first.
// Mounts that refuse (EBUSY) are remounted read-only instead. Failures are
// reported in `warnings`; the return value counts the mounts unmounted.
int UnmountAllBelow(const std::string& root,
                    std::vector<std::string>* warnings);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_MOUNT_H_
