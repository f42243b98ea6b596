// The log keeper as a process (the built myceld, started by the client the
// way the daemon starts it): streams, rotation by rename at the cap, its
// life apart from its controller, and what it does with bad control input.
#include "cells/log_keeper.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cells/log_file.h"
#include "cells/log_keeper_client.h"
#include "cells/log_keeper_protocol.h"
#include "runtime/fs.h"
#include "runtime/unique_fd.h"
#include "tests/testing/log_keeper_fixture.h"
#include "tests/testing/log_lines.h"
#include "tests/testing/process.h"

namespace mycel::cells {
namespace {

using testing::KeeperFixture;

void WriteAll(int fd, const std::string& data) {
  REQUIRE(write(fd, data.data(), data.size()) ==
          static_cast<ssize_t>(data.size()));
}

std::string Read(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFile(path);
  return s.ok() ? *s : "";
}

mode_t Mode(const std::string& path) {
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

ino_t PipeInode(int fd) {
  struct stat st;
  REQUIRE(fstat(fd, &st) == 0);
  return st.st_ino;
}

std::optional<uint64_t> StreamOffsetOf(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  return ReadStreamOffset(fd.get());
}

TEST_CASE("log keeper: OPEN, FLUSH, LIST and CLOSE") {
  KeeperFixture k;
  auto client = k.Connect();
  CHECK(client->keeper_pid() == k.keepers().at(0));
  absl::StatusOr<UniqueFd> w = client->Open("c/a", k.Log("a"), 1 << 20);
  REQUIRE_MESSAGE(w.ok(), w.status().ToString());
  WriteAll(w->get(), "hello\n");
  absl::StatusOr<LogStreamCounts> counts = client->Flush("c/a");
  REQUIRE(counts.ok());
  CHECK(counts->bytes_written == 6);
  CHECK(counts->bytes_dropped == 0);
  CHECK(Read(k.Log("a")) == "hello\n");
  // They hold the workloads' output.
  CHECK(Mode(k.Log("a")) == 0600);
  CHECK(Mode(LogDir(k.state(), "c")) == 0700);
  CHECK(Mode(k.state() + "/logs") == 0700);
  CHECK(Mode(LogKeeperSocketPath(k.state())) == 0600);

  // Opening it again (a restarted executable) gives the same pipe, blocking
  // again even if the last process made it non-blocking.
  REQUIRE(fcntl(w->get(), F_SETFL, O_NONBLOCK) == 0);
  absl::StatusOr<UniqueFd> again = client->Open("c/a", k.Log("a"), 1 << 20);
  REQUIRE(again.ok());
  CHECK(PipeInode(again->get()) == PipeInode(w->get()));
  CHECK(fcntl(again->get(), F_GETFD) == FD_CLOEXEC);
  // Writers block on a full pipe; they are not told to try again.
  CHECK((fcntl(again->get(), F_GETFL) & O_NONBLOCK) == 0);
  WriteAll(again->get(), "again\n");
  REQUIRE(client->Flush("c/a").ok());
  CHECK(Read(k.Log("a")) == "hello\nagain\n");

  REQUIRE(client->Open("c/b", k.Log("b"), 8192).ok());
  absl::StatusOr<std::vector<LogStreamInfo>> list = client->List();
  REQUIRE(list.ok());
  REQUIRE(list->size() == 2);
  CHECK((*list)[0].id == "c/a");
  CHECK((*list)[0].path == k.Log("a"));
  CHECK((*list)[0].bytes_written == 12);
  CHECK((*list)[1].id == "c/b");
  CHECK((*list)[1].cap_bytes == 8192);

  // The same id on another path, or another id on the same path: refused.
  CHECK(absl::IsAlreadyExists(
      client->Open("c/a", k.Log("other"), 8192).status()));
  CHECK(absl::IsAlreadyExists(client->Open("c/z", k.Log("b"), 8192).status()));
  CHECK(absl::IsAlreadyExists(
      client->Open("c/z", k.Log("b") + ".1", 8192).status()));

  // CLOSE copies what is left in the pipe, then the stream is gone.
  WriteAll(w->get(), "last\n");
  absl::StatusOr<LogStreamCounts> closed = client->Close("c/a");
  REQUIRE(closed.ok());
  CHECK(closed->bytes_written == 17);
  CHECK(Read(k.Log("a")) == "hello\nagain\nlast\n");
  CHECK(absl::IsNotFound(client->Flush("c/a").status()));
  CHECK(absl::IsNotFound(client->Close("c/a").status()));
  signal(SIGPIPE, SIG_IGN);
  CHECK(write(w->get(), "x", 1) < 0);
  CHECK(errno == EPIPE);
  REQUIRE(client->List().ok());
  CHECK(client->List()->size() == 1);
}

TEST_CASE(
    "log keeper: rotation by rename, at the last newline within the cap") {
  KeeperFixture k;
  auto client = k.Connect();
  const uint64_t cap = 4096;
  absl::StatusOr<UniqueFd> w = client->Open("c/a", k.Log("a"), cap);
  REQUIRE(w.ok());
  std::string all;
  for (int i = 0; i < 49; ++i) all += testing::NumberedLine(i, 100);
  WriteAll(w->get(), all.substr(0, 3900));
  REQUIRE(client->Flush("c/a").ok());
  // One write of less than PIPE_BUF reaches the keeper in one piece. 40
  // lines fit in 4096 bytes; the 41st would be split, so it starts the next
  // file.
  WriteAll(w->get(), all.substr(3900));
  REQUIRE(client->Flush("c/a").ok());
  CHECK(Read(k.Log("a") + ".1") == all.substr(0, 4000));
  CHECK(Read(k.Log("a")) == all.substr(4000));
  CHECK(StreamOffsetOf(k.Log("a") + ".1") == 0u);
  CHECK(StreamOffsetOf(k.Log("a")) == 4000u);
  CHECK(Mode(k.Log("a") + ".1") == 0600);

  // A line longer than the room left has no newline to split at: the file
  // is filled to exactly the cap.
  std::string long_line(6000, 'y');
  WriteAll(w->get(), long_line);
  REQUIRE(client->Flush("c/a").ok());
  std::string rotated = Read(k.Log("a") + ".1");
  std::string current = Read(k.Log("a"));
  CHECK(rotated.size() == cap);
  CHECK(rotated == all.substr(4000) + long_line.substr(0, cap - 900));
  CHECK(current == long_line.substr(cap - 900));
  CHECK(StreamOffsetOf(k.Log("a")) == 4000u + cap);
  absl::StatusOr<LogStreamCounts> c = client->Flush("c/a");
  REQUIRE(c.ok());
  CHECK(c->bytes_written == all.size() + long_line.size());
}

TEST_CASE("log keeper: a new keeper continues the files and their positions") {
  KeeperFixture k;
  {
    auto client = k.Connect();
    absl::StatusOr<UniqueFd> w = client->Open("c/a", k.Log("a"), 4096);
    REQUIRE(w.ok());
    WriteAll(w->get(), std::string(5000, 'a') + "\n");
    REQUIRE(client->Flush("c/a").ok());
    REQUIRE(client->Close("c/a").ok());
  }
  CHECK(k.WaitForExit(k.keepers().at(0), std::chrono::seconds(5)) == 0);
  auto client = k.Connect();
  absl::StatusOr<UniqueFd> w = client->Open("c/a", k.Log("a"), 4096);
  REQUIRE(w.ok());
  WriteAll(w->get(), "more\n");
  REQUIRE(client->Flush("c/a").ok());
  CHECK(Read(k.Log("a")) == std::string(904, 'a') + "\nmore\n");
  CHECK(StreamOffsetOf(k.Log("a")) == 4096u);
}

TEST_CASE("log keeper: one per state directory; a stale socket is replaced") {
  KeeperFixture k;
  // What a keeper killed with SIGKILL leaves: a socket nobody listens on.
  {
    UniqueFd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::string path = LogKeeperSocketPath(k.state());
    memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(bind(s.get(), reinterpret_cast<struct sockaddr*>(&addr),
                 sizeof(addr)) == 0);
  }
  auto client = k.Connect();
  REQUIRE(client->Open("c/a", k.Log("a"), 8192).ok());
  // A second keeper for the same directory leaves quietly.
  testing::CommandResult second = testing::Run(
      {testing::Binary("myceld"), std::string(kLogKeeperFlag), k.state()});
  CHECK(second.exit_code == 0);
  CHECK(second.err.empty());
  CHECK(client->List().ok());
  CHECK(client->keeper_pid() == k.keepers().at(0));
  // Bad invocations say what is wrong.
  CHECK(testing::Run({testing::Binary("myceld"), std::string(kLogKeeperFlag)})
            .exit_code == 2);
  testing::CommandResult missing =
      testing::Run({testing::Binary("myceld"), std::string(kLogKeeperFlag),
                    k.state() + "/nope"});
  CHECK(missing.exit_code == 1);
  CHECK(absl::StrContains(missing.err, "cannot start"));
}

TEST_CASE("log keeper: a new controller replaces the one before") {
  KeeperFixture k;
  auto first = k.Connect();
  REQUIRE(first->Open("c/a", k.Log("a"), 8192).ok());
  // A daemon that restarted while its predecessor's connection lives on
  // (a hung process, a descriptor left in a child) is not shut out.
  auto second = k.Connect();
  CHECK(k.keepers().size() == 1);
  CHECK(second->keeper_pid() == first->keeper_pid());
  absl::StatusOr<std::vector<LogStreamInfo>> list = second->List();
  REQUIRE(list.ok());
  CHECK(list->size() == 1);
  // The one before finds its connection gone and connects again.
  CHECK(first->Flush("c/a").ok());
  CHECK(second->Flush("c/a").ok());
  CHECK(k.keepers().size() == 1);
}

TEST_CASE("log keeper: exits when it has no streams and no controller") {
  KeeperFixture k;
  {
    auto client = k.Connect();
    REQUIRE(client->Open("c/a", k.Log("a"), 8192).ok());
    REQUIRE(client->Close("c/a").ok());
  }
  pid_t pid = k.keepers().at(0);
  CHECK(k.WaitForExit(pid, std::chrono::seconds(5)) == 0);
  struct stat st;
  CHECK(stat(LogKeeperSocketPath(k.state()).c_str(), &st) != 0);
  // With a stream left, it stays when its controller goes.
  {
    auto client = k.Connect();
    REQUIRE(client->Open("c/a", k.Log("a"), 8192).ok());
  }
  pid = k.keepers().at(0);
  CHECK(k.WaitForExit(pid, std::chrono::milliseconds(100)) == -1);
}

TEST_CASE("log keeper client: a keeper that died is started again") {
  KeeperFixture k;
  auto client = k.Connect();
  absl::StatusOr<UniqueFd> w = client->Open("c/a", k.Log("a"), 8192);
  REQUIRE(w.ok());
  WriteAll(w->get(), "before\n");
  REQUIRE(client->Flush("c/a").ok());
  pid_t first = client->keeper_pid();
  REQUIRE(kill(first, SIGKILL) == 0);
  CHECK(k.WaitForExit(first, std::chrono::seconds(5)) == 128 + SIGKILL);
  // Its pipes died with it: the writer is told.
  signal(SIGPIPE, SIG_IGN);
  CHECK(write(w->get(), "x", 1) < 0);
  CHECK(errno == EPIPE);
  // The next call starts a new keeper; the stream is not known there
  // until it is opened again, and then it goes on in the same file.
  CHECK(absl::IsNotFound(client->Flush("c/a").status()));
  CHECK(client->keeper_pid() != first);
  absl::StatusOr<UniqueFd> again = client->Open("c/a", k.Log("a"), 8192);
  REQUIRE(again.ok());
  WriteAll(again->get(), "after\n");
  REQUIRE(client->Flush("c/a").ok());
  CHECK(Read(k.Log("a")) == "before\nafter\n");
}

TEST_CASE("log keeper: as many streams as its descriptors allow, no more") {
  KeeperFixture k;
  LogKeeperClient::Options o = k.Options();
  // A hard limit of 100 descriptors: 64 kept for its own, 3 per stream.
  auto spawn = o.spawn;
  o.spawn = [spawn](const std::vector<std::string>& argv) {
    std::vector<std::string> limited = {"/usr/bin/prlimit", "--nofile=100:100"};
    limited.insert(limited.end(), argv.begin(), argv.end());
    return spawn(limited);
  };
  absl::StatusOr<std::unique_ptr<LogKeeperClient>> client =
      LogKeeperClient::Connect(o);
  REQUIRE(client.ok());
  std::vector<UniqueFd> fds;
  for (int i = 0; i < 12; ++i) {
    std::string exe = absl::StrCat("e", i);
    absl::StatusOr<UniqueFd> w = (*client)->Open("c/" + exe, k.Log(exe), 8192);
    REQUIRE_MESSAGE(w.ok(), w.status().ToString());
    fds.push_back(*std::move(w));
  }
  absl::StatusOr<UniqueFd> more =
      (*client)->Open("c/more", k.Log("more"), 8192);
  CHECK(absl::IsResourceExhausted(more.status()));
  // Its controller is still served, and a new one still accepted.
  CHECK((*client)->List()->size() == 12);
  client->reset();
  auto again = k.Connect();
  CHECK(again->List()->size() == 12);
}

// A raw connection, to send what LogKeeperClient never would.
class RawConnection {
 public:
  explicit RawConnection(const std::string& socket_path) {
    fd_.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    REQUIRE(connect(fd_.get(), reinterpret_cast<struct sockaddr*>(&addr),
                    sizeof(addr)) == 0);
    struct timeval tv = {5, 0};
    setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }

  // Sends `data` and returns the reply (code -1 when none came).
  KeeperReply Send(const void* data, size_t n, int pass_fd = -1) {
    struct iovec iov = {const_cast<void*>(data), n};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
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
    KeeperReply reply = {};
    reply.code = -1;
    if (sendmsg(fd_.get(), &msg, MSG_NOSIGNAL) < 0) return reply;
    std::vector<char> in(kKeeperMaxReplyBytes);
    alignas(struct cmsghdr) char rcontrol[CMSG_SPACE(sizeof(int))];
    struct iovec riov = {in.data(), in.size()};
    struct msghdr rmsg = {};
    rmsg.msg_iov = &riov;
    rmsg.msg_iovlen = 1;
    rmsg.msg_control = rcontrol;
    rmsg.msg_controllen = sizeof(rcontrol);
    ssize_t got = recvmsg(fd_.get(), &rmsg, MSG_CMSG_CLOEXEC);
    if (got < static_cast<ssize_t>(sizeof(reply))) return reply;
    memcpy(&reply, in.data(), sizeof(reply));
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&rmsg); c != nullptr;
         c = CMSG_NXTHDR(&rmsg, c)) {
      int f;
      memcpy(&f, CMSG_DATA(c), sizeof(int));
      close(f);
    }
    return reply;
  }
  KeeperReply Send(const KeeperRequest& r) { return Send(&r, sizeof(r)); }

