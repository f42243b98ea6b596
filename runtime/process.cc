#include "runtime/process.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel {

pid_t CurrentPid() { return getpid(); }
pid_t CurrentProcessGroup() { return getpgrp(); }
uid_t EffectiveUid() { return geteuid(); }

void SetThreadName(const char* name) { prctl(PR_SET_NAME, name, 0, 0, 0); }

absl::Status SetDumpable(bool dumpable) {
  if (prctl(PR_SET_DUMPABLE, dumpable ? 1 : 0, 0, 0, 0) != 0) {
    return PosixError("prctl(PR_SET_DUMPABLE)", errno);
  }
  return absl::OkStatus();
}

absl::Status BecomeChildSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return PosixError("prctl(PR_SET_CHILD_SUBREAPER)", errno);
  }
  return absl::OkStatus();
}

absl::Status StartSession() {
  if (setsid() < 0) return PosixError("setsid", errno);
  return absl::OkStatus();
}

absl::Status StdinFromDevNull() {
  ASSIGN_OR_RETURN(UniqueFd null_fd, OpenFile("/dev/null", O_RDWR | O_CLOEXEC));
  if (null_fd.get() == STDIN_FILENO) {
    // Stdin was closed, and /dev/null took its number: keep it there.
    null_fd.release();
    return absl::OkStatus();
  }
  if (dup2(null_fd.get(), STDIN_FILENO) < 0) return PosixError("dup2", errno);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> OpenFdCount() {
  ASSIGN_OR_RETURN(std::vector<std::string> fds, ListDir("/proc/self/fd"));
  // Less the descriptor that read the directory.
  return static_cast<int64_t>(fds.size()) - 1;
}

absl::Status SignalAllProcesses(int sig) {
  if (kill(-1, sig) != 0) return PosixError("kill(-1)", errno);
  return absl::OkStatus();
}

pid_t ReapAnyChild(bool block) {
  return waitpid(-1, nullptr, block ? 0 : WNOHANG);
}

void ReapForever() {
  for (;;) {
    if (ReapAnyChild(/*block=*/true) < 0) pause();
  }
}

absl::StatusOr<std::string> CurrentDir() {
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return PosixError("getcwd", errno);
  return std::string(cwd);
}

absl::Status ChangeDir(const std::string& path) {
  if (chdir(path.c_str()) != 0) return PosixError("chdir", errno);
  return absl::OkStatus();
}

mode_t SetUmask(mode_t mask) { return umask(mask); }

}  // namespace mycel
