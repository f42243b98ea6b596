#include "runtime/spawn/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "runtime/fs.h"
#include "runtime/status.h"
#include "runtime/syscalls.h"

namespace mycel {
namespace {

ExitStatus DecodeSiginfo(const siginfo_t& info) {
  ExitStatus status;
  switch (info.si_code) {
    case CLD_EXITED:
      status.exited = true;
      status.code = info.si_status;
      break;
    case CLD_DUMPED:
      status.core_dumped = true;
      [[fallthrough]];
    case CLD_KILLED:
      status.signaled = true;
      status.signal = info.si_status;
      break;
    default:
      break;
  }
  return status;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev == nullptr) return absl::StrCat(sig);
  return absl::StrCat("SIG", abbrev);
}

}  // namespace

absl::Status Child::Signal(int sig) {
  if (!pidfd_) {
    return absl::FailedPreconditionError(
        absl::StrCat("signal pid ", pid_, ": pidfd was released"));
  }
  if (sys::PidfdSendSignal(pidfd_.get(), sig, nullptr, 0) != 0) {
    return PosixError(absl::StrCat("pidfd_send_signal(pid ", pid_, ", ",
                                   SignalName(sig), ")"),
                      errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ExitStatus>> Child::WaitImpl(bool block) {
  if (exit_status_) return exit_status_;
  if (!pidfd_) {
    return absl::FailedPreconditionError(
        absl::StrCat("wait for pid ", pid_, ": pidfd was released"));
  }
  for (;;) {
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    int options = WEXITED | (block ? 0 : WNOHANG);
    if (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, options) != 0) {
      if (errno == EINTR) continue;
      return PosixError(absl::StrCat("waitid(pid ", pid_, ")"), errno);
    }
    // With WNOHANG and nothing to report, the kernel leaves si_pid zero.
    if (info.si_pid == 0) return std::nullopt;
    exit_status_ = DecodeSiginfo(info);
    return exit_status_;
  }
}

absl::StatusOr<UniqueFd> Child::OpenMountNamespace() const {
  if (!pidfd_) {
    return absl::FailedPreconditionError(
        absl::StrCat("mount namespace of pid ", pid_, ": pidfd was released"));
  }
  // PIDFD_GET_MNT_NAMESPACE, _IO(PIDFS_IOCTL_MAGIC, 3): Linux 6.11, newer
  // than glibc 2.36's headers.
  constexpr unsigned long kPidfdGetMntNamespace = _IO(0xFF, 3);
  int fd = ioctl(pidfd_.get(), kPidfdGetMntNamespace, 0);
  if (fd >= 0) return UniqueFd(fd);
  if (errno == ESRCH) {
    return absl::NotFoundError(
        absl::StrCat("mount namespace of pid ", pid_, ": it has exited"));
  }
  if (errno != ENOTTY && errno != EINVAL) {
    return PosixError(
        absl::StrCat("ioctl(PIDFD_GET_MNT_NAMESPACE, pid ", pid_, ")"), errno);
  }
  return spawn_internal::OpenMountNamespaceFromProc(pid_, pidfd_.get());
}

namespace spawn_internal {

absl::StatusOr<UniqueFd> OpenMountNamespaceFromProc(pid_t pid, int pidfd) {
  std::string path = absl::StrCat("/proc/", pid, "/ns/mnt");
  UniqueFd ns(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("mount namespace of pid ", pid, ": it has exited"));
    }
    return PosixError(absl::StrCat("open ", path), errno);
  }
  // The pid cannot have been reused while the process is not yet reaped;
  // signal 0 through the pidfd fails once it has been.
  if (sys::PidfdSendSignal(pidfd, 0, nullptr, 0) != 0) {
    return absl::NotFoundError(
        absl::StrCat("mount namespace of pid ", pid, ": it has exited"));
  }
  return ns;
}

}  // namespace spawn_internal

absl::StatusOr<std::optional<ExitStatus>> Child::TryWait() {
  return WaitImpl(/*block=*/false);
}

absl::StatusOr<ExitStatus> Child::Wait() {
  ASSIGN_OR_RETURN(std::optional<ExitStatus> status, WaitImpl(/*block=*/true));
  if (!status) {
    return absl::InternalError(
        absl::StrCat("waitid(pid ", pid_, ") returned without a status"));
  }
  return *status;
}

UniqueFd Child::ReleasePidfd() { return std::move(pidfd_); }

bool Child::WaitExited(absl::Duration timeout) const {
  if (!pidfd_) return true;
  pollfd exited = {pidfd_.get(), POLLIN, 0};
  const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  int n;
  do {
    n = poll(&exited, 1, ms < 0 ? 0 : ms);
  } while (n < 0 && errno == EINTR);
  return n != 0;
}

