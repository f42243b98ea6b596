// Unix SEQPACKET sockets: a listener at a path, a client connection to it,
// and their options. (The daemon's stream listeners are in listener.h.)
#ifndef MYCEL_RUNTIME_UNIX_SOCKET_H_
#define MYCEL_RUNTIME_UNIX_SOCKET_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
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

// send(2) of `data` as one message with `flags` (MSG_NOSIGNAL is added),
// retrying on EINTR: the bytes sent. UNAVAILABLE (EAGAIN) when a
// non-blocking send would block.
absl::StatusOr<size_t> Send(int fd, absl::string_view data, int flags);

// sendmsg(2) of `parts` as one message (empty parts are left out), with
// `pass_fd` as SCM_RIGHTS when it is >= 0, and `flags` (MSG_NOSIGNAL is
// added); retries on EINTR.
absl::Status SendWithFd(int fd, absl::Span<const absl::string_view> parts,
                        int pass_fd, int flags);

// One message received by ReceiveWithFds.
struct ReceivedMessage {
  size_t bytes = 0;                // 0: the peer closed the connection
  bool truncated = false;          // MSG_TRUNC: the message was larger
  bool control_truncated = false;  // MSG_CTRUNC: descriptors were lost
  std::vector<UniqueFd> fds;       // SCM_RIGHTS descriptors, close-on-exec
};

// recvmsg(2) of one message into `buf` with `flags`, retrying on EINTR.
// With `max_fds` > 0, takes up to that many SCM_RIGHTS descriptors
// (MSG_CMSG_CLOEXEC), whatever else the message holds; with 0 there is no
// control buffer, so the kernel closes any descriptor sent and none is
// installed here. UNAVAILABLE (EAGAIN) when a non-blocking receive finds
// nothing, or a receive timeout passes.
absl::StatusOr<ReceivedMessage> ReceiveWithFds(int fd, void* buf, size_t size,
                                               int flags, size_t max_fds);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_UNIX_SOCKET_H_
