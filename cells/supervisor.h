// Supervisor: the life of one executable. It starts runs through its host,
// takes their exits, restarts per the restart policy (cells/restart.h)
// after delays on a Clock, and stops a run with SIGTERM and, after the
// grace period, SIGKILL. It does no I/O of its own and reads no other
// clock, so that its tests drive it with a ManualClock and a fake host.
#ifndef MYCEL_CELLS_SUPERVISOR_H_
#define MYCEL_CELLS_SUPERVISOR_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cells/cells.h"
#include "cells/restart.h"
#include "mycel/v1/cells.pb.h"
#include "runtime/clock.h"
#include "runtime/reaper.h"

namespace mycel::cells {

// One run of an executable: its process, as the supervisor sees it.
class Run {
 public:
  virtual ~Run() = default;
  virtual pid_t pid() const = 0;
  // NOT_FOUND once the process has exited and been reaped.
  virtual absl::Status Signal(int sig) = 0;
  // After its exit by SIGKILL: whether the cell's OOM killer did it.
  virtual bool OomKilled() const = 0;
  // SIGKILLs the process and waits, at most `timeout`, until it is dead.
  virtual void Kill(absl::Duration timeout) = 0;
};

// Not thread-safe: its host calls it under the one lock that guards it (the
// cell's), and gives the same lock to the callbacks it schedules.
class Supervisor {
 public:
  // What a supervisor needs from where it runs: the cell manager, or a
  // test. Called with the supervisor's lock held.
  class Host {
   public:
    virtual ~Host() = default;
    // Starts a run. Its end comes back through Exited(generation, ...).
    virtual absl::StatusOr<std::unique_ptr<Run>> Launch(
        const Supervisor& s, uint64_t generation,
        const StartOptions& options) = 0;
    // Records the spec and status durably; the host logs an error.
    virtual absl::Status Record(const Supervisor& s) = 0;
    // Calls `fn` with the supervisor `delay` from now, under its lock, if it
    // still exists then.
    virtual void After(absl::Duration delay, const Supervisor& s,
                       std::function<void(Supervisor&)> fn) = 0;
    // Its status changed.
    virtual void Changed(const Supervisor& s) = 0;
  };

  // `host` and `clock` must outlive it.
  Supervisor(Host* host, const Clock* clock, mycel::v1::ExecutableSpec spec,
             RestartParams restart);
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  const mycel::v1::ExecutableSpec& spec() const { return spec_; }
  const mycel::v1::ExecutableStatus& status() const { return status_; }
  mycel::v1::Executable ToProto() const;
  // RUNNING.
  bool running() const;
  // Ended for good: EXITED or FAILED.
  bool final() const;
  // The run, while there is one.
  Run* run() const { return run_.get(); }
  // Changes with every run, exit and stop; a callback that names another
  // is stale. Unique in the process, so that it never matches the runs of
  // another supervisor of the same name.
  uint64_t generation() const { return generation_; }

  // Starts the first run. An error (nothing could be started, or the run
  // could not be recorded and was killed) is the caller's to return.
  absl::Status Start(const StartOptions& options);

  // The run of `generation` ended (`exit` nullopt: how is unknown, as for
  // an adopted process on an older kernel). Records how, and restarts it
  // if its policy says so. A stale generation is ignored.
  void Exited(uint64_t generation, const std::optional<ChildExit>& exit);

  // SIGTERM now and SIGKILL `grace` later (default: the spec's stop_grace,
  // else 10 s); cancels a pending restart, and the run is not restarted.
  // true: it is ending (Changed tells when); false: it has ended already.
  // An error from the signal.
  absl::StatusOr<bool> Stop(std::optional<absl::Duration> grace);
  // FAILED_PRECONDITION when not running.
  absl::Status Signal(int sig);
  // For a deleted cell: SIGKILL, and no exit or timer of it counts any more.
  void Abandon();
  // For a shutdown: as Stop, with no SIGKILL timer (the caller kills what
  // is left) and no restart after. true if a process was signalled.
  bool StopForShutdown();
  void KillForShutdown();

  // After a daemon restart, with the status recorded before it. A process
  // found running (`run`) is supervised again; a run recorded RUNNING or
  // RESTARTING whose process is gone counts as a failed run, and its
  // policy decides whether to start it again.
  void Recover(const mycel::v1::ExecutableStatus& recorded,
               std::unique_ptr<Run> run);

 private:
  static uint64_t NextGeneration();
  absl::Status Launch(const StartOptions& options);
  void Restart(uint64_t generation);
  // Decides what follows an ended run at `now`.
  void AfterRun(bool clean, absl::Time now);

  Host* const host_;
  const Clock* const clock_;
  mycel::v1::ExecutableSpec spec_;
  mycel::v1::ExecutableStatus status_;
  const RestartParams restart_;
  RestartHistory history_;
  std::unique_ptr<Run> run_;
  absl::Time started_;
  bool stop_requested_ = false;
  bool shutting_down_ = false;
  uint64_t generation_ = 0;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_SUPERVISOR_H_
