#include "tests/testing/log_lines.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace mycel::testing {

std::string NumberedLine(uint64_t n, size_t width) {
  std::string line(width, 'x');
  for (int i = 11; i >= 0; --i) {
    line[static_cast<size_t>(i)] = static_cast<char>('0' + n % 10);
    n /= 10;
  }
  line[12] = ' ';
  line[width - 1] = '\n';
  return line;
}

pid_t StartLineWriter(int fd, const LineWriterOptions& o) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  signal(SIGPIPE, SIG_IGN);
  std::vector<char> buf(o.burst * o.width);
  for (uint64_t n = o.first; n < o.first + o.count;) {
    uint64_t k = std::min(o.burst, o.first + o.count - n);
    for (uint64_t i = 0; i < k; ++i) {
      std::string line = NumberedLine(n + i, o.width);
      std::copy(line.begin(), line.end(), buf.begin() + i * o.width);
    }
    size_t len = k * o.width, done = 0;
    while (done < len) {
      ssize_t w = write(fd, buf.data() + done, len - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) _exit(errno == EPIPE ? kWriterEpipe : kWriterError);
      done += static_cast<size_t>(w);
    }
    n += k;
    if (o.pause.count() > 0) std::this_thread::sleep_for(o.pause);
  }
  _exit(kWriterOk);
}

int WaitForChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

bool MatchesLines(uint64_t position, const char* p, size_t n, size_t width,
                  std::string* why) {
  size_t done = 0;
  while (done < n) {
    uint64_t at = position + done;
    uint64_t line = at / width;
    size_t col = static_cast<size_t>(at % width);
    size_t len = std::min(width - col, n - done);
    std::string want = NumberedLine(line, width).substr(col, len);
    if (want.compare(0, len, p + done, len) != 0) {
      *why = "at stream position " + std::to_string(at) + " (line " +
             std::to_string(line) + "): \"" +
             std::string(p + done, std::min<size_t>(len, 20)) + "\", not \"" +
             want.substr(0, 20) + "\"";
      return false;
    }
    done += len;
  }
  return true;
}

bool LineChecker::Feed(const char* p, size_t n) {
  for (size_t i = 0; i < n && ok(); ++i) {
    partial_.push_back(p[i]);
    if (p[i] == '\n') {
      std::string line;
      line.swap(partial_);
      Line(line);
    }
  }
  return ok();
}

bool LineChecker::Line(const std::string& line) {
  if (line.size() != width_ || line[12] != ' ') {
    error_ = "malformed line after " + std::to_string(last_) + ": \"" +
             line.substr(0, 40) + "\"";
    return false;
  }
  uint64_t n = 0;
  for (int i = 0; i < 12; ++i) {
    char c = line[static_cast<size_t>(i)];
    if (c < '0' || c > '9') {
      error_ = "malformed number: \"" + line.substr(0, 40) + "\"";
      return false;
    }
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (lines_ == 0) {
    first_ = n;
  } else if (n != last_ + 1) {
    if (!allow_skips_ || n <= last_) {
      error_ = "line " + std::to_string(n) + " follows line " +
               std::to_string(last_);
      return false;
    }
    skipped_ += n - last_ - 1;
  }
  last_ = n;
  ++lines_;
  return true;
}

}  // namespace mycel::testing
