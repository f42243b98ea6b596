// CellManager: creates cells, starts and supervises their executables,
// applies restart policies, and adopts what survived a daemon restart.
#ifndef MYCEL_CELLS_CELL_MANAGER_H_
#define MYCEL_CELLS_CELL_MANAGER_H_

#include <boost/asio/io_context.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cells/cell_store.h"
#include "cells/log_file.h"
#include "cells/log_keeper_client.h"
#include "cells/restart.h"
#include "mycel/v1/cells.pb.h"
#include "runtime/background_queue.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/reaper.h"
#include "runtime/seccomp/capabilities.h"
#include "runtime/seccomp/seccomp_profile.h"
#include "runtime/spawn/spawn.h"

namespace mycel::cells {

// Where a started executable's stdout and stderr go instead of its log file
// (used by Run, which streams them to the client). Borrowed fds.
struct StartOptions {
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// Thread-safe. RPC handlers call in from gRPC threads; exits arrive from the
// Reaper and timers fire on the event loop (`io`). Lock order: the
// manager's mutex, then the reaper's.
class CellManager {
 public:
  struct Options {
    std::string state_dir;
    store::Store* store = nullptr;          // must outlive the manager
    LogKeeperClient* log_keeper = nullptr;  // must outlive the manager
    Reaper* reaper = nullptr;               // must outlive the manager
    boost::asio::io_context* io = nullptr;  // must outlive the manager
    std::unique_ptr<CgroupDriver> cgroups;
    int64_t log_cap_bytes = kDefaultLogCapBytes;
    // Blank cells kept ready for each set of namespaces that cells have
    // asked for lately (see Blank); 0 turns the pool off.
    int pool_size = 1;
    // Moving a process into a cgroup does not wait for an RCU grace period
    // (HostInfo::cgroup_favordynmods). Where the driver cannot rename (v2),
    // taking a blank moves its init; without this that move costs more
    // than making the cell afresh, so the pool is used only with it.
    bool cheap_cgroup_moves = false;
    // The soft RLIMIT_NOFILE workloads get (the daemon raises its own);
    // 0 leaves them the daemon's.
    rlim_t workload_open_file_limit = 0;
    // The admin socket, hidden from cells with the state directory (see
    // cells/confinement.h).
    std::string admin_socket;
    // Host processes that a cell without its own pid namespace may not
    // signal, renice, limit or open a pidfd to (SeccompOptions::
    // protected_pids; the daemon may add its helpers, such as the log
    // keeper). Empty: PID 1 and this process. Such cells also may not
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
  ~CellManager();

  struct CreateOptions {
    // A throwaway cell (Cells.Run's): removed, with whatever runs in it,
    // when the daemon restarts, since its client is gone by then.
    bool ephemeral = false;
  };
  // Makes the cell's cgroup and init, then records it; returns only once
  // it is recorded. On any error, nothing of the cell is left.
  absl::StatusOr<mycel::v1::Cell> CreateCell(const mycel::v1::CellSpec& spec,
                                             const CreateOptions& options);
  absl::StatusOr<mycel::v1::Cell> CreateCell(const mycel::v1::CellSpec& spec) {
    return CreateCell(spec, CreateOptions{});
  }
  absl::Status DeleteCell(const std::string& name, bool force);
  absl::StatusOr<mycel::v1::Cell> GetCell(const std::string& name);
  std::vector<mycel::v1::Cell> ListCells();
  absl::StatusOr<mycel::v1::CellStats> Stats(const std::string& name);

  absl::StatusOr<mycel::v1::Executable> Start(
      const mycel::v1::ExecutableSpec& spec, const StartOptions& options = {});
  // Called with an executable once it has ended for good (EXITED or
  // FAILED), or with NOT_FOUND when it, or its cell, is gone. It runs with
  // the manager's lock held, on whichever thread saw the change: it must
  // not block or call back into the manager (post the work elsewhere).
  using EndCallback =
      std::function<void(absl::StatusOr<mycel::v1::Executable>)>;
  using EndWatch = uint64_t;

