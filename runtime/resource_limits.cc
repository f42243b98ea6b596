#include "runtime/resource_limits.h"

#include <errno.h>

#include "runtime/status.h"

namespace mycel {

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

}  // namespace mycel
