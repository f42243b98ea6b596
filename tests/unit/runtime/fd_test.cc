// Descriptors, pipes, epoll and SEQPACKET sockets (runtime/fd.h,
// runtime/epoll.h, runtime/unix_socket.h).
#include "runtime/fd.h"

#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/epoll.h"
#include "runtime/fs.h"
#include "runtime/process.h"
#include "runtime/syscalls.h"
#include "runtime/unix_socket.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

TEST_CASE("a pipe: non-blocking reads, readable bytes, a duplicate") {
  absl::StatusOr<Pipe> p = MakePipe();
  REQUIRE(p.ok());
  CHECK((fcntl(p->read_end.get(), F_GETFD) & FD_CLOEXEC) != 0);
  REQUIRE(SetNonBlocking(p->read_end.get(), true).ok());
  char buf[8];
  CHECK(sys::Read(p->read_end.get(), buf, sizeof(buf)) == -1);
  CHECK(errno == EAGAIN);
  CHECK(BytesReadable(p->read_end.get()) == 0);

  absl::StatusOr<UniqueFd> dup = DupCloexec(p->write_end.get());
  REQUIRE(dup.ok());
  REQUIRE(WriteAll(dup->get(), "abc", "pipe").ok());
  CHECK(BytesReadable(p->read_end.get()) == 3);
  CHECK(SetPipeSize(p->read_end.get(), 1 << 16).ok());

  REQUIRE(SetNonBlocking(p->read_end.get(), false).ok());
  CHECK((fcntl(p->read_end.get(), F_GETFL) & O_NONBLOCK) == 0);
  CHECK(sys::Read(p->read_end.get(), buf, sizeof(buf)) == 3);
}

TEST_CASE("a SEQPACKET listener, a client, and epoll between them") {
  testing::TempDir dir;
  const std::string path = dir.Sub("s.sock");
  CHECK(absl::IsNotFound(ConnectUnixSeqpacket(path).status()));

  absl::StatusOr<UniqueFd> listener = ListenUnixSeqpacket(path, 0600, 4);
  REQUIRE(listener.ok());
  absl::StatusOr<FileInfo> st = Stat(path);
  REQUIRE(st.ok());
  CHECK((st->mode & 07777) == 0600);
  CHECK(absl::IsUnavailable(AcceptConnection(listener->get()).status()));

  absl::StatusOr<Epoll> epoll = Epoll::Create();
  REQUIRE(epoll.ok());
  REQUIRE(epoll->Add(listener->get(), EPOLLIN).ok());
  struct epoll_event events[4];
  CHECK(epoll->Wait(events, 4, 0) == 0);

  absl::StatusOr<UniqueFd> client = ConnectUnixSeqpacket(path);
  REQUIRE(client.ok());
  REQUIRE(SetSocketTimeouts(client->get(), absl::Seconds(1)).ok());
  REQUIRE(epoll->Wait(events, 4, 1000) == 1);
  const int ready = events[0].data.fd;  // a packed field: copy it out
  CHECK(ready == listener->get());

  absl::StatusOr<UniqueFd> server = AcceptConnection(listener->get());
  REQUIRE(server.ok());
  CHECK(send(client->get(), "hi", 2, 0) == 2);
  char buf[4];
  CHECK(recv(server->get(), buf, sizeof(buf), 0) == 2);
  epoll->Remove(listener->get());

  CHECK(absl::IsInvalidArgument(
      ConnectUnixSeqpacket("/" + std::string(200, 'x')).status()));
}

TEST_CASE("the process's own ids") {
  CHECK(CurrentPid() == getpid());
  CHECK(EffectiveUid() == geteuid());
  absl::StatusOr<int64_t> fds = OpenFdCount();
  REQUIRE(fds.ok());
  CHECK(*fds >= 3);
}

}  // namespace
}  // namespace mycel