absl::StatusOr<UniqueFd> Child::DupPidfd() const {
  int fd = fcntl(pidfd_.get(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return PosixError(absl::StrCat("dup pidfd of ", pid_), errno);
  return UniqueFd(fd);
}

absl::StatusOr<ExitStatus> ReapedExitStatus(int pidfd) {
  // struct pidfd_info and PIDFD_GET_INFO, _IOWR(PIDFS_IOCTL_MAGIC, 11, ...)
  // (Linux 6.13; exit_code with PIDFD_INFO_EXIT since 6.15), newer than
  // glibc 2.36's headers. The kernel fills what it knows and says so in
  // `mask`; a larger struct from a newer ABI is accepted by older kernels.
  struct PidfdInfo {
    uint64_t mask;
    uint64_t cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    int32_t exit_code;
    uint32_t coredump_mask;
    uint32_t spare1;
    uint64_t spare2[6];
  };
  static_assert(sizeof(PidfdInfo) == 120);
  constexpr uint64_t kPidfdInfoExit = uint64_t{1} << 3;
  constexpr unsigned long kPidfdGetInfo = _IOWR(0xFF, 11, PidfdInfo);
  PidfdInfo info;
  int rc = -1;
  // The kernel reads the exit record before it looks the task up; a reap
  // that falls between the two reads as ESRCH although the record exists
  // by then. Asking again tells that race from a kernel that keeps none.
  for (int attempt = 0; attempt < 2; ++attempt) {
    memset(&info, 0, sizeof(info));
    info.mask = kPidfdInfoExit;
    rc = ioctl(pidfd, kPidfdGetInfo, &info);
    if (rc == 0 || errno != ESRCH) break;
  }
  if (rc != 0) {
    // ENOTTY/EINVAL: no PIDFD_GET_INFO; ESRCH: reaped, and a kernel before
    // 6.15 kept nothing of it.
    if (errno == ENOTTY || errno == EINVAL || errno == ESRCH) {
      return absl::UnimplementedError(
          absl::StrCat("exit status through a pidfd: this kernel keeps none (",
                       ErrnoName(errno), ")"));
    }
    return PosixError("ioctl(PIDFD_GET_INFO)", errno);
  }
  if ((info.mask & kPidfdInfoExit) == 0) {
    return absl::UnavailableError(
        "exit status through a pidfd: the process has not been reaped yet");
  }
  // A wait(2) status.
  ExitStatus s;
  if (WIFEXITED(info.exit_code)) {
    s.exited = true;
    s.code = WEXITSTATUS(info.exit_code);
  } else if (WIFSIGNALED(info.exit_code)) {
    s.signaled = true;
    s.signal = WTERMSIG(info.exit_code);
    s.core_dumped = WCOREDUMP(info.exit_code);
  }
  return s;
}

absl::StatusOr<Child> Child::Adopt(pid_t pid, uint64_t expected_start_time) {
  if (pid <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("adopt: bad pid ", pid));
  }
  UniqueFd pidfd(sys::PidfdOpen(pid, 0));
  if (!pidfd)
    return PosixError(absl::StrCat("pidfd_open(pid ", pid, ")"), errno);
  // The pidfd pins the process that had `pid` when it was opened; /proc is
  // read by number. The process is still alive after the read only if the
  // number still named it, so check liveness after reading.
  absl::StatusOr<uint64_t> start_time = ProcessStartTime(pid);
  if (sys::PidfdSendSignal(pidfd.get(), 0, nullptr, 0) != 0) {
    return PosixError(absl::StrCat("adopt pid ", pid), errno);
  }
  if (!start_time.ok()) return start_time.status();
  if (*start_time != expected_start_time) {
    return absl::FailedPreconditionError(
        absl::StrCat("adopt pid ", pid, ": it started at ", *start_time,
                     " but the expected process started at ",
                     expected_start_time, " (the pid was reused)"));
  }
  return Child(std::move(pidfd), pid, *start_time);
}

absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/stat");
  ASSIGN_OR_RETURN(std::string stat, ReadFile(path));
  // Field 2 (comm) is in parentheses and may itself contain spaces and
  // parentheses, so fields are counted from the last ')'.
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) {
    return absl::InternalError(absl::StrCat(path, ": no ')' after comm"));
  }
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state), so field 22 is fields[19].
  constexpr size_t kStartTimeIndex = 22 - 3;
  uint64_t start_time = 0;
  if (fields.size() <= kStartTimeIndex ||
      !absl::SimpleAtoi(fields[kStartTimeIndex], &start_time)) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot parse field 22 (starttime)"));
  }
  return start_time;
}

}  // namespace mycel
