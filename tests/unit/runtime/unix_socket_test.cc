#include "runtime/unix_socket.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "runtime/fd.h"

namespace mycel {
namespace {

struct SocketPair {
  UniqueFd a;
  UniqueFd b;
};

SocketPair MakeSocketPair() {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

TEST_CASE("SendWithFd and ReceiveWithFds pass a descriptor (SCM_RIGHTS)") {
  SocketPair s = MakeSocketPair();
  absl::StatusOr<Pipe> pipe = MakePipe();
  REQUIRE(pipe.ok());
  const absl::string_view parts[] = {"head", "", "tail"};
  REQUIRE(SendWithFd(s.a.get(), parts, pipe->write_end.get(), 0).ok());

  char buf[64];
  absl::StatusOr<ReceivedMessage> got =
      ReceiveWithFds(s.b.get(), buf, sizeof(buf), 0, /*max_fds=*/4);
  REQUIRE(got.ok());
  CHECK(std::string(buf, got->bytes) == "headtail");
  CHECK_FALSE(got->truncated);
  CHECK_FALSE(got->control_truncated);
  REQUIRE(got->fds.size() == 1);
  CHECK((fcntl(got->fds[0].get(), F_GETFD) & FD_CLOEXEC) != 0);
  // The received descriptor is the pipe's write end.
  REQUIRE(write(got->fds[0].get(), "x", 1) == 1);
  char c = 0;
  REQUIRE(read(pipe->read_end.get(), &c, 1) == 1);
  CHECK(c == 'x');
}

TEST_CASE("ReceiveWithFds without a control buffer installs no descriptor") {
  SocketPair s = MakeSocketPair();
  absl::StatusOr<Pipe> pipe = MakePipe();
  REQUIRE(pipe.ok());
  const absl::string_view parts[] = {"abcdef"};
  REQUIRE(SendWithFd(s.a.get(), parts, pipe->write_end.get(), 0).ok());
  char buf[4];
  absl::StatusOr<ReceivedMessage> got =
      ReceiveWithFds(s.b.get(), buf, sizeof(buf), 0, /*max_fds=*/0);
  REQUIRE(got.ok());
  CHECK(got->bytes == 4);
  CHECK(got->truncated);
  CHECK(got->fds.empty());
}

TEST_CASE("Send, an empty receive, EOF and EAGAIN") {
  SocketPair s = MakeSocketPair();
  char buf[16];
  CHECK(absl::IsUnavailable(
      ReceiveWithFds(s.b.get(), buf, sizeof(buf), MSG_DONTWAIT, 1).status()));
  absl::StatusOr<size_t> sent = Send(s.a.get(), "ping", 0);
  REQUIRE(sent.ok());
  CHECK(*sent == 4);
  absl::StatusOr<ReceivedMessage> got =
      ReceiveWithFds(s.b.get(), buf, sizeof(buf), 0, 1);
  REQUIRE(got.ok());
  CHECK(std::string(buf, got->bytes) == "ping");
  CHECK(got->fds.empty());
  s.a.reset();
  got = ReceiveWithFds(s.b.get(), buf, sizeof(buf), 0, 1);
  REQUIRE(got.ok());
  CHECK(got->bytes == 0);
  // The peer is gone: EPIPE, with no SIGPIPE (MSG_NOSIGNAL).
  CHECK_FALSE(Send(s.b.get(), "x", 0).ok());
  const absl::string_view parts[] = {"x"};
  CHECK_FALSE(SendWithFd(s.b.get(), parts, -1, 0).ok());
}

}  // namespace
}  // namespace mycel
