#include "cells/log_keeper_client.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cells/log_keeper.h"
#include "runtime/fs.h"
#include "runtime/process.h"
#include "runtime/spawn/spawn.h"
#include "runtime/status.h"
#include "runtime/unix_socket.h"

namespace mycel::cells {

absl::StatusOr<pid_t> SpawnKeeperProcess(const std::vector<std::string>& argv) {
  SpawnRequest req;
  req.argv = argv;
  req.stderr_fd = STDERR_FILENO;
  absl::StatusOr<Child> child = Spawn(req);
  if (!child.ok()) return child.status();
  return child->pid();
}

namespace {

absl::Status KeeperError(int32_t code, absl::string_view message) {
  auto c = static_cast<absl::StatusCode>(code);
  if (code <= 0 ||
      code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    c = absl::StatusCode::kUnknown;
  }
  return absl::Status(c, absl::StrCat("log keeper: ", message));
}

KeeperRequest NewRequest(KeeperOp op) {
  KeeperRequest r;
  memset(&r, 0, sizeof(r));
  r.magic = kKeeperMagic;
  r.op = static_cast<uint32_t>(op);
  return r;
}

absl::StatusOr<KeeperRequest> StreamRequest(KeeperOp op,
                                            const std::string& id) {
  KeeperRequest r = NewRequest(op);
  if (!SetKeeperField(r.id, id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log stream id \"", id, "\": longer than ",
                     kKeeperIdBytes - 1, " bytes, or holds a NUL"));
  }
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LogKeeperClient>> LogKeeperClient::Connect(
    const std::string& state_dir) {
  Options options;
  options.state_dir = state_dir;
  return Connect(std::move(options));
}

absl::StatusOr<std::unique_ptr<LogKeeperClient>> LogKeeperClient::Connect(
    Options options) {
  std::string& dir = options.state_dir;
  if (dir.empty()) return absl::InvalidArgumentError("state_dir: empty");
  if (dir[0] != '/') {
    ASSIGN_OR_RETURN(std::string cwd, CurrentDir());
    dir = absl::StrCat(cwd, "/", dir);
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  // A keeper started for a missing directory would only fail to start,
  // and the wait for it say less than this.
  if (absl::StatusOr<FileInfo> st = Stat(dir); !st.ok()) {
    return Annotate(st.status(), "state dir");
  }
  if (!options.spawn) options.spawn = SpawnKeeperProcess;
  std::unique_ptr<LogKeeperClient> client(
      new LogKeeperClient(std::move(options)));
  if (client->options_.connect_now) {
    absl::MutexLock lock(&client->mu_);
    RETURN_IF_ERROR(client->EnsureConnected());
  }
  return client;
}

absl::StatusOr<std::vector<LogStreamInfo>> LogKeeperClient::ListIfRunning() {
  {
    absl::MutexLock lock(&mu_);
    if (!sock_) {
      absl::Status s = TryConnect();
      if (absl::IsUnavailable(s)) return std::vector<LogStreamInfo>{};
      RETURN_IF_ERROR(s);
    }
  }
  return List();
}

LogKeeperClient::LogKeeperClient(Options options)
    : options_(std::move(options)),
      socket_path_(LogKeeperSocketPath(options_.state_dir)) {}

pid_t LogKeeperClient::keeper_pid() const {
  absl::MutexLock lock(&mu_);
  return keeper_pid_;
}

absl::Status LogKeeperClient::EnsureConnected() {
  if (sock_) return absl::OkStatus();
  absl::Status s = TryConnect();
  if (!absl::IsUnavailable(s)) return s;
  std::vector<std::string> argv = {options_.binary, kLogKeeperFlag,
                                   options_.state_dir};
  absl::StatusOr<pid_t> pid = options_.spawn(argv);
  if (!pid.ok()) return Annotate(pid.status(), "start the log keeper");
  // It answers once it has bound its socket: a few milliseconds. A keeper
  // that found another one already serving exits, and the other answers.
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  for (;;) {
    s = TryConnect();
    if (!absl::IsUnavailable(s)) return s;
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "the log keeper (pid ", *pid, ") did not answer on ", socket_path_,
          " within ", absl::FormatDuration(options_.start_timeout), ": ",
          s.message()));
    }
    // A refused connect costs microseconds; polling often answers sooner.
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status LogKeeperClient::TryConnect() {
  absl::StatusOr<UniqueFd> fd = ConnectUnixSeqpacket(socket_path_);
  // NOT_FOUND: no socket (ENOENT); UNAVAILABLE: no one listens on it
  // (ECONNREFUSED).
  if (absl::IsNotFound(fd.status()) || absl::IsUnavailable(fd.status())) {
    return absl::UnavailableError(
        absl::StrCat("no log keeper listens on ", socket_path_));
  }
  if (!fd.ok()) return Annotate(fd.status(), "log keeper");
  // Best effort: without them a hung keeper blocks a call for longer.
  SetSocketTimeouts(fd->get(), options_.call_timeout).IgnoreError();
  sock_ = *std::move(fd);
  KeeperRequest hello = NewRequest(KeeperOp::kHello);
  hello.version = kKeeperProtocolVersion;
  KeeperReply reply;
  bool lost = false;
  absl::Status s = Exchange(hello, &reply, nullptr, nullptr, &lost);
  if (lost) {
    // A keeper on its way out (it had nothing left to serve).
    sock_.reset();
    return absl::UnavailableError("the log keeper hung up on HELLO");
  }
  if (s.ok() && reply.version != kKeeperProtocolVersion) {
    s = absl::FailedPreconditionError(
        absl::StrCat("log keeper: speaks protocol version ", reply.version,
                     ", this daemon ", kKeeperProtocolVersion));
  }
  if (!s.ok()) {
    sock_.reset();
    return s;
  }
  keeper_pid_ = reply.pid;
  return absl::OkStatus();
}

absl::Status LogKeeperClient::Exchange(const KeeperRequest& request,
                                       KeeperReply* reply,
                                       std::vector<KeeperListEntry>* entries,
                                       UniqueFd* fd, bool* lost) {
  *lost = false;
  // A keeper may have answered and hung up before the send (one that
  // cannot serve us says why, then closes): read what is there regardless.
  const bool send_failed =
      !Send(sock_.get(),
            absl::string_view(reinterpret_cast<const char*>(&request),
                              sizeof(request)),
            0)
           .ok();
  std::vector<char> in(kKeeperMaxReplyBytes);
  // Whatever descriptors came are ours to close, whatever else happens.
  absl::StatusOr<ReceivedMessage> got =
      ReceiveWithFds(sock_.get(), in.data(), in.size(),
                     send_failed ? MSG_DONTWAIT : 0, /*max_fds=*/4);
  // UNAVAILABLE is EAGAIN: the receive timeout passed.
  if (!got.ok() && absl::IsUnavailable(got.status()) && !send_failed) {
    sock_.reset();
    return absl::DeadlineExceededError(
        absl::StrCat("log keeper: no reply within ",
                     absl::FormatDuration(options_.call_timeout)));
  }
  if (!got.ok() || got->bytes == 0) {
    *lost = true;
    return absl::UnavailableError("log keeper: connection lost");
  }
  auto malformed = [this](absl::string_view why) {
    mu_.AssertHeld();
    sock_.reset();
    return absl::InternalError(absl::StrCat("log keeper: bad reply: ", why));
  };
  const size_t n = got->bytes;
  std::vector<UniqueFd>& fds = got->fds;
  if (got->truncated || got->control_truncated) {
    return malformed("truncated");
  }
  if (n < sizeof(KeeperReply)) return malformed("short");
  memcpy(reply, in.data(), sizeof(KeeperReply));
  if (reply->magic != kKeeperMagic) return malformed("magic");
  if (reply->code != 0) {
    if (send_failed) sock_.reset();
    std::optional<absl::string_view> m = GetKeeperField(reply->message);
    return KeeperError(reply->code, m.value_or("(no message)"));
  }
  if (send_failed) {
    *lost = true;
    return absl::UnavailableError("log keeper: connection lost");
  }
  if (reply->op != request.op) return malformed("answers another request");
  const size_t extra = n - sizeof(KeeperReply);
  if (reply->count > kKeeperListEntries ||
      extra != reply->count * sizeof(KeeperListEntry) ||
      (reply->count > 0 && entries == nullptr)) {
    return malformed("entries");
  }
  if (entries != nullptr) {
    entries->resize(reply->count);
    memcpy(entries->data(), in.data() + sizeof(KeeperReply), extra);
  }
  if (fd != nullptr) {
    if (fds.size() != 1) return malformed("no descriptor");
    *fd = std::move(fds[0]);
  }
  return absl::OkStatus();
}

absl::Status LogKeeperClient::Call(const KeeperRequest& request,
                                   KeeperReply* reply,
                                   std::vector<KeeperListEntry>* entries,
                                   UniqueFd* fd) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    RETURN_IF_ERROR(EnsureConnected());
    bool lost = false;
    absl::Status s = Exchange(request, reply, entries, fd, &lost);
    if (!lost) {
      // The first CLOSE may have been done before its reply was lost.
      if (attempt > 0 && absl::IsNotFound(s) &&
          request.op == static_cast<uint32_t>(KeeperOp::kClose)) {
        memset(reply, 0, sizeof(*reply));
        return absl::OkStatus();
      }
      return s;
    }
    sock_.reset();
  }
  return absl::UnavailableError("log keeper: connection lost twice");
}

