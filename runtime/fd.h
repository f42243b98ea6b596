// Operations on open descriptors: pipes, their flags and sizes.
#ifndef MYCEL_RUNTIME_FD_H_
#define MYCEL_RUNTIME_FD_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "runtime/unique_fd.h"

namespace mycel {

// Both ends of a pipe, each close-on-exec.
struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

// pipe2(O_CLOEXEC).
absl::StatusOr<Pipe> MakePipe();

// Sets or clears O_NONBLOCK on the open file behind `fd` (which every
// duplicate of it shares), keeping its other status flags.
absl::Status SetNonBlocking(int fd, bool on);

// A new close-on-exec descriptor of the same open file (F_DUPFD_CLOEXEC).
absl::StatusOr<UniqueFd> DupCloexec(int fd);

// Sets the capacity of the pipe behind `fd` (F_SETPIPE_SZ); the kernel
// rounds it up to a power of two pages.
absl::Status SetPipeSize(int fd, int bytes);

// How many bytes a read of `fd` would find now (FIONREAD); 0 when the
// kernel cannot say.
size_t BytesReadable(int fd);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_FD_H_
