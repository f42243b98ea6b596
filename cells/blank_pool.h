// BlankPool: cells made ahead of time, without a name. A blank is a cgroup
// ".pool-<pid>-<n>" with no limits and a cell init that has made a set of
// namespaces (a private /proc included). A new cell with those namespaces,
// no user namespace and no rootfs takes one, which costs a rename, its
// limits and its hostname instead of a cgroup per hierarchy and an init's
// start; the background queue then makes the next one.
#ifndef MYCEL_CELLS_BLANK_POOL_H_
#define MYCEL_CELLS_BLANK_POOL_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cells/cell_spawner.h"
#include "cells/prepared_cell.h"
#include "runtime/background_queue.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/reaper.h"
#include "runtime/spawn/child.h"

namespace mycel::cells {

// Cgroups of blanks. Cell names cannot start with '.'.
inline constexpr char kPoolCgroupPrefix[] = ".pool-";

// Thread-safe. Its lock is a leaf: nothing is called with it held.
class BlankPool {
 public:
  struct Options {
    // Blanks kept ready for each set of namespaces that cells have asked
    // for lately; 0 turns the pool off.
    int size = 1;
    // Moving a process into a cgroup does not wait for an RCU grace period
    // (HostInfo::cgroup_favordynmods). Where the driver cannot rename (v2),
    // taking a blank moves its init; without this that move costs more
    // than making the cell afresh, so the pool is used only with it.
    bool cheap_cgroup_moves = false;
    // All must outlive the pool.
    CgroupDriver* cgroups = nullptr;
    CellSpawner* spawner = nullptr;
    Reaper* reaper = nullptr;
    BackgroundQueue* background = nullptr;
  };

  explicit BlankPool(Options options);
  BlankPool(const BlankPool&) = delete;
  BlankPool& operator=(const BlankPool&) = delete;
  // Removes the blanks ready; one being made sees the pool is closing and
  // removes itself. Drain the background queue before the pool goes.
  ~BlankPool();

  // Whether a blank can stand in for `cell`'s cgroup and init.
  bool Poolable(const PreparedCell& cell) const;

  // Makes a blank of `cell`'s namespaces into the cell: renames its cgroup
  // (or, where the driver cannot rename, moves its init into a new one),
  // applies the limits and the hostname, and watches the init with
  // `on_exit`. Returns the init; nullopt when there was no blank to take
  // (or it could not be used), and the caller makes the cell from scratch;
  // an error if the cell cannot be made (its limits, its hostname), with
  // nothing left behind. Queues the making of the next blank either way.
  absl::StatusOr<std::optional<Child>> Take(const PreparedCell& cell,
                                            Reaper::Callback on_exit)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Blank {
    std::string cgroup;
    std::optional<Child> init;
  };

  std::unique_ptr<Blank> Pop(int ns_flags) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues the making of blanks until the pool for `ns_flags` is full.
  void Refill(int ns_flags) ABSL_LOCKS_EXCLUDED(mu_);
  // Makes one blank (on the background queue).
  void Make(int ns_flags) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const std::string& cgroup);

  const int size_;
  const bool cheap_cgroup_moves_;
  CgroupDriver* const cgroups_;
  CellSpawner* const spawner_;
  Reaper* const reaper_;
  BackgroundQueue* const background_;

  absl::Mutex mu_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // Blanks ready, and being made, by namespace flags.
  std::map<int, std::vector<std::unique_ptr<Blank>>> ready_
      ABSL_GUARDED_BY(mu_);
  std::map<int, int> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t serial_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_BLANK_POOL_H_