 private:
  UniqueFd fd_;
};

KeeperRequest Request(KeeperOp op) {
  KeeperRequest r;
  memset(&r, 0, sizeof(r));
  r.magic = kKeeperMagic;
  r.op = static_cast<uint32_t>(op);
  r.version = kKeeperProtocolVersion;
  return r;
}

KeeperRequest OpenRequest(const std::string& id, const std::string& path,
                          uint64_t cap = 8192) {
  KeeperRequest r = Request(KeeperOp::kOpen);
  REQUIRE(SetKeeperField(r.id, id));
  REQUIRE(SetKeeperField(r.path, path));
  r.cap_bytes = cap;
  return r;
}

std::string Message(const KeeperReply& r) {
  return std::string(GetKeeperField(r.message).value_or("<no NUL>"));
}

TEST_CASE("log keeper: bad control input gets an error, and it keeps serving") {
  KeeperFixture k;
  {
    // A stream keeps the keeper alive once this controller is gone.
    auto client = k.Connect();
    REQUIRE(client->Open("c/keep", k.Log("keep"), 8192).ok());
  }
  RawConnection c(LogKeeperSocketPath(k.state()));
  auto code = [](const KeeperReply& r) {
    return static_cast<absl::StatusCode>(r.code);
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;

  // Nothing before HELLO; no HELLO without a version we speak.
  KeeperReply r = c.Send(Request(KeeperOp::kList));
  CHECK(code(r) == absl::StatusCode::kFailedPrecondition);
  CHECK(Message(r) == "HELLO must come first");
  KeeperRequest hello = Request(KeeperOp::kHello);
  hello.version = 0;
  CHECK(code(c.Send(hello)) == absl::StatusCode::kFailedPrecondition);
  hello.version = 7;  // newer controllers are answered with our version
  r = c.Send(hello);
  CHECK(r.code == 0);
  CHECK(r.version == kKeeperProtocolVersion);
  CHECK(r.pid == k.keepers().at(0));

  // Malformed: short, long, not ours.
  CHECK(code(c.Send("abc", 3)) == kInvalid);
  std::vector<char> big(sizeof(KeeperRequest) + 100, 'x');
  r = c.Send(big.data(), big.size());
  CHECK(code(r) == kInvalid);
  CHECK(absl::StrContains(Message(r), "larger than"));
  std::vector<char> huge(100 << 10, 'x');  // more than any buffer of ours
  CHECK(code(c.Send(huge.data(), huge.size())) == kInvalid);
  KeeperRequest bad = Request(KeeperOp::kList);
  bad.magic = 0;
  CHECK(code(c.Send(bad)) == kInvalid);
  // Unknown type.
  bad = Request(static_cast<KeeperOp>(99));
  r = c.Send(bad);
  CHECK(code(r) == kInvalid);
  CHECK(absl::StrContains(Message(r), "unknown request type 99"));
  // An id that does not end within its field, or holds spaces.
  bad = Request(KeeperOp::kFlush);
  memset(bad.id, 'a', sizeof(bad.id));
  r = c.Send(bad);
  CHECK(code(r) == kInvalid);
  CHECK(absl::StrContains(Message(r), "id: longer than"));
  CHECK(code(c.Send(OpenRequest("c/a b", k.Log("a")))) == kInvalid);
  CHECK(code(c.Send(OpenRequest("", k.Log("a")))) == kInvalid);
  // A path that does not end within its field.
  bad = OpenRequest("c/a", k.Log("a"));
  memset(bad.path, 'a', sizeof(bad.path));
  CHECK(code(c.Send(bad)) == kInvalid);
  // Paths outside <state-dir>/logs/.
  const std::string logs = k.state() + "/logs";
  for (const std::string& p :
       {std::string("/etc/passwd"), std::string("relative/a.log"),
        logs + "/../escape.log", logs + "/c/../../escape.log", logs + "x/a.log",
        logs, logs + "/", logs + "/c//a.log", logs + "/./a.log",
        logs + "/c/.."}) {
    r = c.Send(OpenRequest("c/a", p));
    CHECK_MESSAGE(code(r) == kInvalid, p);
    CHECK_MESSAGE(absl::StrContains(Message(r), "path:"), p);
  }
  struct stat st;
  CHECK(stat((k.state() + "/escape.log").c_str(), &st) != 0);
  // A cap out of bounds.
  CHECK(code(c.Send(OpenRequest("c/a", k.Log("a"), 10))) == kInvalid);
  CHECK(code(c.Send(OpenRequest("c/a", k.Log("a"), ~uint64_t{0}))) == kInvalid);
  // A file descriptor sent to the keeper is not kept.
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  KeeperRequest list = Request(KeeperOp::kList);
  CHECK(c.Send(&list, sizeof(list), devnull.get()).code == 0);
  // A FIFO where the log should be: refused, not waited on.
  REQUIRE(MakeDirs(LogDir(k.state(), "c"), 0700).ok());
  REQUIRE(mkfifo(k.Log("fifo").c_str(), 0600) == 0);
  CHECK(c.Send(OpenRequest("c/fifo", k.Log("fifo"))).code != 0);

  // Still serving, on the same connection.
  r = c.Send(OpenRequest("c/a", k.Log("a")));
  CHECK_MESSAGE(r.code == 0, Message(r));
  r = c.Send(Request(KeeperOp::kList));
  CHECK(r.code == 0);
  CHECK(r.count == 2);
  // Nothing was created outside the logs.
  testing::CommandResult ls = testing::Run({"/bin/ls", k.state()});
  CHECK(ls.out == "logkeeper.lock\nlogkeeper.sock\nlogs\n");
}

}  // namespace
}  // namespace mycel::cells
