// UniqueFd: the single owner of a file descriptor.
#ifndef MYCEL_RUNTIME_UNIQUE_FD_H_
#define MYCEL_RUNTIME_UNIQUE_FD_H_

#include <utility>

namespace mycel {

// Owns one file descriptor and closes it on destruction (retrying on EINTR
// is wrong for close(2) on Linux, so it closes exactly once). Move-only.
// Not thread-safe; an instance belongs to one owner at a time.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }
  // Closes the current descriptor (if any) and takes `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_UNIQUE_FD_H_
