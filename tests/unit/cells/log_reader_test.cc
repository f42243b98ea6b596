// LogReader against files laid out step by step as the keeper lays them
// out (cells/log_file.h), so that each rotation lands exactly between the
// reads a test wants it between.
#include "cells/log_reader.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cells/log_file.h"
#include "runtime/fs.h"
#include "runtime/unique_fd.h"
#include "tests/testing/log_lines.h"
#include "tests/testing/process.h"

namespace mycel::cells {
namespace {

using testing::LineChecker;
using testing::NumberedLine;

// Does to <path> and <path>.1 what the keeper does: appends, renames,
// starts the next file with its stream position.
class FakeKeeper {
 public:
  explicit FakeKeeper(std::string path) : path_(std::move(path)) {
    REQUIRE(MakeDirs(path_.substr(0, path_.rfind('/')), 0700).ok());
    Create();
  }
  void Append(const std::string& data) {
    REQUIRE(write(fd_.get(), data.data(), data.size()) ==
            static_cast<ssize_t>(data.size()));
    end_ += data.size();
  }
  // Renames the file and leaves the name empty (a rotation half done).
  void Rename() {
    REQUIRE(rename(path_.c_str(), RotatedLogPath(path_).c_str()) == 0);
    fd_.reset();
  }
  void Create() {
    fd_.reset(open(path_.c_str(),
                   O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600));
    REQUIRE(fd_.valid());
    REQUIRE(WriteStreamOffset(fd_.get(), end_).ok());
  }
  void Rotate() {
    Rename();
    Create();
  }

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t end_ = 0;
};

std::string Lines(uint64_t first, uint64_t count) {
  std::string s;
  for (uint64_t i = first; i < first + count; ++i) s += NumberedLine(i, 100);
  return s;
}

// Everything the reader has now, in reads of `chunk` bytes.
std::string Drain(LogReader* r, size_t chunk = 4096) {
  std::string out;
  std::vector<char> buf(chunk);
  for (;;) {
    absl::StatusOr<size_t> n = r->Read(buf.data(), buf.size());
    REQUIRE_MESSAGE(n.ok(), n.status().ToString());
    if (*n == 0) return out;
    out.append(buf.data(), *n);
  }
}

std::string Tail(const std::string& path, int lines) {
  absl::StatusOr<LogReader> r = LogReader::Open(path, lines);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return Drain(&*r);
}

TEST_CASE("log reader: tails across the rotation boundary") {
  testing::TempDir dir;
  std::string path = LogPath(dir.path(), "c", "e");
  {
    FakeKeeper k(path);
    k.Append("one\ntwo\nthree\n");
    k.Rotate();
    k.Append("four\nfive");
  }
  CHECK(Tail(path, 0) == "one\ntwo\nthree\nfour\nfive");
  CHECK(Tail(path, 1) == "five");
  CHECK(Tail(path, 2) == "four\nfive");
  CHECK(Tail(path, 3) == "three\nfour\nfive");
  CHECK(Tail(path, 5) == "one\ntwo\nthree\nfour\nfive");
  CHECK(Tail(path, 100) == "one\ntwo\nthree\nfour\nfive");
  CHECK(absl::IsInvalidArgument(LogReader::Open(path, -1).status()));

  // A newline that ends the log ends its last line; a line split by the
  // rotation (at the cap) is one line.
  std::string split = dir.Sub("split/e.log");
  {
    FakeKeeper k(split);
    k.Append("a\nb");
    k.Rotate();
    k.Append("c\nd\n");
  }
  CHECK(Tail(split, 1) == "d\n");
  CHECK(Tail(split, 2) == "bc\nd\n");
  CHECK(Tail(split, 3) == "a\nbc\nd\n");

  // Only the rotated file (the keeper between rename and create).
  std::string half = dir.Sub("half/e.log");
  {
    FakeKeeper k(half);
    k.Append("x\ny\n");
    k.Rename();
  }
  CHECK(Tail(half, 1) == "y\n");
  CHECK(Tail(half, 0) == "x\ny\n");
}

TEST_CASE("log reader: a log larger than any of its buffers") {
  testing::TempDir dir;
  std::string path = LogPath(dir.path(), "c", "e");
  const uint64_t n = 60000;  // 6 MB in two files, 100 scan blocks
  {
    FakeKeeper k(path);
    k.Append(Lines(0, n / 2));
    k.Rotate();
    k.Append(Lines(n / 2, n / 2));
  }
  CHECK(Tail(path, 5) == Lines(n - 5, 5));
  CHECK(Tail(path, 1000) == Lines(n - 1000, 1000));  // more than one block
  CHECK(Tail(path, n / 2 + 7) == Lines(n / 2 - 7, n / 2 + 7));
  absl::StatusOr<LogReader> r = LogReader::Open(path, 0);
  REQUIRE(r.ok());
  LineChecker lines(100);
  std::vector<char> buf(4096);
  for (;;) {
    absl::StatusOr<size_t> got = r->Read(buf.data(), buf.size());
    REQUIRE(got.ok());
    if (*got == 0) break;
    REQUIRE_MESSAGE(lines.Feed(buf.data(), *got), lines.error());
  }
  CHECK(lines.first() == 0);
  CHECK(lines.last() == n - 1);
  CHECK(lines.pending() == 0);

  // One line longer than the scan block.
  std::string long_path = dir.Sub("long/e.log");
  std::string long_line(200 << 10, 'z');
  {
    FakeKeeper k(long_path);
    k.Append("first\n" + long_line + "\n");
  }
  CHECK(Tail(long_path, 1) == long_line + "\n");
}

TEST_CASE("log reader: an empty log, a missing log, one that appears") {
  testing::TempDir dir;
  std::string path = LogPath(dir.path(), "c", "e");
  CHECK(Tail(path, 0).empty());
  CHECK(Tail(path, 3).empty());
  absl::StatusOr<LogReader> missing = LogReader::Open(path, 10);
  REQUIRE(missing.ok());
  FakeKeeper k(path);
  CHECK(Tail(path, 0).empty());
  CHECK(Tail(path, 3).empty());
  CHECK(Drain(&*missing).empty());
  // A follower of a log that did not exist sees it from its first byte.
  k.Append("hello\n");
  CHECK(Drain(&*missing) == "hello\n");
  k.Rotate();
  k.Append("world\n");
  CHECK(Drain(&*missing) == "world\n");
  CHECK(missing->lost_bytes() == 0);
}

TEST_CASE("log reader: a follower reads across rotations in order, once") {
  testing::TempDir dir;
  std::string path = LogPath(dir.path(), "c", "e");
  FakeKeeper k(path);
  k.Append(Lines(0, 10));
  absl::StatusOr<LogReader> r = LogReader::Open(path, 0);
  REQUIRE(r.ok());
  std::string seen = Drain(&*r);
  CHECK(seen == Lines(0, 10));

  // Output written after the reader caught up, then a rotation before it
  // looks again: it reads the rest of the old file, then the new one.
  k.Append(Lines(10, 5));
  k.Rotate();
  k.Append(Lines(15, 5));
  seen += Drain(&*r, 333);
  CHECK(seen == Lines(0, 20));

  // Between rename and create there is nothing to read, and no error.
  k.Append(Lines(20, 1));
  k.Rename();
  seen += Drain(&*r);
  CHECK(seen == Lines(0, 21));
  k.Create();
  k.Append(Lines(21, 1));
  seen += Drain(&*r);
  CHECK(seen == Lines(0, 22));

  // Two rotations while the reader is in the middle of a file: it holds
  // that file, then finds its successor at .1.
  k.Append(Lines(22, 10));
  std::vector<char> buf(150);
  absl::StatusOr<size_t> got = r->Read(buf.data(), buf.size());
  REQUIRE(got.ok());
  seen.append(buf.data(), *got);
  k.Rotate();
  k.Append(Lines(32, 10));
  k.Rotate();
  k.Append(Lines(42, 10));
  seen += Drain(&*r);
  CHECK(seen == Lines(0, 52));
  CHECK(r->lost_bytes() == 0);
  CHECK(r->gaps() == 0);

  // Three: the file between the one it holds and the one at .1 is gone.
  // It says how much it missed, and what it reads is still in order.
  k.Append(Lines(52, 10));
  got = r->Read(buf.data(), buf.size());
  REQUIRE(got.ok());
  seen.append(buf.data(), *got);
  k.Rotate();
  k.Append(Lines(62, 7));  // lost
  k.Rotate();
  k.Append(Lines(69, 10));
  k.Rotate();
  k.Append(Lines(79, 10));
  seen += Drain(&*r);
  CHECK(seen == Lines(0, 62) + Lines(69, 20));
  CHECK(r->lost_bytes() == 700);
  CHECK(r->gaps() == 1);
}

TEST_CASE("log reader: a tail that starts in .1 follows into later files") {
  testing::TempDir dir;
  std::string path = LogPath(dir.path(), "c", "e");
  FakeKeeper k(path);
  k.Append(Lines(0, 10));
  k.Rotate();
  k.Append(Lines(10, 10));
  absl::StatusOr<LogReader> r = LogReader::Open(path, 15);
  REQUIRE(r.ok());
  std::string seen = Drain(&*r);
  CHECK(seen == Lines(5, 15));
  // The file that was current at Open rotates twice before the reader
  // gets back: it is at .1 now, and read from its end of what was seen.
  k.Append(Lines(20, 3));
  k.Rotate();
  k.Append(Lines(23, 3));
  seen += Drain(&*r);
  CHECK(seen == Lines(5, 21));
  CHECK(r->lost_bytes() == 0);

  // A tail that begins in .1 and whose current file rotates before the
  // first read: nothing is read twice, nothing skipped.
  absl::StatusOr<LogReader> late = LogReader::Open(path, 5);
  REQUIRE(late.ok());
  k.Append(Lines(26, 2));
  k.Rotate();
  CHECK(Drain(&*late) == Lines(21, 7));
}

}  // namespace
}  // namespace mycel::cells
