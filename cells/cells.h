// Cells: what the node's cells and executables are to the code above them
// (the API services, Run and Logs sessions, and a scheduler next): the
// operations a client can ask for, and nothing of how they are done.
// CellManager (cells/cell_manager.h) is the implementation; a test of the
// layers above can stand in a fake.
#ifndef MYCEL_CELLS_CELLS_H_
#define MYCEL_CELLS_CELLS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mycel/v1/cells.pb.h"

namespace mycel::cells {

// Where a started executable's stdout and stderr go instead of its log file
// (used by Run, which streams them to the client). Borrowed fds.
struct StartOptions {
  int stdout_fd = -1;
  int stderr_fd = -1;
};

struct CreateOptions {
  // A throwaway cell (Cells.Run's): removed, with whatever runs in it, when
  // the daemon restarts, since its client is gone by then.
  bool ephemeral = false;
};

// Thread-safe. Errors name the field or the object: INVALID_ARGUMENT for a
// bad spec, NOT_FOUND for an unknown cell or executable, ALREADY_EXISTS,
// FAILED_PRECONDITION for an operation the state forbids.
class Cells {
 public:
  virtual ~Cells() = default;

  // Makes the cell (its cgroup, and an init that holds its namespaces) and
  // records it; returns once it is recorded. On error nothing of it is
  // left.
  virtual absl::StatusOr<mycel::v1::Cell> CreateCell(
      const mycel::v1::CellSpec& spec, const CreateOptions& options) = 0;
  absl::StatusOr<mycel::v1::Cell> CreateCell(const mycel::v1::CellSpec& spec) {
    return CreateCell(spec, CreateOptions{});
  }
  // FAILED_PRECONDITION when executables run in it, unless `force`, which
  // kills them.
  virtual absl::Status DeleteCell(const std::string& name, bool force) = 0;
  virtual absl::StatusOr<mycel::v1::Cell> GetCell(const std::string& name) = 0;
  virtual std::vector<mycel::v1::Cell> ListCells() = 0;
  virtual absl::StatusOr<mycel::v1::CellStats> Stats(
      const std::string& name) = 0;

  virtual absl::StatusOr<mycel::v1::Executable> Start(
      const mycel::v1::ExecutableSpec& spec, const StartOptions& options) = 0;
  absl::StatusOr<mycel::v1::Executable> Start(
      const mycel::v1::ExecutableSpec& spec) {
    return Start(spec, StartOptions{});
  }

  // Called with an executable once it has ended for good (EXITED or
  // FAILED), or with NOT_FOUND when it, or its cell, is gone. It runs on
  // whichever thread saw the change, with locks of the implementation held:
  // it must not block or call back into it (post the work elsewhere).
  using EndCallback =
      std::function<void(absl::StatusOr<mycel::v1::Executable>)>;
  using EndWatch = uint64_t;

  // SIGTERM, then SIGKILL after `grace` (default: the executable's
  // stop_grace, else 10 s); `done` is called once it has ended (a stopped
  // executable is not restarted), at once if it is not running. A pending
  // restart is cancelled.
  virtual void Stop(const std::string& cell, const std::string& name,
                    std::optional<absl::Duration> grace, EndCallback done) = 0;
  // FAILED_PRECONDITION when it is not running.
  virtual absl::StatusOr<mycel::v1::Executable> Signal(const std::string& cell,
                                                       const std::string& name,
                                                       int sig) = 0;
  virtual absl::StatusOr<mycel::v1::Executable> Get(
      const std::string& cell, const std::string& name) = 0;
  // Every executable, or those of `cell` (NOT_FOUND if there is no such
  // cell).
  virtual absl::StatusOr<std::vector<mycel::v1::Executable>> List(
      const std::string& cell) = 0;
  // Calls `done` once the executable has ended for good: at once (on this
  // thread) if it has, or if it does not exist; otherwise later, and then
  // the returned id can cancel the watch. 0 means `done` has been called.
  virtual EndWatch WatchEnd(const std::string& cell, const std::string& name,
                            EndCallback done) = 0;
  // After this returns, the watch's callback is not called any more (it
  // may have been called already).
  virtual void CancelEndWatch(EndWatch id) = 0;

  // The executable's log file (cells/log_file.h).
  virtual std::string LogPath(const std::string& cell,
                              const std::string& name) const = 0;
  // Has what the executable wrote so far reach its log file, so that a
  // reader sees all of it.
  virtual absl::Status FlushLog(const std::string& cell,
                                const std::string& name) = 0;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_CELLS_H_
