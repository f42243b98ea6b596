// Reaper: the one place where myceld collects the exit status of children.
//
// As PID 1 (or a child subreaper) myceld inherits every orphan on the
// system, and it must reap them all. It also supervises its own workloads,
// whose exit status must reach their supervisor. If two parties both waited
// for children, the reaper could take a status its supervisor needed. So,
// as in systemd, there is a single reaper: it peeks at an exited child with
// waitid(WNOWAIT), looks up who watches that pid, and only then collects
// the status and hands it over. A child is spawned outside the reaper's
// lock (SpawnWatched()), so that spawns overlap: a child's set-up can take
// milliseconds (on cgroup v1 its move into its cgroups may wait for an RCU
// grace period), and one spawn must not hold up every other spawn and all
// reaping. A child that exits before its spawner has watched it is still
// not taken for an orphan: while any spawn is in flight, ReapAll keeps the
// exits of unwatched children, and the spawner claims its child's.
#ifndef MYCEL_RUNTIME_REAPER_H_
#define MYCEL_RUNTIME_REAPER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
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
  // `max_unclaimed`: how many exits of unwatched children are kept while
  // spawns are in flight (kMaxUnclaimed; smaller in tests).
  explicit Reaper(size_t max_unclaimed) : max_unclaimed_(max_unclaimed) {}
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Spawns a child with `spawn` (which returns an absl::StatusOr of
  // something with pid() and pidfd(), as runtime/spawn's Child) and watches
  // it: `on_exit` is called once, from ReapAll, with its exit. `spawn` runs
  // without the reaper's lock, concurrently with other spawns and with
  // reaping. If the child exits and is reaped before it is watched, its
  // exit is handed to `on_exit` by the next ReapAll, which this wakes with a
  // SIGCHLD to this process (the signal whose handler calls ReapAll).
  template <typename Fn>
  auto SpawnWatched(Fn&& spawn, Callback on_exit) ABSL_LOCKS_EXCLUDED(mu_) {
    const uint64_t ticket = BeginSpawn();
    auto child = spawn();
    if (child.ok()) {
      EndSpawn(ticket, child->pid(), child->pidfd(), std::move(on_exit));
    } else {
      EndSpawn(ticket, -1, -1, nullptr);
    }
    return child;
  }

  // The two halves of SpawnWatched, for a caller that cannot use it.
  // Between them, ReapAll keeps every unwatched child's exit. EndSpawn
  // watches `pid` (whose pidfd is `pidfd`, or -1 if there is none), or
  // only ends the spawn when `pid` <= 0 (it failed).
  uint64_t BeginSpawn() ABSL_LOCKS_EXCLUDED(mu_);
  void EndSpawn(uint64_t ticket, pid_t pid, int pidfd, Callback on_exit)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `on_exit` once, with the child's exit, after the reaper collects
  // it. Replaces an earlier watch of the same pid. For a child that cannot
  // have exited yet (use SpawnWatched for one just spawned).
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
  // Children reaped before their spawner watched them, and handed over.
  uint64_t claimed_after_exit() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // An unwatched child's exit, reaped while spawns were in flight, and
  // when (on the ticket counter): only a spawn that began before it can
  // claim it.
  struct Unclaimed {
    uint64_t at;
    ChildExit exit;
  };

  // Drops the kept exits no spawn in flight can claim; they were orphans.
  void PruneUnclaimedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Past max_unclaimed_ kept exits (orphans that keep exiting while one
  // spawn hangs, say into a frozen cgroup), the oldest is taken for an
  // orphan's. A spawn's own child exits right after it execs, so its exit
  // is among the newest.
  void DropOldestUnclaimedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kMaxUnclaimed = 4096;
  const size_t max_unclaimed_ = kMaxUnclaimed;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<pid_t, Callback> watches_ ABSL_GUARDED_BY(mu_);
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
  absl::btree_set<uint64_t> spawning_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<pid_t, Unclaimed> unclaimed_ ABSL_GUARDED_BY(mu_);
  // Claimed exits, for the next ReapAll to hand over.
  std::vector<std::pair<Callback, ChildExit>> claimed_ ABSL_GUARDED_BY(mu_);
  uint64_t claimed_after_exit_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t orphans_reaped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t watched_reaped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_REAPER_H_
