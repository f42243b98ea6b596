// Unix SEQPACKET sockets: a listener at a path, a client connection to it,
// and their options. (The daemon's stream listeners are in listener.h.)
#ifndef MYCEL_RUNTIME_UNIX_SOCKET_H_
#define MYCEL_RUNTIME_UNIX_SOCKET_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/unique_fd.h"

namespace mycel {

// Binds a non-blocking, close-on-exec SOCK_SEQPACKET socket at `path`
// (which must not exist), chmods it to `mode` and listens with `backlog`.
// INVALID_ARGUMENT when `path` is too long for a socket address.
absl::StatusOr<UniqueFd> ListenUnixSeqpacket(const std::string& path,
                                             mode_t mode, int backlog);

// Connects a blocking, close-on-exec SOCK_SEQPACKET socket to `path`.
// NOT_FOUND when nothing is at `path`, UNAVAILABLE when nothing listens
// there (ECONNREFUSED); INVALID_ARGUMENT when `path` is too long.
absl::StatusOr<UniqueFd> ConnectUnixSeqpacket(const std::string& path);

// accept4(SOCK_CLOEXEC | SOCK_NONBLOCK) on a non-blocking listener,
// retrying on EINTR and on a connection aborted before it was taken.
// UNAVAILABLE (EAGAIN) when no connection waits.
absl::StatusOr<UniqueFd> AcceptConnection(int listener);

// SO_RCVTIMEO and SO_SNDTIMEO: a blocking receive or send on `fd` fails
// with EAGAIN after `timeout`.
absl::Status SetSocketTimeouts(int fd, absl::Duration timeout);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_UNIX_SOCKET_H_
