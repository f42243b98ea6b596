#include "tests/integration/runtime/seccomp/child_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_split.h"

extern char** environ;

namespace mycel::testing {

ChildResult RunInChild(const std::function<int()>& body) {
  ChildResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.out = "pipe2 failed";
    return result;
  }
  fflush(nullptr);  // or buffered output would be written twice
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    result.out = "fork failed";
    return result;
  }
  if (pid == 0) {
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(fds[1], 1) < 0 ||
        dup2(fds[1], 2) < 0) {
      _exit(126);
    }
    _exit(body());
  }
  close(fds[1]);
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

int Exec(std::initializer_list<const char*> argv) {
  std::vector<char*> args;
  for (const char* arg : argv) args.push_back(const_cast<char*>(arg));
  args.push_back(nullptr);
  execve(args[0], args.data(), environ);
  Report("exec", errno);
  return 127;
}

void Report(const char* key, long value) {
  char line[256];
  int n = snprintf(line, sizeof(line), "%s=%ld\n", key, value);
  if (n > 0 && static_cast<size_t>(n) < sizeof(line)) {
    ssize_t ignored = write(1, line, static_cast<size_t>(n));
    (void)ignored;
  }
}

void ReportErrno(const char* key, long ret) {
  Report(key, ret == -1 ? errno : 0);
}

std::map<std::string, std::string> ParseReport(const std::string& out) {
  std::map<std::string, std::string> values;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (line.find('=') == absl::string_view::npos) continue;
    values[std::string(kv.first)] = std::string(kv.second);
  }
  return values;
}

}  // namespace mycel::testing
