#include "runtime/unix_socket.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel {
namespace {

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path ", path, " is longer than ",
                     sizeof(addr.sun_path) - 1, " bytes"));
  }
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

absl::StatusOr<UniqueFd> ListenUnixSeqpacket(const std::string& path,
                                             mode_t mode, int backlog) {
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  UniqueFd fd(
      socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return PosixError("socket", errno);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return PosixError(absl::StrCat("bind ", path), errno);
  }
  if (chmod(path.c_str(), mode) != 0) {
    return PosixError(absl::StrCat("chmod ", path), errno);
  }
  if (listen(fd.get(), backlog) != 0) {
    return PosixError(absl::StrCat("listen ", path), errno);
  }
  return fd;
}

absl::StatusOr<UniqueFd> ConnectUnixSeqpacket(const std::string& path) {
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return PosixError("socket", errno);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    return PosixError(absl::StrCat("connect ", path), errno);
  }
  return fd;
}

absl::StatusOr<UniqueFd> AcceptConnection(int listener) {
  for (;;) {
    UniqueFd c(
        accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (c) return c;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return PosixError("accept4", errno);
  }
}

absl::Status SetSocketTimeouts(int fd, absl::Duration timeout) {
  struct timeval tv = absl::ToTimeval(timeout);
  for (int option : {SO_RCVTIMEO, SO_SNDTIMEO}) {
    if (setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)) != 0) {
      return PosixError(option == SO_RCVTIMEO ? "setsockopt(SO_RCVTIMEO)"
                                              : "setsockopt(SO_SNDTIMEO)",
                        errno);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> Send(int fd, absl::string_view data, int flags) {
  for (;;) {
    ssize_t n = send(fd, data.data(), data.size(), flags | MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return PosixError("send", errno);
  }
}

absl::Status SendWithFd(int fd, absl::Span<const absl::string_view> parts,
                        int pass_fd, int flags) {
  std::vector<struct iovec> iov;
  iov.reserve(parts.size());
  for (absl::string_view part : parts) {
    if (part.empty()) continue;
    iov.push_back({const_cast<char*>(part.data()), part.size()});
  }
  struct msghdr msg = {};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  for (;;) {
    if (sendmsg(fd, &msg, flags | MSG_NOSIGNAL) >= 0) return absl::OkStatus();
    if (errno != EINTR) return PosixError("sendmsg", errno);
  }
}

absl::StatusOr<ReceivedMessage> ReceiveWithFds(int fd, void* buf, size_t size,
                                               int flags, size_t max_fds) {
  struct iovec iov = {buf, size};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  const size_t control_size =
      max_fds > 0 ? CMSG_SPACE(max_fds * sizeof(int)) : 0;
  std::unique_ptr<struct cmsghdr[]> control;
  if (max_fds > 0) {
    control.reset(
        new struct cmsghdr[(control_size + sizeof(struct cmsghdr) - 1) /
                           sizeof(struct cmsghdr)]);
    msg.msg_control = control.get();
    msg.msg_controllen = control_size;
    flags |= MSG_CMSG_CLOEXEC;
  }
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, flags);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return PosixError("recvmsg", errno);
  ReceivedMessage out;
  out.bytes = static_cast<size_t>(n);
  out.truncated = (msg.msg_flags & MSG_TRUNC) != 0;
  out.control_truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
  if (max_fds > 0) {
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int f;
        memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out.fds.emplace_back(f);
      }
    }
  }
  return out;
}

}  // namespace mycel
