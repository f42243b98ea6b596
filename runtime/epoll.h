// Epoll: an epoll(7) instance that watches descriptors by their number.
#ifndef MYCEL_RUNTIME_EPOLL_H_
#define MYCEL_RUNTIME_EPOLL_H_

#include <sys/epoll.h>

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "runtime/unique_fd.h"

namespace mycel {

// Each event's data.fd is the descriptor it is about. Move-only; not
// thread-safe (one loop owns it).
class Epoll {
 public:
  // An instance that watches nothing; valid() is false until Create.
  Epoll() = default;
  // epoll_create1(EPOLL_CLOEXEC).
  static absl::StatusOr<Epoll> Create();

  Epoll(Epoll&&) = default;
  Epoll& operator=(Epoll&&) = default;

  bool valid() const { return fd_.valid(); }

  // Watches `fd` for `events` (EPOLLIN, ...).
  absl::Status Add(int fd, uint32_t events);
  // Stops watching `fd`. Errors are ignored: closing `fd` stops the watch
  // all the same.
  void Remove(int fd);
  // epoll_wait(2): the number of events stored, or -1 with errno set
  // (EINTR when a signal interrupted the wait). A loop's hot path: no
  // Status.
  int Wait(struct epoll_event* events, int max, int timeout_ms) {
    return epoll_wait(fd_.get(), events, max, timeout_ms);
  }

 private:
  explicit Epoll(UniqueFd fd) : fd_(std::move(fd)) {}

  UniqueFd fd_;
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_EPOLL_H_
