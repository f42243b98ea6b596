#include "runtime/unix_socket.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

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

}  // namespace mycel
