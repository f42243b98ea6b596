#include "runtime/pid_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel {

absl::StatusOr<PidLock> PidLock::Acquire(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (err != EWOULDBLOCK) {
      return PosixError(absl::StrCat("flock ", path), err);
    }
    char buf[32] = {};
    ssize_t n = pread(fd.get(), buf, sizeof(buf) - 1, 0);
    int64_t pid = 0;
    std::string who = "unknown pid";
    if (n > 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)),
                         &pid)) {
      who = absl::StrCat("pid ", pid);
    }
    return absl::FailedPreconditionError(
        absl::StrCat("another myceld is running: ", who, " (lock ", path, ")"));
  }
  std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd.get(), 0) != 0) {
    return PosixError(absl::StrCat("truncate ", path), errno);
  }
  if (pwrite(fd.get(), pid.data(), pid.size(), 0) !=
      static_cast<ssize_t>(pid.size())) {
    return PosixError(absl::StrCat("write ", path), errno);
  }
  return PidLock(path, std::move(fd));
}

}  // namespace mycel
