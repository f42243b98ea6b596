#include "runtime/fd.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "runtime/status.h"

namespace mycel {

absl::StatusOr<Pipe> MakePipe() {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return PosixError("pipe2", errno);
  Pipe p;
  p.read_end.reset(ends[0]);
  p.write_end.reset(ends[1]);
  return p;
}

absl::Status SetNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return PosixError("fcntl(F_GETFL)", errno);
  const int wanted = on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK;
  if (wanted != flags && fcntl(fd, F_SETFL, wanted) != 0) {
    return PosixError("fcntl(O_NONBLOCK)", errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> DupCloexec(int fd) {
  UniqueFd dup(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!dup) return PosixError("fcntl(F_DUPFD_CLOEXEC)", errno);
  return dup;
}

absl::Status SetPipeSize(int fd, int bytes) {
  if (fcntl(fd, F_SETPIPE_SZ, bytes) < 0) {
    return PosixError("F_SETPIPE_SZ", errno);
  }
  return absl::OkStatus();
}

size_t BytesReadable(int fd) {
  int n = 0;
  if (ioctl(fd, FIONREAD, &n) != 0 || n < 0) return 0;
  return static_cast<size_t>(n);
}

}  // namespace mycel
