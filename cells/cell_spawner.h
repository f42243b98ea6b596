// CellSpawner: starts the processes of cells. A cell's init holds its
// namespaces; its executables join them (through the init's pidfd) and
// its cgroup, with the cell's confinement (cells/confinement.h),
// capabilities and seccomp program. Cells with no mount namespace of their
// own share the node's host view, a confined mount namespace that the
// spawner makes when it is created.
#ifndef MYCEL_CELLS_CELL_SPAWNER_H_
#define MYCEL_CELLS_CELL_SPAWNER_H_

#include <sys/resource.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cells/prepared_cell.h"
#include "cells/supervisor.h"
#include "mycel/v1/cells.pb.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/reaper.h"
#include "runtime/spawn/child.h"
#include "runtime/unique_fd.h"

namespace mycel::cells {

// Thread-safe.
class CellSpawner {
 public:
  struct Options {
    CgroupDriver* cgroups = nullptr;  // must outlive the spawner
    Reaper* reaper = nullptr;         // must outlive the spawner
    // The daemon's paths hidden from cells (DaemonPathsToHide).
    std::vector<std::string> hidden_paths;
    // The soft RLIMIT_NOFILE workloads get; 0 leaves them the daemon's.
    rlim_t workload_open_file_limit = 0;
    // The OOM score adjustment workloads get (cell inits and executables);
    // unset leaves them the daemon's.
    std::optional<int> workload_oom_score_adj;
  };

  // Makes the host view.
  static absl::StatusOr<std::unique_ptr<CellSpawner>> Create(Options options);

  CellSpawner(const CellSpawner&) = delete;
  CellSpawner& operator=(const CellSpawner&) = delete;

  // Whether `cell`'s processes see the host's files through the host view:
  // it has no mount namespace, is not kept an unprivileged host user by a
  // user namespace, and did not ask for writable system paths.
  static bool InHostView(const PreparedCell& cell);

  // Starts the init of `cell` (or of a blank: `hostname` empty) in cgroup
  // `cgroup`, with the cell's namespaces, rootfs and id maps, watched with
  // `on_exit` from before it can exit (if set; otherwise the reaper
  // collects it as an orphan).
  absl::StatusOr<Child> SpawnInit(const std::string& cgroup,
                                  const PreparedCell& cell,
                                  const std::string& hostname,
                                  Reaper::Callback on_exit);

  // Starts `spec` in `cell`, whose init is `init` (null: the cell has
  // none), with stdout and stderr on the given fds (borrowed), watched with
  // `on_exit` from before it can exit. NOT_FOUND for a command that is not
  // there; the step that failed otherwise ("setns(net): ...").
  absl::StatusOr<Child> SpawnExecutable(const PreparedCell& cell,
                                        const Child* init,
                                        const mycel::v1::ExecutableSpec& spec,
                                        int stdout_fd, int stderr_fd,
                                        Reaper::Callback on_exit);

 private:
  explicit CellSpawner(Options options);

  CgroupDriver* const cgroups_;
  Reaper* const reaper_;
  const std::vector<std::string> hidden_paths_;
  const rlim_t workload_open_file_limit_;
  const std::optional<int> workload_oom_score_adj_;
  // The host view's mount namespace (an nsfs descriptor).
  UniqueFd host_view_;
};

// A run of an executable that is a process: spawned by SpawnExecutable, or
// adopted after a daemon restart.
class ChildRun final : public Run {
 public:
  // `cgroups` must outlive it; `oom_baseline` is the cell's OOM kill count
  // from before the run started.
  ChildRun(Child child, CgroupDriver* cgroups, std::string cell,
           uint64_t oom_baseline)
      : child_(std::move(child)),
        cgroups_(cgroups),
        cell_(std::move(cell)),
        oom_baseline_(oom_baseline) {}

  pid_t pid() const override { return child_.pid(); }
  absl::Status Signal(int sig) override { return child_.Signal(sig); }
  bool OomKilled() const override;
  void Kill(absl::Duration timeout) override;
  const Child& child() const { return child_; }

 private:
  Child child_;
  CgroupDriver* const cgroups_;
  const std::string cell_;
  const uint64_t oom_baseline_;
};

// Kills what is left in a cgroup no cell uses any more (a deleted cell's,
// renamed; a blank's) and removes it; failures are logged, since the cell
// is gone already.
void RemoveCgroup(CgroupDriver* cgroups, const std::string& cgroup);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_CELL_SPAWNER_H_
