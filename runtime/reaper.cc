#include "runtime/reaper.h"

#include <errno.h>
#include <sys/wait.h>

#include <utility>
#include <vector>

namespace mycel {

bool ChildExit::exited() const { return code == CLD_EXITED; }
bool ChildExit::signaled() const {
  return code == CLD_KILLED || code == CLD_DUMPED;
}

void Reaper::WatchLocked(pid_t pid, Callback on_exit) {
  watches_[pid] = std::move(on_exit);
}

void Reaper::Watch(pid_t pid, Callback on_exit) {
  absl::MutexLock lock(&mu_);
  WatchLocked(pid, std::move(on_exit));
}

void Reaper::Unwatch(pid_t pid) {
  absl::MutexLock lock(&mu_);
  watches_.erase(pid);
}

std::optional<ChildExit> Reaper::Collect(int pidfd, pid_t pid) {
  absl::MutexLock lock(&mu_);
  siginfo_t info = {};
  // A pidfd names one process even after its pid is reused; ECHILD once
  // it has been reaped.
  while (waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG) !=
         0) {
    if (errno != EINTR) return std::nullopt;
  }
  if (info.si_pid == 0) return std::nullopt;  // still running
  // Not reaped until now, so `pid` is still its pid and the watch is its.
  if (watches_.erase(pid) > 0) {
    ++watched_reaped_;
  } else {
    ++orphans_reaped_;
  }
  return ChildExit{info.si_pid, info.si_code, info.si_status};
}

int Reaper::ReapAll() {
  std::vector<std::pair<Callback, ChildExit>> ready;
  int reaped = 0;
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      siginfo_t info = {};
      // Peek first: the status stays with the child until we decide whose
      // it is.
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno == EINTR) continue;
        break;  // ECHILD: no children at all
      }
      if (info.si_pid == 0) break;  // children exist, none has exited
      pid_t pid = info.si_pid;
      siginfo_t done = {};
      while (waitid(P_PID, pid, &done, WEXITED | WNOHANG) != 0 &&
             errno == EINTR) {
      }
      ++reaped;
      ChildExit exit{pid, info.si_code, info.si_status};
      auto it = watches_.find(pid);
      if (it == watches_.end()) {
        ++orphans_reaped_;
        continue;
      }
      ++watched_reaped_;
      ready.emplace_back(std::move(it->second), exit);
      watches_.erase(it);
    }
  }
  for (auto& [callback, exit] : ready) callback(exit);
  return reaped;
}

uint64_t Reaper::orphans_reaped() const {
  absl::MutexLock lock(&mu_);
  return orphans_reaped_;
}

uint64_t Reaper::watched_reaped() const {
  absl::MutexLock lock(&mu_);
  return watched_reaped_;
}

}  // namespace mycel