  // SIGTERM, then SIGKILL after `grace` (default: the executable's
  // stop_grace, else 10 s); `done` is called once it has ended (a stopped
  // executable is not restarted), at once if it is not running. A pending
  // restart is cancelled.
  void Stop(const std::string& cell, const std::string& name,
            std::optional<absl::Duration> grace, EndCallback done);
  absl::StatusOr<mycel::v1::Executable> Signal(const std::string& cell,
                                               const std::string& name,
                                               int sig);
  absl::StatusOr<mycel::v1::Executable> Get(const std::string& cell,
                                            const std::string& name);
  absl::StatusOr<std::vector<mycel::v1::Executable>> List(
      const std::string& cell);
  // Calls `done` once the executable has ended for good: at once (on this
  // thread) if it has, or if it does not exist; otherwise later, and then
  // the returned id can cancel the watch. 0 means `done` has been called.
  EndWatch WatchEnd(const std::string& cell, const std::string& name,
                    EndCallback done) ABSL_LOCKS_EXCLUDED(mu_);
  // After this returns, the watch's callback is not called any more (it
  // may have been called already).
  void CancelEndWatch(EndWatch id) ABSL_LOCKS_EXCLUDED(mu_);
  std::string LogPath(const std::string& cell, const std::string& name) const;
  // Has the log keeper copy what the executable wrote so far into its log
  // file (see LogKeeperClient::Flush), so that a reader sees all of it.
  absl::Status FlushLog(const std::string& cell, const std::string& name);

  // Stops every executable (SIGTERM, `grace`, SIGKILL) and every cell init,
  // for a PID-1 shutdown. Runs on the event-loop thread and reaps itself.
  void StopAll(absl::Duration grace);

  absl::string_view cgroup_driver() const { return cgroups_->name(); }

 private:
  struct Exe {
    mycel::v1::ExecutableSpec spec;
    mycel::v1::ExecutableStatus status;
    RestartParams restart;
    RestartHistory history;
    std::optional<Child> child;  // owns the pidfd while running
    uint64_t start_time = 0;
    bool adopted = false;  // not our child: watched through its pidfd
    // Its output goes to a log keeper stream (not Run's pipes), which must
    // be closed when the executable goes for good.
    bool keeper_stream = false;
    bool stop_requested = false;
    // Changes on every launch and exit (NextGeneration); a timer or exit
    // callback that names another generation is stale.
    uint64_t generation = 0;
    uint64_t oom_baseline = 0;
    absl::Time started;
  };
  struct Cell {
    mycel::v1::CellSpec spec;
    int64_t created_us = 0;
    bool ephemeral = false;
    int ns_flags = 0;
    CgroupLimits limits;
    SeccompProgram seccomp;
    PreparedCapabilities caps;
    std::optional<Child> init;
    uint64_t init_start_time = 0;
    std::map<std::string, std::unique_ptr<Exe>> exes;
  };

  // A cell made ahead of time, without a name: a cgroup ".pool-<pid>-<n>"
  // with no limits, and a cell init that has made `ns_flags`' namespaces
  // (a private /proc included). A new cell with those namespaces, no user
  // namespace and no rootfs takes one, which costs a rename, its limits and
  // its hostname instead of a cgroup per hierarchy and an init's start,
  // and the background thread makes the next one.
  struct Blank {
    std::string cgroup;
    int ns_flags = 0;
    std::optional<Child> init;
  };

  CellManager(Options options, CellStore store);