absl::StatusOr<UniqueFd> LogKeeperClient::Open(const std::string& id,
                                               const std::string& path,
                                               uint64_t cap_bytes) {
  ASSIGN_OR_RETURN(KeeperRequest req, StreamRequest(KeeperOp::kOpen, id));
  if (!SetKeeperField(req.path, path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log path ", path, ": longer than ", kKeeperPathBytes - 1,
                     " bytes, or holds a NUL"));
  }
  req.cap_bytes = cap_bytes;
  absl::MutexLock lock(&mu_);
  KeeperReply reply;
  UniqueFd fd;
  RETURN_IF_ERROR(Call(req, &reply, nullptr, &fd));
  return fd;
}

absl::StatusOr<LogStreamCounts> LogKeeperClient::Flush(const std::string& id) {
  ASSIGN_OR_RETURN(KeeperRequest req, StreamRequest(KeeperOp::kFlush, id));
  absl::MutexLock lock(&mu_);
  KeeperReply reply;
  RETURN_IF_ERROR(Call(req, &reply, nullptr, nullptr));
  return LogStreamCounts{reply.bytes_written, reply.bytes_dropped};
}

absl::StatusOr<LogStreamCounts> LogKeeperClient::Close(const std::string& id) {
  ASSIGN_OR_RETURN(KeeperRequest req, StreamRequest(KeeperOp::kClose, id));
  absl::MutexLock lock(&mu_);
  KeeperReply reply;
  RETURN_IF_ERROR(Call(req, &reply, nullptr, nullptr));
  return LogStreamCounts{reply.bytes_written, reply.bytes_dropped};
}

absl::StatusOr<std::vector<LogStreamInfo>> LogKeeperClient::List() {
  std::vector<LogStreamInfo> out;
  std::string cursor;
  absl::MutexLock lock(&mu_);
  for (;;) {
    ASSIGN_OR_RETURN(KeeperRequest req, StreamRequest(KeeperOp::kList, cursor));
    KeeperReply reply;
    std::vector<KeeperListEntry> entries;
    RETURN_IF_ERROR(Call(req, &reply, &entries, nullptr));
    for (const KeeperListEntry& e : entries) {
      LogStreamInfo& info = out.emplace_back();
      info.id = std::string(GetKeeperField(e.id).value_or(""));
      info.path = std::string(GetKeeperField(e.path).value_or(""));
      info.cap_bytes = e.cap_bytes;
      info.bytes_written = e.bytes_written;
      info.bytes_dropped = e.bytes_dropped;
    }
    if (reply.more == 0 || entries.empty()) break;
    cursor = out.back().id;
  }
  return out;
}

}  // namespace mycel::cells
