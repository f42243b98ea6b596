// CellManager: the node's cells and executables (the Cells interface).
// It keeps the registry of cells and their records, and puts the parts
// together: PrepareCell checks a spec (cells/prepared_cell.h), the
// CellSpawner starts inits and executables (cells/cell_spawner.h), the
// BlankPool stands in made-ahead cells (cells/blank_pool.h), one
// Supervisor per executable restarts and stops it (cells/supervisor.h),
// and Recover adopts what survived a daemon restart (cells/adoption.cc).
#ifndef MYCEL_CELLS_CELL_MANAGER_H_
#define MYCEL_CELLS_CELL_MANAGER_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cells/blank_pool.h"
#include "cells/cell_spawner.h"
#include "cells/cell_store.h"
#include "cells/cells.h"
#include "cells/log_file.h"
#include "cells/log_keeper_client.h"
#include "cells/prepared_cell.h"
#include "cells/supervisor.h"
#include "runtime/background_queue.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/clock.h"
#include "runtime/reaper.h"

namespace mycel::cells {

// Thread-safe. RPC handlers call in from gRPC threads; exits arrive from the
// reaper, timers fire on the clock's executor, adopted processes are
// watched on the event loop (`io`).
//
// Each cell has a lock of its own, held while its cgroup, init or
// executables change (spawns included), so that work on different cells
// overlaps. Lock order: a cell's lock, then the registry's, then the end
// watches'; the reaper's and the store's come after a cell's. No cell's lock
// is taken with the registry's held.
class CellManager final : public Cells {
 public:
  struct Options {
    std::string state_dir;
    store::Store* store = nullptr;          // must outlive the manager
    LogKeeperClient* log_keeper = nullptr;  // must outlive the manager
    Reaper* reaper = nullptr;               // must outlive the manager
    boost::asio::io_context* io = nullptr;  // must outlive the manager
    Clock* clock = nullptr;                 // must outlive the manager
    std::unique_ptr<CgroupDriver> cgroups;
    int64_t log_cap_bytes = kDefaultLogCapBytes;
    // Blank cells kept ready (BlankPool::Options).
    int pool_size = 1;
    bool cheap_cgroup_moves = false;
    // The soft RLIMIT_NOFILE workloads get (the daemon raises its own);
    // 0 leaves them the daemon's.
    rlim_t workload_open_file_limit = 0;
    // The OOM score adjustment workloads get (the daemon lowers its own);
    // unset leaves them the daemon's.
    std::optional<int> workload_oom_score_adj;
    // The admin socket, hidden from cells with the state directory (see
    // cells/confinement.h).
    std::string admin_socket;
    // Host processes that a cell without its own pid namespace may not
    // signal, renice, limit or open a pidfd to (SeccompOptions::
    // protected_pids; the daemon may add its helpers, such as the log
    // keeper). Empty: DefaultProtectedPids(). Such cells also may not
    // kill(-1). Cells with profile none get no filter at all.
    std::vector<pid_t> protected_pids;
  };

  // The host processes cells without a pid namespace may not touch when
  // Options::protected_pids is empty: PID 1, this daemon, and its process
  // group when it does not lead it.
  static std::vector<pid_t> DefaultProtectedPids();

  // Builds the manager and adopts the cells and executables recorded in the
  // store: running processes are identified by pid and start time; those
  // that ended while myceld was down are recorded as such.
  static absl::StatusOr<std::unique_ptr<CellManager>> Create(Options options);

  CellManager(const CellManager&) = delete;
  CellManager& operator=(const CellManager&) = delete;
  ~CellManager() override;

  // Cells.
  absl::StatusOr<mycel::v1::Cell> CreateCell(
      const mycel::v1::CellSpec& spec, const CreateOptions& options) override;
  using Cells::CreateCell;
  absl::Status DeleteCell(const std::string& name, bool force) override;
  absl::StatusOr<mycel::v1::Cell> GetCell(const std::string& name) override;
  std::vector<mycel::v1::Cell> ListCells() override;
  absl::StatusOr<mycel::v1::CellStats> Stats(const std::string& name) override;
  absl::StatusOr<mycel::v1::Executable> Start(
      const mycel::v1::ExecutableSpec& spec,
      const StartOptions& options) override;
  using Cells::Start;
  void Stop(const std::string& cell, const std::string& name,
            std::optional<absl::Duration> grace, EndCallback done) override;
  absl::StatusOr<mycel::v1::Executable> Signal(const std::string& cell,
                                               const std::string& name,
                                               int sig) override;
  absl::StatusOr<mycel::v1::Executable> Get(const std::string& cell,
                                            const std::string& name) override;
  absl::StatusOr<std::vector<mycel::v1::Executable>> List(
      const std::string& cell) override;
  EndWatch WatchEnd(const std::string& cell, const std::string& name,
                    EndCallback done) override;
  void CancelEndWatch(EndWatch id) override;
  std::string LogPath(const std::string& cell,
                      const std::string& name) const override;
  absl::Status FlushLog(const std::string& cell,
                        const std::string& name) override;

  // Stops every executable (SIGTERM, `grace`, SIGKILL) and every cell init,
  // for a PID-1 shutdown. Runs on the event-loop thread and reaps itself.
  void StopAll(absl::Duration grace);

  absl::string_view cgroup_driver() const { return cgroups_->name(); }

