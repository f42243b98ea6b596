// Test helpers for logs: numbered lines of a fixed width, a child process
// that writes them, and a checker that says whether a stream of them is
// contiguous.
#ifndef MYCEL_TESTS_TESTING_LOG_LINES_H_
#define MYCEL_TESTS_TESTING_LOG_LINES_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mycel::testing {

// Line `n`: 12 decimal digits, a space, 'x' padding and '\n', `width`
// bytes in all (at least 14).
std::string NumberedLine(uint64_t n, size_t width);

struct LineWriterOptions {
  uint64_t first = 0;  // the first line's number
  uint64_t count = 0;  // lines to write
  size_t width = 100;
  // Lines per write(2) burst, and the pause after each burst.
  uint64_t burst = 1000;
  std::chrono::microseconds pause{0};
};

// Exit codes of the writer child.
inline constexpr int kWriterOk = 0;
inline constexpr int kWriterEpipe = 3;  // a write failed with EPIPE
inline constexpr int kWriterError = 4;  // any other failed write

// Forks a child that writes the lines to `fd` and exits with one of the
// codes above. SIGPIPE is ignored in the child, so a reader that is gone
// shows as kWriterEpipe. REQUIRES: the caller has no other threads (the
// child runs on after fork).
pid_t StartLineWriter(int fd, const LineWriterOptions& options);

// Waits for `pid` (a child of the caller) and returns its exit code, or
// 128 + signal.
int WaitForChild(pid_t pid);

// Whether `n` bytes at `p` are what a writer of lines of `width` numbered
// from 0 wrote at stream position `position` (byte offset from its first
// byte). Sets *why to the first difference.
bool MatchesLines(uint64_t position, const char* p, size_t n, size_t width,
                  std::string* why);

// Checks a stream of numbered lines, fed in pieces of any size: every line
// well formed and `width` long, each number one more than the last.
class LineChecker {
 public:
  explicit LineChecker(size_t width) : width_(width) {}
  // Feeds bytes; returns false at the first defect (error() says which).
  bool Feed(const char* p, size_t n);
  // Like Feed, but a jump forward of a whole number of lines is accepted
  // and counted (a follower that fell behind): skipped_lines().
  void AllowSkips() { allow_skips_ = true; }

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  uint64_t lines() const { return lines_; }
  bool empty() const { return lines_ == 0; }
  uint64_t first() const { return first_; }
  uint64_t last() const { return last_; }
  uint64_t skipped_lines() const { return skipped_; }
  // Bytes of an unfinished last line.
  size_t pending() const { return partial_.size(); }

 private:
  bool Line(const std::string& line);

  size_t width_;
  bool allow_skips_ = false;
  std::string partial_;
  std::string error_;
  uint64_t lines_ = 0, first_ = 0, last_ = 0, skipped_ = 0;
};

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_TESTING_LOG_LINES_H_
