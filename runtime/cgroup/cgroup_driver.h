// The cgroup layer of a cell: one interface, CgroupDriver, with a cgroup v2
// implementation (CgroupV2, cgroup_v2.h) and a v1/hybrid one (CgroupV1,
// cgroup_v1.h), chosen at runtime by NewCgroupDriver().
//
// A cell is a leaf cgroup <root>/<cell>, where <root> is mycel's subtree
// (normally /sys/fs/cgroup/mycel on v2, /sys/fs/cgroup/<controller>/mycel in
// every v1 hierarchy). The cgroup tree itself is the record of which cells
// exist, so a restarted daemon adopts them again through List().
#ifndef MYCEL_RUNTIME_CGROUP_CGROUP_DRIVER_H_
#define MYCEL_RUNTIME_CGROUP_CGROUP_DRIVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/host_info.h"
#include "runtime/unique_fd.h"

namespace mycel {

// The resource limits of a cell. This is the whole desired state: Create()
// and Update() both apply every field, and an unset field means "no limit"
// (or the kernel default), so applying the same limits twice is a no-op.
struct CgroupLimits {
  // CPU bandwidth in cores (0.5 = half of one CPU per 100 ms period).
  std::optional<double> cpu_max;
  // Relative CPU weight, 1..10000, cgroup v2 semantics (default 100). On v1
  // it becomes cpu.shares the way systemd maps it: weight * 1024 / 100.
  std::optional<uint64_t> cpu_weight;
  // Hard memory limit in bytes; the OOM killer acts inside the cell above it.
  std::optional<int64_t> memory_max;
  // Memory throttling threshold in bytes (v1: memory.soft_limit_in_bytes,
  // which only matters under global memory pressure).
  std::optional<int64_t> memory_high;
  // Swap the cell may use, in bytes (0 = none). v1 limits memory+swap
  // together, so there it needs memory_max and swap accounting in the kernel.
  std::optional<int64_t> memory_swap_max;
  // Maximum number of tasks (processes and threads) in the cell.
  std::optional<int64_t> pids_max;
  // CPUs and memory nodes as kernel lists ("0-1,3"); "" inherits mycel's.
  std::string cpuset_cpus;
  std::string cpuset_mems;
};

// Smallest limits the drivers accept. Below them the kernel either refuses
// the value or a cell cannot even start a process.
inline constexpr double kMinCpuMaxCores = 0.01;  // the kernel's 1 ms quota
inline constexpr int64_t kMinMemoryBytes = int64_t{1} << 20;  // 1 MiB
inline constexpr uint64_t kMinCpuWeight = 1;
inline constexpr uint64_t kMaxCpuWeight = 10000;
inline constexpr int64_t kMaxPids = int64_t{1} << 22;  // PID_MAX_LIMIT

// cpu_max is applied as a quota per period of this length (the kernel's
// default period): cpu.max "<quota> 100000" on v2, cpu.cfs_quota_us on v1.
inline constexpr int64_t kCpuPeriodUsec = 100000;

// The quota in microseconds per kCpuPeriodUsec for `cores` (rounded).
// REQUIRES: `cores` passed ValidateCgroupLimits.
int64_t CpuQuotaUsec(double cores);

// Checks every field of `limits` against what the kernel accepts and what
// makes sense on a host with `num_cpus` CPUs. Returns INVALID_ARGUMENT whose
// message starts with the field name ("cpu_max: must be > 0, got -1").
// `num_memory_nodes` bounds cpuset_mems the same way when > 0.
absl::Status ValidateCgroupLimits(const CgroupLimits& limits, int num_cpus,
                                  int num_memory_nodes = 0);

// What a cell has used, read from the kernel's accounting files.
struct CgroupStats {
  uint64_t cpu_usage_usec = 0;
  int64_t memory_current = 0;  // bytes
  // Highest memory_current seen, when the kernel exposes it (v2 memory.peak,
  // v1 memory.max_usage_in_bytes); 0 otherwise.
  int64_t memory_peak = 0;
  int64_t pids_current = 0;
  // Processes the OOM killer killed in the cell (and its descendants).
  uint64_t oom_kills = 0;
  // Anonymous memory and page cache (tmpfs included), from memory.stat.
  int64_t memory_anon = 0;
  int64_t memory_file = 0;
};

// Fds a freshly cloned child uses to enter the cell's cgroup before exec,
// using only async-signal-safe calls. Exactly one of the two is set.
struct CgroupJoin {
  // v1: cgroup.procs of the cell, opened O_WRONLY|O_CLOEXEC, one per
  // distinct controller mount; write(fd, "0", 1) moves the writer.
  std::vector<UniqueFd> procs_fds;
  // v2: an O_DIRECTORY fd of the cell cgroup, for clone3's
  // CLONE_INTO_CGROUP, or to open its cgroup.procs (SpawnRequest's
  // cgroup_dir_fd does whichever its clone allows).
  UniqueFd dir_fd;
};

// Creates, limits, inspects and removes cells. Cell names are validated by
// callers (a-z0-9 and -_., at most 63 characters); the drivers still refuse
// "", ".", ".." and names containing '/' with INVALID_ARGUMENT.
//
// Implementations keep no per-cell state in memory (the kernel's tree is the
// state), so they are thread-safe; concurrent calls on the same cell race
// the way the same shell commands would.
class CgroupDriver {
 public:
  virtual ~CgroupDriver() = default;

