#include "runtime/resource_limits.h"

#include <errno.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
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

absl::StatusOr<int> GetOomScoreAdj() {
  ASSIGN_OR_RETURN(std::string text, ReadFile("/proc/self/oom_score_adj"));
  int value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::DataLossError(
        absl::StrCat("/proc/self/oom_score_adj: not a number: ", text));
  }
  return value;
}

absl::Status SetOomScoreAdj(int value) {
  if (value < -1000 || value > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "oom_score_adj: want a number from -1000 to 1000, got ", value));
  }
  return WriteFile("/proc/self/oom_score_adj", absl::StrCat(value, "\n"));
}

absl::Status SetNice(pid_t pid, int nice) {
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(pid), nice) != 0) {
    return PosixError(absl::StrCat("setpriority(pid ", pid, ", ", nice, ")"),
                      errno);
  }
  return absl::OkStatus();
}

}  // namespace mycel
