// Child: ownership of one process through its pidfd.
#ifndef MYCEL_RUNTIME_SPAWN_CHILD_H_
#define MYCEL_RUNTIME_SPAWN_CHILD_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/unique_fd.h"

namespace mycel {

struct SpawnRequest;

// How a process ended, decoded from waitid(2).
struct ExitStatus {
  bool exited = false;  // ended through exit(2); `code` is its status
  int code = 0;
  bool signaled = false;  // killed by `signal`
  int signal = 0;
  bool core_dumped = false;
};

// Owns one process through its pidfd. A process is identified by
// (pid, start_time), never by its pid alone, because pids are reused.
//
// The destructor closes the pidfd but never kills or reaps the process:
// workloads outlive their owner (and the daemon), and killing is always an
// explicit decision. Move-only; not thread-safe (one owner at a time).
class Child final {
 public:
  Child(Child&&) noexcept = default;
  Child& operator=(Child&&) noexcept = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() = default;

  // The pid in the pid namespace of the caller of Spawn/Adopt.
  pid_t pid() const { return pid_; }
  // -1 after ReleasePidfd().
  int pidfd() const { return pidfd_.get(); }
  // Field 22 of /proc/PID/stat: clock ticks since boot when it started.
  uint64_t start_time() const { return start_time_; }

  // Sends `sig` through the pidfd (pidfd_send_signal), so it can never hit a
  // process that reused the pid. NOT_FOUND once the process has exited and
  // been reaped.
  absl::Status Signal(int sig);

  // Reaps the process if it has exited (waitid(P_PIDFD, WEXITED|WNOHANG));
  // nullopt while it runs. Once reaped, returns the same status again.
  // REQUIRES: the process is a child of the caller (spawned, or reparented
  // to it); otherwise the kernel answers ECHILD.
  absl::StatusOr<std::optional<ExitStatus>> TryWait();

  // Blocks until the process exits and reaps it. Same REQUIRES as TryWait.
  absl::StatusOr<ExitStatus> Wait();

  // Opens the process's mount namespace (an nsfs fd, O_CLOEXEC), through
  // the pidfd where the kernel can (Linux >= 6.11) and through
  // /proc/PID/ns/mnt elsewhere, checked against the pidfd so that a reused
  // pid cannot hand out another process's namespace. The fd keeps the
  // namespace alive after the process exits: whoever closes the last
  // reference tears its mounts down, which includes an expedited RCU grace
  // period. NOT_FOUND once the process has exited.
  absl::StatusOr<UniqueFd> OpenMountNamespace() const;

  // Whether the process has exited (its pidfd is readable), waiting at
  // most `timeout` for it (zero: just look). A process whose pidfd was
  // released counts as exited.
  bool WaitExited(absl::Duration timeout) const;

  // A second descriptor of the pidfd (O_CLOEXEC), for a watcher that
  // outlives this object's use of it.
  absl::StatusOr<UniqueFd> DupPidfd() const;

  // Gives the pidfd to the caller; this object keeps only pid and start
  // time, and further Signal/Wait calls fail with FAILED_PRECONDITION.
  UniqueFd ReleasePidfd();

  // Takes ownership of a running process that an earlier daemon started:
  // opens a pidfd for `pid` and checks that the process is the one that
  // started at `expected_start_time`. NOT_FOUND if no such process exists
  // (exited and reaped), FAILED_PRECONDITION if the pid now belongs to
  // another process. An adopted process that is not a child of the caller
  // can be signalled and polled (its pidfd becomes readable when it exits),
  // but not waited for.
  static absl::StatusOr<Child> Adopt(pid_t pid, uint64_t expected_start_time);

 private:
  friend absl::StatusOr<Child> Spawn(const SpawnRequest& request);
  Child(UniqueFd pidfd, pid_t pid, uint64_t start_time)
      : pidfd_(std::move(pidfd)), pid_(pid), start_time_(start_time) {}

  absl::StatusOr<std::optional<ExitStatus>> WaitImpl(bool block);

  UniqueFd pidfd_;
  pid_t pid_ = -1;
  uint64_t start_time_ = 0;
  std::optional<ExitStatus> exit_status_;  // set once reaped
};

namespace spawn_internal {
// Child::OpenMountNamespace on kernels without PIDFD_GET_MNT_NAMESPACE;
// exposed so that hosts with a newer kernel test it too.
absl::StatusOr<UniqueFd> OpenMountNamespaceFromProc(pid_t pid, int pidfd);
}  // namespace spawn_internal

// How a process that is not the caller's child ended, once its parent has
// reaped it: read through `pidfd`, opened while the process still existed,
// with PIDFD_GET_INFO and PIDFD_INFO_EXIT (Linux 6.15). An adopted
// executable's exit is known this way although myceld is not its parent.
// UNAVAILABLE while the process runs or waits to be reaped; UNIMPLEMENTED
// where the kernel keeps no exit status for pidfds.
absl::StatusOr<ExitStatus> ReapedExitStatus(int pidfd);

// Reads field 22 (starttime) of /proc/PID/stat. NOT_FOUND if the process
// does not exist.
absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SPAWN_CHILD_H_