  // "v1" or "v2".
  virtual absl::string_view name() const = 0;

  // Creates <root>/<cell> (in every hierarchy on v1) and applies `limits`.
  // ALREADY_EXISTS if the cell is present. On error nothing is left behind.
  virtual absl::Status Create(const std::string& cell,
                              const CgroupLimits& limits) = 0;
  // Applies `limits` (the whole desired state) to an existing cell.
  virtual absl::Status Update(const std::string& cell,
                              const CgroupLimits& limits) = 0;
  // Applies `limits` to a cell that Create made with no limits and that
  // has not been limited since, so that its files still hold the kernel's
  // defaults: only the fields that are set are written, as in Create.
  virtual absl::Status ApplyToNew(const std::string& cell,
                                  const CgroupLimits& limits) = 0;
  // Opens the files a child needs to join the cell (see CgroupJoin).
  virtual absl::StatusOr<CgroupJoin> OpenJoin(const std::string& cell) = 0;
  // Moves process `pid` (with all its threads) into the cell.
  virtual absl::Status AddProcess(const std::string& cell, pid_t pid) = 0;
  // Every process in the cell and in cgroups below it, sorted.
  virtual absl::StatusOr<std::vector<pid_t>> Pids(const std::string& cell) = 0;
  // SIGKILLs every process in the cell and waits (at most kill_timeout,
  // 5 s by default) until the cell is empty; DEADLINE_EXCEEDED naming the
  // survivors otherwise. Processes cannot escape by forking meanwhile.
  virtual absl::Status KillAll(const std::string& cell) = 0;
  // Removes the cell (every hierarchy, children first). FAILED_PRECONDITION
  // naming the cell if processes remain (on v1, the hierarchies that held
  // none may already be gone; call again once the processes are);
  // NOT_FOUND if there is no cell.
  virtual absl::Status Destroy(const std::string& cell) = 0;
  virtual absl::StatusOr<CgroupStats> Stats(const std::string& cell) = 0;
  // CgroupStats::oom_kills alone: one file read instead of Stats' half
  // dozen, for callers that only need to tell an OOM kill from another
  // SIGKILL.
  virtual absl::StatusOr<uint64_t> OomKills(const std::string& cell) = 0;
  virtual absl::StatusOr<bool> Exists(const std::string& cell) = 0;
  // Names of the cells under the root, sorted (adoption after a restart).
  virtual absl::StatusOr<std::vector<std::string>> List() = 0;
  // Renames cell `from` to `to`, processes and limits included, so that
  // the name is free at once while the old cell is emptied and removed
  // later. ALREADY_EXISTS if `to` exists, NOT_FOUND without `from`;
  // UNIMPLEMENTED where the kernel cannot (cgroup v2 refuses rename(2)).
  // On error nothing has changed.
  virtual absl::Status Rename(const std::string& from,
                              const std::string& to) = 0;
  // Whether Rename can succeed here (v1), or always returns UNIMPLEMENTED.
  virtual bool can_rename() const = 0;

  // Keeps `lock` (an flock on the subtree, see NewCgroupDriver) for the
  // driver's lifetime.
  void HoldSubtreeLock(UniqueFd lock) { subtree_lock_ = std::move(lock); }

 private:
  UniqueFd subtree_lock_;
};

// Chooses and prepares the driver for this host. `mount_root` is normally
// /sys/fs/cgroup and `subtree` is "mycel" (a relative path; nested
// components such as "mycel/cells" are allowed).
//
// The subtree is one daemon's alone: the driver holds an exclusive flock
// on its directory (in the memory hierarchy on v1), so that a second
// daemon given the same subtree is refused with FAILED_PRECONDITION
// rather than take (and, after a crash, clean up) the first one's cells.
//  - kV2: CgroupV2::Open (creates the subtree, enables controllers).
//  - kV1, kHybrid: CgroupV1::Open on the v1 hierarchies; the hybrid unified
//    mount carries no controllers and is not used.
//  - kNone: FAILED_PRECONDITION.
absl::StatusOr<std::unique_ptr<CgroupDriver>> NewCgroupDriver(
    CgroupMode mode, const std::string& mount_root, const std::string& subtree);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_CGROUP_CGROUP_DRIVER_H_
