// The log keeper on a full disk (a 1 MiB tmpfs, so it needs root): it
// drops output and says how much, and never blocks the writer.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cells/log_keeper_client.h"
#include "runtime/fs.h"
#include "runtime/unique_fd.h"
#include "tests/testing/log_keeper_fixture.h"
#include "tests/testing/log_lines.h"
#include "tests/testing/requires.h"

namespace mycel::cells {
namespace {

using Clock = std::chrono::steady_clock;
using testing::KeeperFixture;
using testing::LineWriterOptions;

MYCEL_TEST_REQUIRES(testing::Root("mounts a small tmpfs"));

TEST_CASE("log keeper: a full disk drops output, never blocks the writer") {
  KeeperFixture k;
  REQUIRE(mount("tmpfs", k.state().c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                "size=1m,mode=0700") == 0);
  {
    auto client = k.Connect();
    const std::string path = k.Log("full");
    absl::StatusOr<UniqueFd> w = client->Open("c/full", path, 256 << 10);
    REQUIRE(w.ok());
    // Fill the disk, but for 100 kB (that then fills up mid-line).
    {
      UniqueFd filler(open((k.state() + "/filler").c_str(),
                           O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
      REQUIRE(filler.valid());
      std::string block(4096, 'f');
      off_t size = 0;
      for (ssize_t n;
           (n = write(filler.get(), block.data(), block.size())) > 0;) {
        size += n;
      }
      CHECK(errno == ENOSPC);
      REQUIRE(ftruncate(filler.get(), size - 100'000) == 0);
    }
    LineWriterOptions o;
    o.width = 100;
    o.burst = 1000;
    o.count = 80'000;  // 8 MB: eight times the disk, eight times the pipe
    Clock::time_point start = Clock::now();
    pid_t writer = testing::StartLineWriter(w->get(), o);
    CHECK(testing::WaitForChild(writer) == testing::kWriterOk);
    double took = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK(took < 10);
    absl::StatusOr<LogStreamCounts> counts = client->Flush("c/full");
    REQUIRE(counts.ok());
    CHECK(counts->bytes_dropped > 0);
    CHECK(counts->bytes_written > 50'000);
    CHECK(counts->bytes_written + counts->bytes_dropped == o.count * o.width);
    struct stat st;
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK(st.st_size <= (256 << 10));

    // Space again: the next output comes after one line that says what
    // was lost.
    REQUIRE(unlink((k.state() + "/filler").c_str()) == 0);
    REQUIRE(write(w->get(), "after\n", 6) == 6);
    absl::StatusOr<LogStreamCounts> later = client->Flush("c/full");
    REQUIRE(later.ok());
    CHECK(later->bytes_dropped == counts->bytes_dropped);
    absl::StatusOr<std::string> log = ReadFile(path);
    REQUIRE(log.ok());
    std::string notice =
        absl::StrCat("[mycel: ", counts->bytes_dropped,
                     " bytes of output dropped: No space left on device]\n");
    CHECK_MESSAGE(absl::EndsWith(*log, notice + "after\n"), log->size());
    // What was written before the disk filled is intact, and the line the
    // full disk cut is ended before the notice.
    size_t at = log->rfind(notice);
    REQUIRE(at != std::string::npos);
    REQUIRE(at > 0);
    CHECK((*log)[at - 1] == '\n');
    std::string why;
    CHECK_MESSAGE(testing::MatchesLines(0, log->data(), counts->bytes_written,
                                        o.width, &why),
                  why);
    CHECK(at == counts->bytes_written +
                    (counts->bytes_written % o.width == 0 ? 0 : 1));
    MESSAGE("8 MB into a full 1 MiB tmpfs: the writer took ", took, " s; ",
            counts->bytes_written, " bytes written, ", counts->bytes_dropped,
            " dropped");
  }
  k.KillAll();
  CHECK(umount2(k.state().c_str(), MNT_DETACH) == 0);
}

}  // namespace
}  // namespace mycel::cells
