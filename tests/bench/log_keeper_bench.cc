// log_keeper_bench: what the log keeper costs a workload and the daemon.
//
//   log_keeper_bench [--runs N] [--mb M] [--myceld PATH]
//
// Rows (median and p90 over N runs, wall time):
//   start a keeper and connect (spawn until HELLO is answered)
//   OPEN of a new stream; OPEN of an existing one (a restart)
//   FLUSH with an empty pipe; FLUSH with 64 KiB in the pipe
// Then M MB of 100-byte lines written as fast as a child can, straight to
// a file and through the keeper (8 MiB cap), with the keeper's VmRSS.
// Files go to a fresh directory under /tmp.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cells/log_file.h"
#include "cells/log_keeper_client.h"
#include "runtime/fs.h"
#include "tests/testing/log_lines.h"
#include "tests/testing/process.h"

namespace {

using Clock = std::chrono::steady_clock;
using mycel::cells::LogKeeperClient;

struct Stats {
  double median_us = 0;
  double p90_us = 0;
};

Stats Measure(int runs, const std::function<bool()>& once) {
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    Clock::time_point t = Clock::now();
    if (!once()) {
      fprintf(stderr, "a measurement failed\n");
      exit(1);
    }
    us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 9 / 10)]};
}

void Print(const char* name, const Stats& s) {
  printf("%-46s %10.1f %10.1f\n", name, s.median_us, s.p90_us);
}

int64_t RssKb(pid_t pid) {
  absl::StatusOr<std::string> status =
      mycel::ReadFile(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmRSS:")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(line, &kb)) return kb;
  }
  return 0;
}

LogKeeperClient::Options KeeperOptions(const std::string& state,
                                       const std::string& myceld,
                                       std::vector<pid_t>* pids) {
  LogKeeperClient::Options o;
  o.state_dir = state;
  o.binary = myceld;
  o.spawn = [pids](const std::vector<std::string>& argv) {
    absl::StatusOr<pid_t> pid = mycel::cells::SpawnKeeperProcess(argv);
    if (pid.ok()) pids->push_back(*pid);
    return pid;
  };
  return o;
}

void KillAll(std::vector<pid_t>* pids) {
  for (pid_t p : *pids) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  pids->clear();
}

// Seconds for a child to write `mb` MB of lines into `fd`.
double WriteLines(int fd, int mb) {
  mycel::testing::LineWriterOptions o;
  o.count = static_cast<uint64_t>(mb) * 10'000;
  o.width = 100;
  o.burst = 1000;
  Clock::time_point t = Clock::now();
  pid_t writer = mycel::testing::StartLineWriter(fd, o);
  if (mycel::testing::WaitForChild(writer) != mycel::testing::kWriterOk) {
    fprintf(stderr, "the writer failed\n");
    exit(1);
  }
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200, mb = 200;
  std::string myceld = mycel::testing::Binary("myceld");
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (a == "--mb" && i + 1 < argc) {
      mb = atoi(argv[++i]);
    } else if (a == "--myceld" && i + 1 < argc) {
      myceld = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--runs N] [--mb M] [--myceld PATH]\n",
              argv[0]);
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  mycel::testing::TempDir dir;
  std::vector<pid_t> pids;
  printf("%-46s %10s %10s\n", "log keeper", "median us", "p90 us");

  int serial = 0;
  Print(
      "start a keeper and connect", Measure(std::min(runs, 50), [&] {
        std::string state = dir.Sub(absl::StrCat("start-", serial++));
        mkdir(state.c_str(), 0700);
        bool ok =
            LogKeeperClient::Connect(KeeperOptions(state, myceld, &pids)).ok();
        KillAll(&pids);
        return ok;
      }));

  std::string state = dir.Sub("state");
  mkdir(state.c_str(), 0700);
  auto client = LogKeeperClient::Connect(KeeperOptions(state, myceld, &pids));
  if (!client.ok()) {
    fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  LogKeeperClient& c = **client;
  Print("OPEN, new stream", Measure(runs, [&] {
          std::string exe = absl::StrCat("e", serial++);
          return c
              .Open("c/" + exe, mycel::cells::LogPath(state, "c", exe), 8 << 20)
              .ok();
        }));
  const std::string path = mycel::cells::LogPath(state, "c", "x");
  absl::StatusOr<mycel::UniqueFd> w = c.Open("c/x", path, 8 << 20);
  if (!w.ok()) return 1;
  Print("OPEN, existing stream (a restart)",
        Measure(runs, [&] { return c.Open("c/x", path, 8 << 20).ok(); }));
  Print("FLUSH, empty pipe",
        Measure(runs, [&] { return c.Flush("c/x").ok(); }));
  std::string chunk(64 << 10, 'x');
  chunk.back() = '\n';
  Print("FLUSH, 64 KiB in the pipe (write + FLUSH)", Measure(runs, [&] {
          return write(w->get(), chunk.data(), chunk.size()) ==
                     static_cast<ssize_t>(chunk.size()) &&
                 c.Flush("c/x").ok();
        }));

  // Throughput.
  mycel::UniqueFd direct(open(dir.Sub("direct.log").c_str(),
                              O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  double straight = WriteLines(direct.get(), mb);
  const pid_t keeper = c.keeper_pid();
  int64_t rss_before = RssKb(keeper);
  std::atomic<bool> done{false};
  int64_t rss_max = rss_before;
  std::thread watcher([&] {
    while (!done) {
      rss_max = std::max(rss_max, RssKb(keeper));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  absl::StatusOr<mycel::UniqueFd> fast =
      c.Open("c/fast", mycel::cells::LogPath(state, "c", "fast"), 8 << 20);
  if (!fast.ok()) return 1;
  // Until the keeper has it all in the file.
  Clock::time_point t = Clock::now();
  WriteLines(fast->get(), mb);
  if (!c.Flush("c/fast").ok()) return 1;
  double through = std::chrono::duration<double>(Clock::now() - t).count();
  done = true;
  watcher.join();
  printf("\n%d MB of 100-byte lines        %10s %10s\n", mb, "seconds", "MB/s");
  printf("%-46s %10.3f %10.0f\n", "straight to a file", straight,
         mb / straight);
  printf("%-46s %10.3f %10.0f\n", "through the keeper (8 MiB cap)", through,
         mb / through);
  printf("keeper VmRSS: %lld kB before, %lld kB at most during the write\n",
         static_cast<long long>(rss_before), static_cast<long long>(rss_max));
  client->reset();
  KillAll(&pids);
  return 0;
}
