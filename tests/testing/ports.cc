#include "tests/testing/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace mycel::testing {
namespace {

// The first port of the kernel's ephemeral range (32768 if unreadable).
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  int high = 0;
  if (in >> low >> high && low > 1024) return low;
  return 32768;
}

// Takes the lock on `port` among test processes: an abstract unix socket
// named after it, which the kernel releases when the process exits (no
// file is left behind). The descriptor is kept open on purpose.
bool LockPort(int port) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "mycel-test-port-%d",
                   port);
  socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + n;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    close(fd);
    return false;
  }
  return true;
}

// Whether `port` on 127.0.0.1 can be bound now.
bool Bindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

}  // namespace

int FreePort() {
  static std::mt19937 rng(std::random_device{}());
  const int high = EphemeralLow() - 1;
  const int low = high > 20000 ? high - 10000 : 1025;
  std::uniform_int_distribution<int> pick(low, high);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int port = pick(rng);
    if (LockPort(port) && Bindable(port)) return port;
  }
  fprintf(stderr, "FreePort: no free port in %d-%d\n", low, high);
  abort();
}

}  // namespace mycel::testing
