#include "runtime/reaper.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace mycel {

bool ChildExit::exited() const { return code == CLD_EXITED; }
bool ChildExit::signaled() const {
  return code == CLD_KILLED || code == CLD_DUMPED;
}

namespace {

// Whether the process behind `pidfd` has been reaped (waitid on a pidfd
// answers ECHILD then, even if its pid now names another process).
bool Reaped(int pidfd) {
  siginfo_t info = {};
  while (waitid(P_PIDFD, static_cast<id_t>(pidfd), &info,
                WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno != EINTR) return errno == ECHILD;
  }
  return false;
}

}  // namespace

void Reaper::Watch(pid_t pid, Callback on_exit) {
  absl::MutexLock lock(&mu_);
  watches_[pid] = std::move(on_exit);
}

uint64_t Reaper::BeginSpawn() {
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = ++ticket_;
  spawning_.insert(ticket);
  return ticket;
}

void Reaper::EndSpawn(uint64_t ticket, pid_t pid, int pidfd, Callback on_exit) {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    spawning_.erase(ticket);
    if (pid > 0) {
      auto it = unclaimed_.find(pid);
      // Reaped after this spawn began, and (when a pidfd can say) this very
      // process: a pid reused since would name a process not yet reaped.
      if (it != unclaimed_.end() && it->second.at > ticket &&
          (pidfd < 0 || Reaped(pidfd))) {
        claimed_.emplace_back(std::move(on_exit), it->second.exit);
        unclaimed_.erase(it);
        ++watched_reaped_;
        ++claimed_after_exit_;
        wake = true;
      } else {
        watches_[pid] = std::move(on_exit);
      }
    }
    PruneUnclaimedLocked();
  }
  // The callback may need locks the spawner holds now; ReapAll runs it.
  if (wake) kill(getpid(), SIGCHLD);
}

void Reaper::DropOldestUnclaimedLocked() {
  auto oldest = unclaimed_.begin();
  for (auto it = unclaimed_.begin(); it != unclaimed_.end(); ++it) {
    if (it->second.at < oldest->second.at) oldest = it;
  }
  ++orphans_reaped_;
  unclaimed_.erase(oldest);
}

void Reaper::PruneUnclaimedLocked() {
  const uint64_t oldest = spawning_.empty() ? UINT64_MAX : *spawning_.begin();
  for (auto it = unclaimed_.begin(); it != unclaimed_.end();) {
    if (it->second.at < oldest) {
      ++orphans_reaped_;
      unclaimed_.erase(it++);
    } else {
      ++it;
    }
  }
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
    ready.swap(claimed_);
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
        // It may be a child whose spawner has not watched it yet.
        if (!spawning_.empty()) {
          unclaimed_[pid] = Unclaimed{++ticket_, exit};
          if (unclaimed_.size() > max_unclaimed_) DropOldestUnclaimedLocked();
        } else {
          ++orphans_reaped_;
        }
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

uint64_t Reaper::claimed_after_exit() const {
  absl::MutexLock lock(&mu_);
  return claimed_after_exit_;
}

}  // namespace mycel
