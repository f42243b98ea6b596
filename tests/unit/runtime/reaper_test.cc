// Reaper: watched children reach their callback once, orphans are counted,
// Collect takes a child's exit ahead of ReapAll, and a child reaped before
// its spawner watched it still reaches its callback.
#include "runtime/reaper.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

// A child that exits with `code` at once; its pid and a pidfd.
struct Forked {
  pid_t pid;
  UniqueFd pidfd;
};
Forked ForkExiting(int code) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(code);
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  REQUIRE(fd >= 0);
  return {pid, UniqueFd(fd)};
}

// Blocks until the child has exited, without reaping it.
void WaitExited(pid_t pid) {
  siginfo_t info = {};
  REQUIRE(waitid(P_PID, pid, &info, WEXITED | WNOWAIT) == 0);
}

TEST_CASE("reaper: a watched child's exit reaches its callback once") {
  Reaper reaper;
  Forked child = ForkExiting(3);
  std::vector<ChildExit> seen;
  reaper.Watch(child.pid, [&](const ChildExit& e) { seen.push_back(e); });
  Forked orphan = ForkExiting(0);
  WaitExited(child.pid);
  WaitExited(orphan.pid);
  CHECK(reaper.ReapAll() == 2);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].pid == child.pid);
  CHECK(seen[0].exited());
  CHECK(seen[0].status == 3);
  CHECK(reaper.watched_reaped() == 1);
  CHECK(reaper.orphans_reaped() == 1);
  CHECK(reaper.ReapAll() == 0);
  CHECK(seen.size() == 1);
}

TEST_CASE("reaper: Collect takes the exit first; the watch is dropped") {
  Reaper reaper;
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // doctest's crash handler, inherited, would report the SIGTERM below
    // as this test crashing (in the child's output; the test passes).
    signal(SIGTERM, SIG_DFL);
    pause();
    _exit(0);
  }
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  REQUIRE(pidfd.valid());
  int called = 0;
  reaper.Watch(pid, [&](const ChildExit&) { ++called; });
  CHECK_FALSE(reaper.Collect(pidfd.get(), pid).has_value());  // running
  REQUIRE(kill(pid, SIGTERM) == 0);
  WaitExited(pid);
  std::optional<ChildExit> exit = reaper.Collect(pidfd.get(), pid);
  REQUIRE(exit.has_value());
  CHECK(exit->pid == pid);
  CHECK(exit->signaled());
  CHECK(exit->status == SIGTERM);
  CHECK(reaper.watched_reaped() == 1);
  // Nothing is left for ReapAll, and the callback is never called.
  CHECK(reaper.ReapAll() == 0);
  CHECK(called == 0);
  // Collected once: the pidfd now names a reaped process.
  CHECK_FALSE(reaper.Collect(pidfd.get(), pid).has_value());
}

TEST_CASE("reaper: after ReapAll, Collect finds nothing and the watch ran") {
  Reaper reaper;
  Forked child = ForkExiting(5);
  int code = -1;
  reaper.Watch(child.pid, [&](const ChildExit& e) { code = e.status; });
  WaitExited(child.pid);
  CHECK(reaper.ReapAll() == 1);
  CHECK(code == 5);
  CHECK_FALSE(reaper.Collect(child.pidfd.get(), child.pid).has_value());
  CHECK(reaper.watched_reaped() == 1);
}

// A spawned child as SpawnWatched wants it: pid() and pidfd().
struct Spawned {
  pid_t pid_;
  int pidfd_;
  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_; }
};

// Waits up to 5 s for a SIGCHLD (blocked by the caller) and takes it.
bool TakeSigchld() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  timespec timeout{5, 0};
  return sigtimedwait(&set, nullptr, &timeout) == SIGCHLD;
}

