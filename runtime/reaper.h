// Reaper: the one place where myceld collects the exit status of children.
//
// As PID 1 (or a child subreaper) myceld inherits every orphan on the
// system, and it must reap them all. It also supervises its own workloads,
// whose exit status must reach their supervisor. If two parties both waited
// for children, the reaper could take a status its supervisor needed. So,
// as in systemd, there is a single reaper: it peeks at an exited child with
// waitid(WNOWAIT), looks up who watches that pid, and only then collects
// the status and hands it over. Spawning a child and registering its watch
// happen under the same lock as reaping (see Spawning()), so a child that
// exits immediately is never mistaken for an orphan.
#ifndef MYCEL_RUNTIME_REAPER_H_
#define MYCEL_RUNTIME_REAPER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace mycel {

// How a child ended, as waitid(2) reports it.
struct ChildExit {
  pid_t pid = 0;
  int code = 0;    // CLD_EXITED, CLD_KILLED or CLD_DUMPED
  int status = 0;  // exit code, or the signal number

  bool exited() const;
  bool signaled() const;
};

// Thread-safe.
class Reaper {
 public:
  using Callback = std::function<void(const ChildExit&)>;

  Reaper() = default;
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Runs `fn` with the reaper locked: nothing is reaped while it runs. Use it
  // to spawn a child and WatchLocked() it atomically. `fn` must not block for
  // long.
  template <typename Fn>
  auto Spawning(Fn&& fn) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return fn();
  }

  // Calls `on_exit` once, with the child's exit, after the reaper collects
  // it. Replaces an earlier watch of the same pid.
  void WatchLocked(pid_t pid, Callback on_exit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Watch(pid_t pid, Callback on_exit) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets a watch; the child, when it exits, is reaped as an orphan.
  void Unwatch(pid_t pid) ABSL_LOCKS_EXCLUDED(mu_);

  // Collects the child behind `pidfd` (whose pid is `pid`) now, if it has
  // exited, instead of leaving it to ReapAll: for a caller that learnt of
  // the exit from the pidfd and must not wait for SIGCHLD to reach the
  // reaper's thread. Its watch is dropped without being called. nullopt
  // while it runs, or when ReapAll has collected it already (then the watch
  // has been, or is being, called).
  std::optional<ChildExit> Collect(int pidfd, pid_t pid)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Collects every child that has exited. Callbacks run after the lock is
  // released, on the calling thread, so they may spawn and watch again.
  // Returns the number of children collected.
  int ReapAll() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t orphans_reaped() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t watched_reaped() const ABSL_LOCKS_EXCLUDED(mu_);

  // Gives the lock to code that must assert it is held.
  absl::Mutex* mu() ABSL_LOCK_RETURNED(mu_) { return &mu_; }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<pid_t, Callback> watches_ ABSL_GUARDED_BY(mu_);
  uint64_t orphans_reaped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t watched_reaped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_REAPER_H_
