// CgroupV2: the cell driver for the unified cgroup2 hierarchy.
#ifndef MYCEL_RUNTIME_CGROUP_CGROUP_V2_H_
#define MYCEL_RUNTIME_CGROUP_CGROUP_V2_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/cgroup/cgroup_fs.h"

namespace mycel {

// Cells are leaf cgroups <root>/<cell>. The root itself never holds
// processes: cgroup v2 lets a non-root cgroup that distributes controllers
// to children ("no internal processes") hold none.
//
// Controllers: cpu, memory and pids are required; cpuset and io are used
// when the kernel offers them, and cpuset limits fail with
// FAILED_PRECONDITION when it does not.
//
// Thread-safe (see CgroupDriver).
class CgroupV2 final : public CgroupDriver {
 public:
  // Prepares <mount_root>/<subtree>: creates each missing component and
  // enables the controllers mycel uses in the cgroup.subtree_control of the
  // parent chain, from mount_root down to the subtree itself, so cells get
  // them. FAILED_PRECONDITION when mount_root lacks a required controller.
  static absl::StatusOr<std::unique_ptr<CgroupV2>> Open(
      const std::string& mount_root, const std::string& subtree,
      std::unique_ptr<CgroupFs> fs = NewKernelCgroupFs());

  // Uses `root`, which must already exist with controllers enabled in its
  // cgroup.subtree_control (what Open does), as the parent of cells.
  CgroupV2(std::string root, std::unique_ptr<CgroupFs> fs);

  CgroupV2(const CgroupV2&) = delete;
  CgroupV2& operator=(const CgroupV2&) = delete;

  // How long KillAll waits for the cell to empty. Set before sharing the
  // driver between threads.
  void set_kill_timeout(absl::Duration timeout) { kill_timeout_ = timeout; }

  const std::string& root() const { return root_; }
  // <root>/<cell>.
  std::string CellDir(const std::string& cell) const;

  absl::string_view name() const override { return "v2"; }
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
  bool can_rename() const override { return false; }

 private:
  // The cell's directory, after checking the name and that it exists.
  absl::StatusOr<std::string> ExistingCell(const std::string& cell);
  // Writes `limits` to the files in `dir`. `fresh`: the cgroup was just
  // made, so its files hold the kernel's defaults and only set fields are
  // written.
  absl::Status Apply(const std::string& dir, const CgroupLimits& limits,
                     bool fresh);
  // Writes `value` to <dir>/<file> of an optional controller, or, when the
  // file is absent, fails naming `field` if `needed` and skips otherwise.
  absl::Status WriteOptional(const std::string& dir, absl::string_view file,
                             absl::string_view value, absl::string_view field,
                             bool needed, absl::string_view why_absent);
  // Killing through cgroup.kill (Linux 5.14+), and the freeze+kill loop for
  // older kernels.
  absl::Status KillWithCgroupKill(const std::string& cell,
                                  const std::string& dir, absl::Time deadline);
  absl::Status KillWithFreezer(const std::string& cell, const std::string& dir,
                               absl::Time deadline);
  absl::StatusOr<bool> Populated(const std::string& dir);

  const std::string root_;
  const std::unique_ptr<CgroupFs> fs_;
  absl::Duration kill_timeout_ = absl::Seconds(5);
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_CGROUP_CGROUP_V2_H_
