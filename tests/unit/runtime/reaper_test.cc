// Reaper: watched children reach their callback once, orphans are counted,
// and Collect takes a child's exit ahead of ReapAll.
#include "runtime/reaper.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <vector>

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

}  // namespace
}  // namespace mycel
