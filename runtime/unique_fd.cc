#include "runtime/unique_fd.h"

#include <unistd.h>

namespace mycel {

void UniqueFd::reset(int fd) {
  int old = std::exchange(fd_, fd);
  // Linux always releases the descriptor, even when close() reports EINTR,
  // so a retry could close an unrelated, newly opened descriptor.
  if (old >= 0) ::close(old);
}

}  // namespace mycel