 private:
  // One cell: what it was made from, its init and its executables, under
  // its own lock. It is the host of its executables' supervisors.
  class CellState final : public Supervisor::Host,
                          public std::enable_shared_from_this<CellState> {
   public:
    CellState(CellManager* manager, PreparedCell prepared, int64_t created_us,
              bool ephemeral)
        : prepared(std::move(prepared)),
          created_us(created_us),
          ephemeral(ephemeral),
          manager_(manager) {}

    const std::string& name() const { return prepared.spec.name(); }
    // The executable `exe`, unless the cell is gone.
    Supervisor* Find(const std::string& exe) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
    absl::StatusOr<Supervisor*> FindOrError(const std::string& exe)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
    mycel::v1::Cell ToProto() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

    // What the reaper (or an adopted process's pidfd) calls back with.
    Reaper::Callback ExitCallback(const std::string& exe, uint64_t generation);
    void OnExit(const std::string& exe, uint64_t generation,
                const std::optional<ChildExit>& exit) ABSL_LOCKS_EXCLUDED(mu);
    Reaper::Callback InitExitCallback();

    // Supervisor::Host, with mu held.
    absl::StatusOr<std::unique_ptr<Run>> Launch(
        const Supervisor& s, uint64_t generation,
        const StartOptions& options) override;
    absl::Status Record(const Supervisor& s) override;
    void After(absl::Duration delay, const Supervisor& s,
               std::function<void(Supervisor&)> fn) override;
    void Changed(const Supervisor& s) override;

    const PreparedCell prepared;
    const int64_t created_us;
    const bool ephemeral;
    absl::Mutex mu;
    std::optional<Child> init ABSL_GUARDED_BY(mu);
    std::map<std::string, std::unique_ptr<Supervisor>> exes ABSL_GUARDED_BY(mu);
    // Executables whose output goes to a log keeper stream (not Run's
    // pipes), which is closed when they go for good.
    std::set<std::string> keeper_streams ABSL_GUARDED_BY(mu);
    // Deleted, or never made: every callback that finds it ignores it.
    bool gone ABSL_GUARDED_BY(mu) = false;

   private:
    CellManager* const manager_;
  };
  using CellRef = std::shared_ptr<CellState>;

  CellManager(Options options, CellStore store,
              std::unique_ptr<CellSpawner> spawner);

  // The cell `name` (NOT_FOUND naming it when there is none). Lock it, and
  // check `gone`, before use.
  absl::StatusOr<CellRef> FindCell(const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<CellRef> AllCells() ABSL_LOCKS_EXCLUDED(mu_);
  // Makes `cell`'s cgroup and init, from the pool or afresh, and records
  // it. On error nothing of it is left.
  absl::Status Build(CellState* cell, bool* from_pool)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cell->mu);
  absl::Status StartInit(CellState* cell)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cell->mu);
  // Calls the end watches of `cell`'s executables that have ended for good
  // or are gone.
  void FireEndWatches(const CellState& cell)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cell.mu) ABSL_LOCKS_EXCLUDED(watch_mu_);
  EndWatch AddEndWatch(const CellState& cell, const std::string& exe,
                       EndCallback done) ABSL_LOCKS_EXCLUDED(watch_mu_);
  // Closes the keeper's streams of `names` in `cell` (gone for good).
  void CloseLogStreams(const std::string& cell,
                       const std::set<std::string>& names);

  // Adoption after a restart (cells/adoption.cc).
  absl::Status Recover();
  // Removes Cells.Run's cells of an earlier daemon, and cgroups no record
  // names; returns the cells to adopt.
  absl::StatusOr<std::vector<CellRow>> DropLeftovers(std::vector<CellRow> rows);
  void AdoptCell(const CellRow& row);
  enum class Adoption {
    kNoCell,    // its cell is gone
    kRecorded,  // it was not running: as recorded
    kAdopted,   // its process runs, and is supervised again
    kLost,      // it ended while no myceld ran
  };
  Adoption AdoptExecutable(const ExecutableRow& row);
  void CloseStaleLogStreams();
  void WatchAdopted(const CellRef& cell, const std::string& exe,
                    uint64_t generation, const Child& child);
  // For an adopted process that has exited: reads its status through its
  // pidfd once its parent has reaped it (Linux 6.15; polled), and hands it
  // to OnExit; where the kernel cannot tell, or it is not reaped in time,
  // the exit is recorded with its status unknown.
  void CollectAdoptedExit(std::weak_ptr<CellState> cell, std::string exe,
                          uint64_t generation, std::shared_ptr<UniqueFd> pidfd,
                          int attempt);

  const std::string state_dir_;
  Reaper* const reaper_;
  boost::asio::io_context* const io_;
  Clock* const clock_;
  const std::unique_ptr<CgroupDriver> cgroups_;
  LogKeeperClient* const log_keeper_;
  const int64_t log_cap_bytes_;
  HostShape host_shape_;
  CellStore store_;
  const std::unique_ptr<CellSpawner> spawner_;
  // Makes the names of deleted cells' cgroups unique (see DeleteCell).
  std::atomic<uint64_t> deleted_serial_{0};

  absl::Mutex mu_;
  std::map<std::string, CellRef> cells_ ABSL_GUARDED_BY(mu_);

  struct PendingEnd {
    const CellState* cell;
    std::string exe;
    EndCallback done;
  };
  absl::Mutex watch_mu_;
  std::map<EndWatch, PendingEnd> end_watches_ ABSL_GUARDED_BY(watch_mu_);
  EndWatch end_watch_serial_ ABSL_GUARDED_BY(watch_mu_) = 0;

  // Cleanup of deleted cells, and blanks for the pool: work that no caller
  // waits for, at low priority (it would slow the requests it runs beside).
  // Destroyed (and drained) before the pool that posts to it.
  std::optional<BlankPool> pool_;
  BackgroundQueue background_{BackgroundQueue::Priority::kLow};
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_CELL_MANAGER_H_
