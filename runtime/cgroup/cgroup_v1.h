// CgroupV1: the cell driver for cgroup v1 (and hybrid) hosts, where every
// controller has its own hierarchy.
#ifndef MYCEL_RUNTIME_CGROUP_CGROUP_V1_H_
#define MYCEL_RUNTIME_CGROUP_CGROUP_V1_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/cgroup/cgroup_fs.h"

namespace mycel {

// Maps each v1 controller ("cpu", "memory", "name=systemd", ...) to the
// mount point of its hierarchy, from the text of /proc/self/mountinfo.
// Only cgroup (v1) mounts at or below `under` count. Controllers that share
// a hierarchy ("cpu,cpuacct") map to the same mount point.
absl::StatusOr<std::map<std::string, std::string>> ParseCgroupV1Mounts(
    absl::string_view mountinfo, absl::string_view under);

// cpu.shares for a cgroup v2 cpu.weight, the way systemd converts it:
// weight * 1024 / 100, clamped to the kernel's 2..262144 (100 → 1024).
uint64_t CpuWeightToShares(uint64_t weight);

// A cell is <hierarchy>/<subtree>/<cell> in each hierarchy mycel uses:
// cpu, cpuacct, memory, pids and freezer (required) and cpuset (optional;
// cpuset limits fail with FAILED_PRECONDITION without it).
//
// Thread-safe (see CgroupDriver).
class CgroupV1 final : public CgroupDriver {
 public:
  // mycel's root directory in each hierarchy, e.g. memory =
  // /sys/fs/cgroup/memory/mycel. Controllers mounted together share a path
  // (cpu = cpuacct = /sys/fs/cgroup/cpu,cpuacct/mycel). Empty cpuset means
  // the host has no cpuset hierarchy.
  struct Roots {
    std::string cpu;
    std::string cpuacct;
    std::string memory;
    std::string pids;
    std::string freezer;
    std::string cpuset;
  };

  // Finds the v1 hierarchies below `mount_root` in `mountinfo_path` and
  // prepares <hierarchy>/<subtree> in each: creates missing components and,
  // in the cpuset hierarchy, copies cpuset.cpus and cpuset.mems down from
  // the parent where they are empty (a cpuset cgroup without them refuses
  // tasks). FAILED_PRECONDITION naming the controller if a required one is
  // not mounted.
  static absl::StatusOr<std::unique_ptr<CgroupV1>> Open(
      const std::string& mount_root, const std::string& subtree,
      std::unique_ptr<CgroupFs> fs = NewKernelCgroupFs(),
      const std::string& mountinfo_path = "/proc/self/mountinfo");

  // Uses `roots`, which must already exist and be prepared as Open does.
  CgroupV1(Roots roots, std::unique_ptr<CgroupFs> fs);

  CgroupV1(const CgroupV1&) = delete;
  CgroupV1& operator=(const CgroupV1&) = delete;

  // How long KillAll waits for the cell to empty. Set before sharing the
  // driver between threads.
  void set_kill_timeout(absl::Duration timeout) { kill_timeout_ = timeout; }

  const Roots& roots() const { return roots_; }
  // The cell's directory in the hierarchy of `controller` ("cpu",
  // "cpuacct", "memory", "pids", "freezer", "cpuset"); "" for an unknown or
  // absent controller.
  std::string CellDir(absl::string_view controller,
                      const std::string& cell) const;

  absl::string_view name() const override { return "v1"; }
  absl::Status Create(const std::string& cell,
                      const CgroupLimits& limits) override;
  absl::Status Update(const std::string& cell,
                      const CgroupLimits& limits) override;
  absl::Status ApplyToNew(const std::string& cell,
                          const CgroupLimits& limits) override;
  absl::StatusOr<CgroupJoin> OpenJoin(const std::string& cell) override;
  absl::Status AddProcess(const std::string& cell, pid_t pid) override;
  absl::StatusOr<std::vector<pid_t>> Pids(const std::string& cell) override;
  absl::Status KillAll(const std::string& cell) override;
  absl::Status Destroy(const std::string& cell) override;
  absl::StatusOr<CgroupStats> Stats(const std::string& cell) override;
  absl::StatusOr<uint64_t> OomKills(const std::string& cell) override;
  absl::StatusOr<bool> Exists(const std::string& cell) override;
  absl::StatusOr<std::vector<std::string>> List() override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  bool can_rename() const override { return true; }

 private:
  // The cell's directory in each hierarchy it exists in.
  absl::StatusOr<std::vector<std::string>> ExistingDirs(
      const std::string& cell);
  // Checks the name, and NOT_FOUND unless the cell exists in every
  // hierarchy (a cell missing in one cannot be limited or joined).
  absl::Status RequireCell(const std::string& cell);
  // Writes `limits` to the cell's files. `fresh`: the cell was just made,
  // so its files hold the kernel's defaults and only set fields are written
  // (a control file write is a system call, and a v1 cell has a dozen).
  absl::Status Apply(const std::string& cell, const CgroupLimits& limits,
                     bool fresh);
  absl::Status ApplyMemory(const std::string& dir, const CgroupLimits& limits,
                           bool fresh);
  absl::StatusOr<std::string> FreezerState(const std::string& dir);

  const Roots roots_;
  // The distinct root directories, one per hierarchy, in a fixed order.
  const std::vector<std::string> hierarchies_;
  const std::unique_ptr<CgroupFs> fs_;
  // Whether mycel's cpuset cgroup has cgroup.clone_children set, so that a
  // new cell starts with its CPUs and memory nodes.
  bool cpuset_cloned_ = false;
  absl::Duration kill_timeout_ = absl::Seconds(5);
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_CGROUP_CGROUP_V1_H_
