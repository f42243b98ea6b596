#include "runtime/resource_limits.h"

#include <errno.h>

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel {

absl::StatusOr<OpenFileLimit> GetOpenFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return PosixError("getrlimit(RLIMIT_NOFILE)", errno);
  }
  OpenFileLimit out;
  out.soft_before = limit.rlim_cur;
  out.soft = limit.rlim_cur;
  out.hard = limit.rlim_max;
  return out;
}

absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return PosixError("getrlimit(RLIMIT_NOFILE)", errno);
  }
  OpenFileLimit out;
  out.soft_before = limit.rlim_cur;
  out.hard = limit.rlim_max;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      return PosixError("setrlimit(RLIMIT_NOFILE)", errno);
    }
  }
  out.soft = limit.rlim_cur;
  return out;
}

absl::Status SetNice(pid_t pid, int nice) {
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(pid), nice) != 0) {
    return PosixError(absl::StrCat("setpriority(pid ", pid, ", ", nice, ")"),
                      errno);
  }
  return absl::OkStatus();
}

}  // namespace mycel