  absl::Status Recover();
  absl::StatusOr<std::unique_ptr<Cell>> Prepare(
      const mycel::v1::CellSpec& spec);
  // Starts the init of a cell (or of a blank: `hostname` empty) in cgroup
  // `cgroup`, with `cell`'s namespaces, rootfs and id maps, watched with
  // `on_exit` (if set; otherwise the reaper collects it as an orphan).
  absl::StatusOr<Child> SpawnInit(
      const std::string& cgroup, const Cell& cell, const std::string& hostname,
      std::function<void(const ChildExit&)> on_exit);
  absl::Status StartInit(Cell* cell) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a blank can stand in for `cell`'s cgroup and init.
  bool Poolable(const Cell& cell) const;
  // Makes the host view (cells/confinement.h): a mount namespace that a
  // short-lived process sets up, held by host_view_ after it is gone.
  absl::Status MakeHostView();
  // Whether `cell`'s processes see the host's files through the host view:
  // it has no mount namespace, is not kept an unprivileged host user by a
  // user namespace, and did not ask for writable system paths.
  bool InHostView(const Cell& cell) const;
  // Makes a blank of `cell`'s namespaces into `cell`: true if it did; false
  // if there was none to take (or it could not be used), and the caller
  // makes the cell from scratch; an error if the cell cannot be made (its
  // limits, its hostname), with nothing left behind.
  absl::StatusOr<bool> TakeBlank(Cell* cell) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the making of blanks until the pool for `ns_flags` is full.
  void RefillPool(int ns_flags) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes one blank (on background_).
  void MakeBlank(int ns_flags) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Launch(Cell* cell, Exe* exe, const StartOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnExit(const std::string& cell, const std::string& name,
              uint64_t generation, const ChildExit* exit)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records how a run ended, and restarts it if its policy says so.
  void HandleExit(const std::string& cell, const std::string& name, Exe* exe,
                  const ChildExit* exit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An executable or cell changed: wakes StopAll and fires the end watches
  // whose executable has ended for good or is gone.
  void Changed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnInitExit(const std::string& cell, pid_t pid) ABSL_LOCKS_EXCLUDED(mu_);
  void WatchAdopted(const std::string& cell, const std::string& name,
                    uint64_t generation, int pidfd);
  // For an adopted process that has exited: reads its status through its
  // pidfd once its parent has reaped it (Linux 6.15; polled), and hands it
  // to OnExit; where the kernel cannot tell, or it is not reaped in time,
  // the exit is recorded with its status unknown.
  void CollectAdoptedExit(const std::string& cell, const std::string& name,
                          uint64_t generation, std::shared_ptr<UniqueFd> pidfd,
                          int attempt) ABSL_LOCKS_EXCLUDED(mu_);
  // Records the executable's spec and status; an error is logged too.
  absl::Status Persist(const Exe& exe) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SIGKILLs a child that was started but could not be recorded, and waits
  // (at most a second) until it is dead.
  void KillUnrecorded(Child* child) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Kills what is left in a cgroup no cell uses any more (a deleted cell's,
  // renamed; a blank's) and removes it; failures are logged (the cell is
  // already gone).
  void RemoveCgroup(const std::string& cgroup);
  void RunAfter(absl::Duration delay, std::function<void()> fn);
  // Closes the keeper's streams of `names` in `cell` (gone for good).
  void CloseLogStreams(const std::string& cell,
                       const std::vector<std::string>& names);
  mycel::v1::Cell ToProto(const Cell& cell) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mycel::v1::Executable ToProto(const Exe& exe) const;
  absl::StatusOr<Cell*> FindCell(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Exe*> FindExe(const std::string& cell, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string state_dir_;
  Reaper* const reaper_;
  boost::asio::io_context* const io_;
  const std::unique_ptr<CgroupDriver> cgroups_;
  LogKeeperClient* const log_keeper_;
  const int64_t log_cap_bytes_;
  const int num_cpus_;
  const int num_memory_nodes_;
  const std::vector<pid_t> protected_pids_;  // Options::protected_pids
  CellStore store_;

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::string, std::unique_ptr<Cell>> cells_ ABSL_GUARDED_BY(mu_);
  struct PendingEnd {
    std::string cell, name;
    EndCallback done;
  };
  std::map<EndWatch, PendingEnd> end_watches_ ABSL_GUARDED_BY(mu_);
  EndWatch end_watch_serial_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Generations of executables, unique across the manager, so that a
  // callback for a run of one Exe object can never match another's (a
  // replaced executable of the same name, say).
  uint64_t NextGeneration() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ++generation_serial_;
  }
  uint64_t generation_serial_ ABSL_GUARDED_BY(mu_) = 0;
  // Makes the names of deleted cells' cgroups unique (see DeleteCell).
  uint64_t deleted_serial_ ABSL_GUARDED_BY(mu_) = 0;
  // Blanks ready, and being made, by namespace flags.
  const int pool_size_;
  const bool cheap_cgroup_moves_;
  const rlim_t workload_open_file_limit_;
  // The daemon's paths hidden from cells, and the host view's mount
  // namespace (an nsfs descriptor).
  const std::vector<std::string> hidden_paths_;
  UniqueFd host_view_;
  std::map<int, std::vector<std::unique_ptr<Blank>>> pool_ ABSL_GUARDED_BY(mu_);
  std::map<int, int> pool_pending_ ABSL_GUARDED_BY(mu_);
  uint64_t pool_serial_ ABSL_GUARDED_BY(mu_) = 0;
  // Cleanup of deleted cells, and blanks for the pool: work that no caller
  // waits for, at low priority (it would slow the requests it runs beside).
  // Last, so it is destroyed (and drained) first.
  BackgroundQueue background_{BackgroundQueue::Priority::kLow};
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_CELL_MANAGER_H_
