// PidLock: an exclusive, advisory lock on a file that also records the
// holder's pid, so a second instance can say who is in the way.
#ifndef MYCEL_RUNTIME_PID_LOCK_H_
#define MYCEL_RUNTIME_PID_LOCK_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "runtime/unique_fd.h"

namespace mycel {

// Holds flock(LOCK_EX) on a file for as long as the object lives. The kernel
// drops the lock when the holder dies, so a stale lock file never blocks a
// restart. Move-only; not thread-safe.
class PidLock {
 public:
  // Creates `path` if needed, locks it without blocking, and writes our pid
  // into it. When another process holds it, returns FAILED_PRECONDITION
  // "another myceld is running: pid N (lock PATH)".
  static absl::StatusOr<PidLock> Acquire(const std::string& path);

  PidLock(PidLock&&) = default;
  PidLock& operator=(PidLock&&) = default;

  const std::string& path() const { return path_; }

 private:
  PidLock(std::string path, UniqueFd fd)
      : path_(std::move(path)), fd_(std::move(fd)) {}

  std::string path_;
  UniqueFd fd_;
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_PID_LOCK_H_
