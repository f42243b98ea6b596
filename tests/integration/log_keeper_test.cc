// The log keeper under load, as the hardening issue found the old design
// failing: a writer far faster than rotation, a follower during rotations.
// Each runs the built myceld as the keeper, with real pipes and files. The
// full disk, which needs root, is log_keeper_full_disk_test.cc.
#include "cells/log_keeper.h"

#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cells/log_file.h"
#include "cells/log_keeper_client.h"
#include "cells/log_reader.h"
#include "runtime/fs.h"
#include "runtime/unique_fd.h"
#include "tests/testing/log_keeper_fixture.h"
#include "tests/testing/log_lines.h"
#include "tests/testing/process.h"

namespace mycel::cells {
namespace {

using Clock = std::chrono::steady_clock;
using testing::KeeperFixture;
using testing::LineChecker;
using testing::LineWriterOptions;

int64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

// VmRSS of `pid` in bytes, 0 when it cannot be read.
int64_t Rss(pid_t pid) {
  absl::StatusOr<std::string> status =
      ReadFile(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmRSS:")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(line, &kb)) return kb * 1024;
  }
  return 0;
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Checks the kept files, .1 then the current one, against what the line
// writer wrote at their stream positions, which must join up and end at
// `total`. Returns the bytes kept.
uint64_t CheckKept(const std::string& path, size_t width, uint64_t total) {
  uint64_t kept = 0;
  std::optional<uint64_t> next;
  for (const std::string& p : {RotatedLogPath(path), path}) {
    UniqueFd fd(open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) continue;
    std::optional<uint64_t> offset = ReadStreamOffset(fd.get());
    REQUIRE_MESSAGE(offset.has_value(), p);
    if (next.has_value()) CHECK(*offset == *next);
    uint64_t pos = *offset;
    std::vector<char> buf(1 << 20);
    for (ssize_t n; (n = read(fd.get(), buf.data(), buf.size())) > 0;) {
      std::string why;
      REQUIRE_MESSAGE(testing::MatchesLines(
                          pos, buf.data(), static_cast<size_t>(n), width, &why),
                      p, ": ", why);
      pos += static_cast<uint64_t>(n);
      kept += static_cast<uint64_t>(n);
    }
    next = pos;
  }
  CHECK(next == total);
  return kept;
}

TEST_CASE("log keeper: the cap holds against a writer of 200 MB") {
  KeeperFixture k;
  auto client = k.Connect();
  const pid_t keeper = client->keeper_pid();
  const uint64_t cap = kDefaultLogCapBytes;
  const std::string path = k.Log("fast");
  absl::StatusOr<UniqueFd> w = client->Open("c/fast", path, cap);
  REQUIRE(w.ok());
  const int64_t rss_before = Rss(keeper);

  LineWriterOptions o;
  o.count = 2'000'000;  // 200 MB of 100-byte lines
  o.width = 100;
  o.burst = 1000;
  const Clock::time_point start = Clock::now();
  pid_t writer = testing::StartLineWriter(w->get(), o);
  w->reset();

  // Watch sizes and the keeper's memory while it runs.
  std::atomic<bool> done{false};
  int64_t max_current = 0, max_rotated = 0, max_rss = 0;
  int samples = 0;
  std::thread watcher([&] {
    while (!done.load()) {
      max_current = std::max(max_current, FileSize(path));
      max_rotated = std::max(max_rotated, FileSize(RotatedLogPath(path)));
      max_rss = std::max(max_rss, Rss(keeper));
      ++samples;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  int exit_code = testing::WaitForChild(writer);
  const double through_keeper = Seconds(Clock::now() - start);
  absl::StatusOr<LogStreamCounts> counts = client->Flush("c/fast");
  done = true;
  watcher.join();
  CHECK(exit_code == testing::kWriterOk);
  REQUIRE(counts.ok());
  CHECK(counts->bytes_written == o.count * o.width);
  CHECK(counts->bytes_dropped == 0);

  CHECK(samples > 100);
  CHECK(max_current <= static_cast<int64_t>(cap));
  CHECK(max_rotated <= static_cast<int64_t>(cap));
  CHECK(FileSize(path) <= static_cast<int64_t>(cap));
  CHECK(FileSize(RotatedLogPath(path)) <= static_cast<int64_t>(cap));
  // Memory does not follow the output: one 64 KiB buffer.
  CHECK(rss_before > 0);
  CHECK(max_rss - rss_before < (2 << 20));

  // What is kept is the end of what was written, in order.
  uint64_t kept = CheckKept(path, o.width, o.count * o.width);
  CHECK(kept > cap - kKeeperBufferBytes);  // a full file and then some
  CHECK(kept <= 2 * cap);

  // The same writer straight into a file, for comparison.
  UniqueFd direct(open(k.Log("direct").c_str(),
                       O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  REQUIRE(direct.valid());
  Clock::time_point direct_start = Clock::now();
  writer = testing::StartLineWriter(direct.get(), o);
  CHECK(testing::WaitForChild(writer) == testing::kWriterOk);
  const double straight = Seconds(Clock::now() - direct_start);
  MESSAGE("200 MB: through the keeper ", through_keeper, " s (",
          200 / through_keeper, " MB/s), straight to a file ", straight, " s (",
          200 / straight, " MB/s); keeper VmRSS ", rss_before / 1024,
          " kB before, ", max_rss / 1024, " kB at most; largest files ",
          max_current, " and ", max_rotated, " bytes (cap ", cap, ")");
}

TEST_CASE("log keeper: a follower sees every line through rotations") {
  KeeperFixture k;
  auto client = k.Connect();
  const std::string path = k.Log("burst");
  // Bursts of 1 MB every 0.1 s, as the writer; a cap just above a
  // burst, so that files rotate about every 0.1 s.
  absl::StatusOr<UniqueFd> w = client->Open("c/burst", path, 1 << 20);
  REQUIRE(w.ok());
  absl::StatusOr<LogReader> r = LogReader::Open(path, 0);
  REQUIRE(r.ok());
  LineWriterOptions o;
  o.width = 100;
  o.burst = 10'000;
  o.count = 30 * o.burst;  // 30 MB in 3 s
  o.pause = std::chrono::milliseconds(100);
  pid_t writer = testing::StartLineWriter(w->get(), o);
  w->reset();
  LineChecker lines(o.width);
  std::vector<char> buf(64 << 10);
  bool writer_done = false;
  int exit_code = -1;
  for (;;) {
    absl::StatusOr<size_t> n = r->Read(buf.data(), buf.size());
    REQUIRE(n.ok());
    if (*n > 0) {
      REQUIRE_MESSAGE(lines.Feed(buf.data(), *n), lines.error());
      continue;
    }
    if (writer_done) break;
    int status;
    if (waitpid(writer, &status, WNOHANG) == writer) {
      exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      // What the pipe still holds reaches the file before the last read.
      REQUIRE(client->Flush("c/burst").ok());
      writer_done = true;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(exit_code == testing::kWriterOk);
  CHECK(lines.first() == 0);
  CHECK(lines.last() == o.count - 1);
  CHECK(lines.lines() == o.count);
  CHECK(r->lost_bytes() == 0);
  CHECK(FileSize(path) <= (1 << 20));
}

TEST_CASE("log keeper: a follower that falls behind knows what it missed") {
  KeeperFixture k;
  auto client = k.Connect();
  const std::string path = k.Log("behind");
  const uint64_t cap = 256 << 10;
  absl::StatusOr<UniqueFd> w = client->Open("c/behind", path, cap);
  REQUIRE(w.ok());
  absl::StatusOr<LogReader> r = LogReader::Open(path, 0);
  REQUIRE(r.ok());
  LineWriterOptions o;
  o.width = 100;
  o.burst = 10'000;  // 1 MB: four rotations each
  o.count = 10 * o.burst;
  o.pause = std::chrono::milliseconds(100);
  pid_t writer = testing::StartLineWriter(w->get(), o);
  w->reset();
  // Every byte read must be the writer's byte at the position the reader
  // says it is at: what it read so far plus what it says it lost.
  uint64_t seen = 0;
  std::vector<char> buf(64 << 10);
  bool writer_done = false;
  for (;;) {
    absl::StatusOr<size_t> n = r->Read(buf.data(), buf.size());
    REQUIRE(n.ok());
    if (*n > 0) {
      std::string why;
      REQUIRE_MESSAGE(testing::MatchesLines(seen + r->lost_bytes(), buf.data(),
                                            *n, o.width, &why),
                      why);
      seen += *n;
      continue;
    }
    if (writer_done) break;
    if (waitpid(writer, nullptr, WNOHANG) == writer) {
      REQUIRE(client->Flush("c/behind").ok());
      writer_done = true;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  CHECK(seen + r->lost_bytes() == o.count * o.width);
  CHECK(r->lost_bytes() > 0);
  CHECK(r->gaps() > 0);
  MESSAGE("a follower polling every 250 ms with a 256 KiB cap read ", seen,
          " of ", o.count * o.width, " bytes; ", r->gaps(),
          " gaps, lost_bytes ", r->lost_bytes());
}

// The daemon restarting (or crashing) while an executable writes: the
// keeper goes on alone, and the daemon finds the same pipe again.
TEST_CASE("log keeper: output flows while no controller is connected") {
  KeeperFixture k;
  auto client = k.Connect();
  pid_t keeper = client->keeper_pid();
  absl::StatusOr<UniqueFd> w = client->Open("c/a", k.Log("a"), 64 << 20);
  REQUIRE(w.ok());
  struct stat pipe_st;
  REQUIRE(fstat(w->get(), &pipe_st) == 0);
  LineWriterOptions o;
  o.count = 20000;
  o.burst = 100;
  o.pause = std::chrono::milliseconds(10);  // about 2 s in all
  pid_t writer = testing::StartLineWriter(w->get(), o);
  w->reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  client.reset();  // the daemon goes (a restart, a crash)
  struct stat st;
  REQUIRE(stat(k.Log("a").c_str(), &st) == 0);
  off_t size_then = st.st_size;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  REQUIRE(stat(k.Log("a").c_str(), &st) == 0);
  CHECK(st.st_size > size_then);  // kept flowing with nobody connected

  client = k.Connect();  // the daemon is back
  CHECK(client->keeper_pid() == keeper);
  CHECK(k.keepers().size() == 1);
  absl::StatusOr<UniqueFd> again = client->Open("c/a", k.Log("a"), 64 << 20);
  REQUIRE(again.ok());
  struct stat again_st;
  REQUIRE(fstat(again->get(), &again_st) == 0);
  CHECK(again_st.st_ino == pipe_st.st_ino);
  CHECK(testing::WaitForChild(writer) == testing::kWriterOk);  // no EPIPE
  REQUIRE(client->Flush("c/a").ok());
  LineChecker lines(100);
  std::string data = *ReadFile(k.Log("a"));
  CHECK_MESSAGE(lines.Feed(data.data(), data.size()), lines.error());
  CHECK(lines.first() == 0);
  CHECK(lines.last() == o.count - 1);
  CHECK(lines.pending() == 0);
}

}  // namespace
}  // namespace mycel::cells