TEST_CASE("reaper: a child reaped while its spawn is in flight is its own") {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &set, &old) == 0);
  Reaper reaper;
  Forked child{-1, UniqueFd()};
  std::vector<ChildExit> seen;
  absl::StatusOr<Spawned> spawned = reaper.SpawnWatched(
      [&]() -> absl::StatusOr<Spawned> {
        // The child execs and exits at once, and another thread reaps it,
        // all before this spawner has watched it.
        child = ForkExiting(7);
        WaitExited(child.pid);
        CHECK(TakeSigchld());
        CHECK(reaper.ReapAll() == 1);
        return Spawned{child.pid, child.pidfd.get()};
      },
      [&](const ChildExit& e) { seen.push_back(e); });
  REQUIRE(spawned.ok());
  CHECK(reaper.orphans_reaped() == 0);
  CHECK(seen.empty());  // handed over by ReapAll, not by the spawner
  // SpawnWatched woke the process's SIGCHLD handler for it.
  CHECK(TakeSigchld());
  CHECK(reaper.ReapAll() == 0);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].pid == child.pid);
  CHECK(seen[0].exited());
  CHECK(seen[0].status == 7);
  CHECK(reaper.watched_reaped() == 1);
  CHECK(reaper.claimed_after_exit() == 1);
  CHECK(reaper.ReapAll() == 0);
  CHECK(seen.size() == 1);
  REQUIRE(pthread_sigmask(SIG_SETMASK, &old, nullptr) == 0);
}

TEST_CASE("reaper: an orphan that exits during a spawn stays an orphan") {
  Reaper reaper;
  const uint64_t first = reaper.BeginSpawn();
  Forked orphan = ForkExiting(0);
  WaitExited(orphan.pid);
  CHECK(reaper.ReapAll() == 1);
  CHECK(reaper.orphans_reaped() == 0);  // kept: a spawner may claim it
  // A spawn that began after the orphan was reaped cannot claim it, even
  // one whose child had the same pid (a pid reused): it is watched anew.
  const uint64_t second = reaper.BeginSpawn();
  int called = 0;
  reaper.EndSpawn(second, orphan.pid, -1, [&](const ChildExit&) { ++called; });
  CHECK(reaper.claimed_after_exit() == 0);
  // Nor can a spawn whose pidfd names a process not reaped yet.
  pid_t live = fork();
  REQUIRE(live >= 0);
  if (live == 0) {
    pause();
    _exit(0);
  }
  UniqueFd live_fd(static_cast<int>(syscall(SYS_pidfd_open, live, 0)));
  REQUIRE(live_fd.valid());
  reaper.EndSpawn(first, orphan.pid, live_fd.get(),
                  [&](const ChildExit&) { ++called; });
  CHECK(reaper.claimed_after_exit() == 0);
  // No spawn is in flight now: the kept exit was an orphan's.
  CHECK(reaper.orphans_reaped() == 1);
  CHECK(called == 0);
  REQUIRE(kill(live, SIGKILL) == 0);
  WaitExited(live);
  CHECK(reaper.ReapAll() == 1);
  CHECK(reaper.orphans_reaped() == 2);  // the live one, never watched by pid
  CHECK(called == 0);
}

TEST_CASE("reaper: a failed spawn ends its spawn and watches nothing") {
  Reaper reaper;
  absl::StatusOr<Spawned> spawned = reaper.SpawnWatched(
      []() -> absl::StatusOr<Spawned> {
        return absl::InternalError("clone3: no");
      },
      [](const ChildExit&) { FAIL("no child, no exit"); });
  CHECK(spawned.status().message() == "clone3: no");
  Forked orphan = ForkExiting(0);
  WaitExited(orphan.pid);
  CHECK(reaper.ReapAll() == 1);
  CHECK(reaper.orphans_reaped() == 1);  // no spawn in flight: not kept
}

TEST_CASE("reaper: past its cap, the oldest kept exit goes to the orphans") {
  // A spawn that never ends (say, into a frozen cgroup) while orphans keep
  // exiting: no more than the cap is kept.
  Reaper reaper(/*max_unclaimed=*/2);
  const uint64_t hung = reaper.BeginSpawn();
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    Forked orphan = ForkExiting(0);
    WaitExited(orphan.pid);
    CHECK(reaper.ReapAll() == 1);  // one at a time: kept in order
    pids.push_back(orphan.pid);
  }
  CHECK(reaper.orphans_reaped() == 1);  // the first, dropped for the third
  // The newest kept exit is still its spawner's.
  int called = 0;
  reaper.EndSpawn(hung, pids[2], -1, [&](const ChildExit& e) {
    CHECK(e.pid == pids[2]);
    ++called;
  });
  CHECK(reaper.claimed_after_exit() == 1);
  CHECK(reaper.orphans_reaped() == 2);  // the second: no spawn left to claim
  CHECK(reaper.ReapAll() == 0);         // hands over the claimed exit
  CHECK(called == 1);
}

}  // namespace
}  // namespace mycel
