// A state directory and the log keepers started for it, for tests of the
// keeper (cells/log_keeper.h). Header-only: its users link mycel_cells.
#ifndef MYCEL_TESTS_TESTING_LOG_KEEPER_FIXTURE_H_
#define MYCEL_TESTS_TESTING_LOG_KEEPER_FIXTURE_H_

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cells/log_file.h"
#include "cells/log_keeper_client.h"
#include "tests/testing/log_lines.h"
#include "tests/testing/process.h"

namespace mycel::testing {

// A state directory and the keepers started for it, killed at the end.
class KeeperFixture {
 public:
  KeeperFixture() { REQUIRE(mkdir(state_.c_str(), 0700) == 0); }
  ~KeeperFixture() { KillAll(); }

  // SIGKILLs and reaps every keeper started here.
  void KillAll() {
    for (pid_t pid : keepers_) {
      kill(pid, SIGKILL);
      WaitForChild(pid);
    }
    keepers_.clear();
  }

  const std::string& state() const { return state_; }
  std::string Log(const std::string& exe) const {
    return cells::LogPath(state_, "c", exe);
  }

  cells::LogKeeperClient::Options Options() {
    cells::LogKeeperClient::Options o;
    o.state_dir = state_;
    o.binary = Binary("myceld");
    o.spawn = [this](const std::vector<std::string>& argv) {
      absl::StatusOr<pid_t> pid = cells::SpawnKeeperProcess(argv);
      if (pid.ok()) keepers_.push_back(*pid);
      return pid;
    };
    return o;
  }

  std::unique_ptr<cells::LogKeeperClient> Connect() {
    absl::StatusOr<std::unique_ptr<cells::LogKeeperClient>> c =
        cells::LogKeeperClient::Connect(Options());
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    return *std::move(c);
  }

  // Waits for keeper `pid` to exit on its own; its exit code, or -1.
  int WaitForExit(pid_t pid, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        keepers_.erase(std::find(keepers_.begin(), keepers_.end(), pid));
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  const std::vector<pid_t>& keepers() const { return keepers_; }

 private:
  TempDir dir_;
  std::string state_ = dir_.Sub("state");
  std::vector<pid_t> keepers_;
};

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_TESTING_LOG_KEEPER_FIXTURE_H_
