#include "runtime/epoll.h"

#include <errno.h>

#include <utility>

#include "runtime/status.h"

namespace mycel {

absl::StatusOr<Epoll> Epoll::Create() {
  UniqueFd fd(epoll_create1(EPOLL_CLOEXEC));
  if (!fd) return PosixError("epoll_create1", errno);
  return Epoll(std::move(fd));
}

absl::Status Epoll::Add(int fd, uint32_t events) {
  struct epoll_event ev = {};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return PosixError("epoll_ctl", errno);
  }
  return absl::OkStatus();
}

void Epoll::Remove(int fd) { epoll_ctl(fd_.get(), EPOLL_CTL_DEL, fd, nullptr); }

}  // namespace mycel
