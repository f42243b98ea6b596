#include "cells/log_keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cells/log_file.h"
#include "cells/log_keeper_protocol.h"
#include "runtime/epoll.h"
#include "runtime/fd.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/peer_process.h"
#include "runtime/pid_lock.h"
#include "runtime/process.h"
#include "runtime/resource_limits.h"
#include "runtime/signals.h"
#include "runtime/status.h"
#include "runtime/syscalls.h"
#include "runtime/unique_fd.h"
#include "runtime/unix_socket.h"

namespace mycel::cells {

std::string LogKeeperSocketPath(const std::string& state_dir) {
  return state_dir + "/logkeeper.sock";
}

std::string LogKeeperLockPath(const std::string& state_dir) {
  return state_dir + "/logkeeper.lock";
}

namespace {

// How much one readiness event of a stream may copy before the loop turns
// to the others (level-triggered epoll comes back for the rest).
constexpr size_t kFairShareBytes = 1 << 20;
// Control messages handled per readiness event of the controller.
constexpr int kRequestsPerEvent = 16;

// One executable's output: its pipe and its current file.
struct Stream {
  std::string id;
  std::string path;
  uint64_t cap = 0;
  UniqueFd read_end;   // non-blocking; the keeper's
  UniqueFd write_end;  // blocking; dups of it go to executables
  UniqueFd file;       // O_APPEND; invalid while it cannot be opened
  uint64_t file_size = 0;
  // Stream positions: of the current file's first byte, and just after
  // the last byte written to any of the stream's files.
  uint64_t file_offset = 0;
  uint64_t end_offset = 0;
  uint64_t written = 0;  // output bytes written (notices not counted)
  uint64_t dropped = 0;  // output bytes dropped, in all
  // Dropped since the last notice, and why (0: nothing is being dropped).
  uint64_t dropped_unreported = 0;
  int drop_errno = 0;
  bool at_line_start = true;  // the last byte written is '\n', or none
};

// The reply's code and message from `status`, the message cut to fit.
void SetError(KeeperReply* reply, const absl::Status& status) {
  reply->code = static_cast<int32_t>(status.code());
  absl::string_view m = status.message();
  m = m.substr(0, std::min(m.size(), kKeeperMessageBytes - 1));
  m = m.substr(0, m.find('\0'));
  SetKeeperField(reply->message, m);
}

// A stream id goes into logs and file-free bookkeeping only, but it is
// still a peer's bytes: printable ASCII without spaces.
absl::Status ValidateId(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("id: must not be empty");
  for (char c : id) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          "id: may contain only printable ASCII characters without spaces");
    }
  }
  return absl::OkStatus();
}

class Keeper {
 public:
  explicit Keeper(std::string state_dir)
      : state_dir_(std::move(state_dir)),
        logs_dir_(state_dir_ + "/logs"),
        socket_path_(LogKeeperSocketPath(state_dir_)),
        buf_(std::make_unique<char[]>(kKeeperBufferBytes)) {}

  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;

  // Takes the state directory's keeper lock and binds the socket. Returns
  // false when another keeper holds the lock.
  absl::StatusOr<bool> Start();
  // Serves until there is nothing left to serve; returns the exit code.
  int Run();

 private:
  void Accept();
  void DropController(absl::string_view why);
  void ReadController();
  bool SendReply(int fd, const KeeperReply& reply,
                 const std::vector<KeeperListEntry>& entries, int pass_fd);
  absl::Status Serve(const char* data, size_t size, bool truncated,
                     KeeperReply* reply, UniqueFd* pass,
                     std::vector<KeeperListEntry>* entries);
  absl::Status Open(absl::string_view id, absl::string_view path, uint64_t cap,
                    KeeperReply* reply, UniqueFd* pass);
  absl::Status ValidatePath(absl::string_view path) const;
  void Forget(Stream* s);

  // The data path. Each returns 0 or the errno that stopped it.
  size_t Drain(Stream* s, size_t budget);
  void Append(Stream* s, const char* p, size_t n);
  size_t WriteAll(Stream* s, const char* p, size_t n, int* err);
  int MakeParentDirs(const std::string& path) const;
  int OpenFile(Stream* s);
  int Rotate(Stream* s);
  int Recover(Stream* s);
  void Drop(Stream* s, size_t n, absl::string_view what, int err);
  size_t PipeBytes(const Stream& s) const;

  const std::string state_dir_;
  const std::string logs_dir_;
  const std::string socket_path_;
  std::unique_ptr<char[]> buf_;  // kKeeperBufferBytes, for every stream
  std::optional<PidLock> lock_;
  UniqueFd listener_;
  Epoll epoll_;
  UniqueFd controller_;
  bool hello_done_ = false;
  bool had_controller_ = false;
  size_t max_streams_ = kMaxKeeperStreams;
  std::map<std::string, std::unique_ptr<Stream>> streams_;  // by id
  std::unordered_map<int, Stream*> by_read_fd_;
};

absl::StatusOr<bool> Keeper::Start() {
  if (absl::StatusOr<FileInfo> st = Stat(state_dir_); !st.ok()) {
    return Annotate(st.status(), "state dir");
  }
  absl::StatusOr<PidLock> lock =
      PidLock::Acquire(LogKeeperLockPath(state_dir_));
  if (absl::IsFailedPrecondition(lock.status())) return false;
  if (!lock.ok()) return lock.status();
  lock_.emplace(*std::move(lock));
  if (absl::Status s = MakeDir(logs_dir_, 0700);
      !s.ok() && !absl::IsAlreadyExists(s)) {
    return s;
  }
  // We hold the lock, so a socket at the path is a dead keeper's.
  if (absl::Status s = RemoveFile(socket_path_);
      !s.ok() && !absl::IsNotFound(s)) {
    return Annotate(s, "stale socket");
  }
  ASSIGN_OR_RETURN(listener_, ListenUnixSeqpacket(socket_path_, 0600, 8));
  // Each stream holds three descriptors; a few more are the keeper's own.
  // Refusing an OPEN is better than failing to accept the controller.
  // When the limit cannot be read, the cap stays as it is.
  if (absl::StatusOr<OpenFileLimit> nofile = GetOpenFileLimit();
      nofile.ok() && nofile->soft != RLIM_INFINITY) {
    max_streams_ = std::min<size_t>(
        max_streams_, nofile->soft > 64 ? (nofile->soft - 64) / 3 : 0);
  }
  ASSIGN_OR_RETURN(epoll_, Epoll::Create());
  RETURN_IF_ERROR(epoll_.Add(listener_.get(), EPOLLIN));
  return true;
}

int Keeper::Run() {
  log::Info("log keeper started", {{"state_dir", state_dir_},
                                   {"pid", static_cast<int>(CurrentPid())}});
  const auto started = std::chrono::steady_clock::now();
  struct epoll_event events[64];
  int code = 0;
  for (;;) {
    int timeout_ms = -1;
    if (streams_.empty() && !controller_) {
      // Nothing to serve. Right after the start, wait a while for the
      // controller that started us.
      auto left = absl::ToChronoMilliseconds(kKeeperStartGrace) -
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - started);
      if (had_controller_ || left.count() <= 0) break;
      timeout_ms = static_cast<int>(left.count()) + 1;
    }
    int n = epoll_.Wait(events, 64, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      log::Error("log keeper stops",
                 {{"error", PosixError("epoll_wait", errno)}});
      code = 1;
      break;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == listener_.get()) {
        Accept();
      } else if (controller_ && fd == controller_.get()) {
        ReadController();
      } else if (auto it = by_read_fd_.find(fd); it != by_read_fd_.end()) {
        Drain(it->second, kFairShareBytes);
      }
    }
  }
  // Whoever connects from now on must find no socket and start a keeper.
  RemoveFile(socket_path_).IgnoreError();
  log::Info("log keeper exits", {{"state_dir", state_dir_}});
  return code;
}

void Keeper::Accept() {
  for (;;) {
    absl::StatusOr<UniqueFd> accepted = AcceptConnection(listener_.get());
    if (!accepted.ok()) {
      // UNAVAILABLE: EAGAIN, no connection waits.
      if (!absl::IsUnavailable(accepted.status())) {
        log::Warn("log keeper cannot accept", {{"error", accepted.status()}});
      }
      return;
    }
    UniqueFd c = *std::move(accepted);
    // The socket is 0600, so only our uid can connect; checked again here
    // because the path's directory is not ours to trust blindly.
    absl::StatusOr<PeerProcess> peer = PeerCredentials(c.get());
    if (!peer.ok() || peer->uid != EffectiveUid()) {
      log::Warn("log keeper refused a connection from another user",
                {{"uid", static_cast<int64_t>(peer.ok() ? peer->uid : 0)}});
      continue;
    }
    // One daemon runs per state directory (it holds a lock there), so a
    // new controller means the old one is gone, or hung, or its socket
    // lives on in some process it left behind: the newest wins.
    if (controller_) DropController("replaced by a new controller");
    if (absl::Status s = epoll_.Add(c.get(), EPOLLIN | EPOLLRDHUP); !s.ok()) {
      log::Warn("log keeper cannot watch its controller", {{"error", s}});
      continue;
    }
    controller_ = std::move(c);
    hello_done_ = false;
    had_controller_ = true;
    log::Debug("log keeper controller connected",
               {{"pid", static_cast<int>(peer->pid)}});
  }
}

void Keeper::DropController(absl::string_view why) {
  epoll_.Remove(controller_.get());
  controller_.reset();
  hello_done_ = false;
  log::Debug("log keeper controller gone", {{"why", why}});
}

void Keeper::ReadController() {
  // One byte more than the largest request, so that a larger one shows as
  // MSG_TRUNC; aligned for reading it as a KeeperRequest.
  alignas(KeeperRequest) char in[sizeof(KeeperRequest) + 1];
  for (int i = 0; i < kRequestsPerEvent && controller_; ++i) {
    // max_fds 0, no control buffer: descriptors a peer sends us are closed
    // by the kernel, never installed here.
    absl::StatusOr<ReceivedMessage> got =
        ReceiveWithFds(controller_.get(), in, sizeof(in), MSG_DONTWAIT,
                       /*max_fds=*/0);
    if (!got.ok()) {
      if (absl::IsUnavailable(got.status())) return;  // EAGAIN: none waits
      DropController(got.status().ToString());
      return;
    }
    const size_t n = got->bytes;
    if (n == 0) {
      DropController("end of file");
      return;
    }
    KeeperReply reply = {};
    reply.magic = kKeeperMagic;
    UniqueFd pass;
    std::vector<KeeperListEntry> entries;
    absl::Status s = Serve(in, n, got->truncated, &reply, &pass, &entries);
    if (!s.ok()) {
      SetError(&reply, s);
      pass.reset();
      entries.clear();
      log::Debug("log keeper refused a request", {{"error", s}});
    }
    reply.count = static_cast<uint32_t>(entries.size());
    if (!SendReply(controller_.get(), reply, entries, pass.get())) {
      DropController("does not read its replies");
      return;
    }
  }
}

bool Keeper::SendReply(int fd, const KeeperReply& reply,
                       const std::vector<KeeperListEntry>& entries,
                       int pass_fd) {
  const absl::string_view parts[2] = {
      absl::string_view(reinterpret_cast<const char*>(&reply), sizeof(reply)),
      absl::string_view(reinterpret_cast<const char*>(entries.data()),
                        entries.size() * sizeof(KeeperListEntry))};
  // Never block on a controller that does not read: the streams wait.
  return SendWithFd(fd, parts, pass_fd, MSG_DONTWAIT).ok();
}

absl::Status Keeper::Serve(const char* data, size_t size, bool truncated,
                           KeeperReply* reply, UniqueFd* pass,
                           std::vector<KeeperListEntry>* entries) {
  if (truncated || size > sizeof(KeeperRequest)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request larger than ", sizeof(KeeperRequest), " bytes"));
  }
  if (size != sizeof(KeeperRequest)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request of ", size, " bytes; requests are ", sizeof(KeeperRequest)));
  }
  KeeperRequest req;
  memcpy(&req, data, sizeof(req));
  if (req.magic != kKeeperMagic) {
    return absl::InvalidArgumentError("not a log keeper request (bad magic)");
  }
  reply->op = req.op;
  const auto op = static_cast<KeeperOp>(req.op);
  if (op == KeeperOp::kHello) {
    if (req.version < 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "protocol version ", req.version,
          " is not spoken; this keeper speaks 1 to ", kKeeperProtocolVersion));
    }
    reply->version = std::min(req.version, kKeeperProtocolVersion);
    reply->pid = static_cast<int32_t>(CurrentPid());
    hello_done_ = true;
    return absl::OkStatus();
  }
  if (!hello_done_) {
    return absl::FailedPreconditionError("HELLO must come first");
  }
  std::optional<absl::string_view> id = GetKeeperField(req.id);
  if (!id.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id: longer than ", kKeeperIdBytes - 1, " bytes (no NUL)"));
  }
  if (op == KeeperOp::kList) {
    for (auto it = streams_.upper_bound(std::string(*id)); it != streams_.end();
         ++it) {
      if (entries->size() == kKeeperListEntries) {
        reply->more = 1;
        break;
      }
      const Stream& s = *it->second;
      KeeperListEntry& e = entries->emplace_back();
      memset(&e, 0, sizeof(e));
      e.cap_bytes = s.cap;
      e.bytes_written = s.written;
      e.bytes_dropped = s.dropped;
      SetKeeperField(e.id, s.id);
      SetKeeperField(e.path, s.path);
    }
    return absl::OkStatus();
  }
  if (op != KeeperOp::kOpen && op != KeeperOp::kFlush &&
      op != KeeperOp::kClose) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown request type ", req.op));
  }
  RETURN_IF_ERROR(ValidateId(*id));
  if (op == KeeperOp::kOpen) {
    std::optional<absl::string_view> path = GetKeeperField(req.path);
    if (!path.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "path: longer than ", kKeeperPathBytes - 1, " bytes (no NUL)"));
    }
    return Open(*id, *path, req.cap_bytes, reply, pass);
  }
  auto it = streams_.find(std::string(*id));
  if (it == streams_.end()) {
    return absl::NotFoundError(absl::StrCat("no log stream ", *id));
  }
  Stream* s = it->second.get();
  // What the pipe holds now, not what a busy writer adds meanwhile, so that
  // the reply comes however fast it writes.
  Drain(s, PipeBytes(*s));
  reply->bytes_written = s->written;
  reply->bytes_dropped = s->dropped;
  if (op == KeeperOp::kClose) Forget(s);
  return absl::OkStatus();
}

absl::Status Keeper::ValidatePath(absl::string_view path) const {
  const std::string prefix = logs_dir_ + "/";
  if (path.substr(0, prefix.size()) != prefix || path.size() == prefix.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("path: must be a file below ", prefix));
  }
  for (absl::string_view part :
       absl::StrSplit(path.substr(prefix.size()), '/')) {
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(
          "path: must not contain empty, \".\" or \"..\" components");
    }
  }
  return absl::OkStatus();
}

absl::Status Keeper::Open(absl::string_view id, absl::string_view path,
                          uint64_t cap, KeeperReply* reply, UniqueFd* pass) {
  RETURN_IF_ERROR(ValidatePath(path));
  if (cap < kMinLogCapBytes || cap > kMaxLogCapBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cap_bytes: must be between ", kMinLogCapBytes, " and ",
                     kMaxLogCapBytes));
  }
  Stream* s = nullptr;
  if (auto it = streams_.find(std::string(id)); it != streams_.end()) {
    s = it->second.get();
    if (s->path != path) {
      return absl::AlreadyExistsError(absl::StrCat(
          "log stream ", id, " already writes ", s->path, ", not ", path));
    }
    s->cap = cap;  // a changed cap applies from the next write
  } else {
    if (streams_.size() >= max_streams_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the log keeper serves ", max_streams_, " streams, its most"));
    }
    // Two streams on one file, or on a file and its rotated name, would
    // each rotate the other's output away.
    const std::string rotated = RotatedLogPath(std::string(path));
    for (const auto& [other_id, other] : streams_) {
      if (other->path == path || other->path == rotated ||
          RotatedLogPath(other->path) == path) {
        return absl::AlreadyExistsError(
            absl::StrCat("path: ", path, " is written by log stream ", other_id,
                         " already"));
      }
    }
    auto fresh = std::make_unique<Stream>();
    fresh->id = std::string(id);
    fresh->path = std::string(path);
    fresh->cap = cap;
    ASSIGN_OR_RETURN(Pipe pipe, MakePipe());
    fresh->read_end = std::move(pipe.read_end);
    fresh->write_end = std::move(pipe.write_end);
    // Only the read end is non-blocking (the two ends are separate open
    // files): a writer that fills the pipe waits for the keeper.
    RETURN_IF_ERROR(SetNonBlocking(fresh->read_end.get(), true));
    if (absl::Status s = SetPipeSize(fresh->read_end.get(),
                                     static_cast<int>(kKeeperPipeBytes));
        !s.ok()) {
      log::Warn("log keeper keeps the default pipe size",
                {{"stream", fresh->id}, {"error", s}});
    }
    // A stream that a new keeper takes over continues the positions of the
    // files it finds.
    absl::StatusOr<UniqueFd> previous =
        mycel::OpenFile(rotated, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (previous.ok()) {
      absl::StatusOr<FileInfo> st = StatFd(previous->get(), rotated);
      if (st.ok()) {
        if (std::optional<uint64_t> o = ReadStreamOffset(previous->get())) {
          fresh->end_offset = *o + static_cast<uint64_t>(st->size);
        }
      }
    }
    // The file is made when the first output arrives (Append), so that
    // an executable that prints nothing costs no file, and a start pays a
    // pipe rather than a file creation. Something other than a regular
    // file at the path is refused now, as opening it would be later.
    absl::StatusOr<FileInfo> existing = LinkStat(fresh->path);
    if (existing.ok() && !existing->is_regular()) {
      return PosixError(absl::StrCat("open ", path), EINVAL);
    }
    RETURN_IF_ERROR(epoll_.Add(fresh->read_end.get(), EPOLLIN));
    s = fresh.get();
    by_read_fd_[s->read_end.get()] = s;
    streams_.emplace(s->id, std::move(fresh));
    log::Debug("log stream opened",
               {{"stream", s->id}, {"path", s->path}, {"cap", s->cap}});
  }
  // Every dup shares one open file: a process that made its stdout
  // non-blocking (Node.js does) made it so for the next one too, which
  // would then see EAGAIN on a full pipe instead of waiting.
  // Best effort, as the write end passes all the same.
  SetNonBlocking(s->write_end.get(), false).IgnoreError();
  absl::StatusOr<UniqueFd> dup = DupCloexec(s->write_end.get());
  if (!dup.ok()) return Annotate(dup.status(), "dup pipe");
  *pass = *std::move(dup);
  reply->bytes_written = s->written;
  reply->bytes_dropped = s->dropped;
  return absl::OkStatus();
}

void Keeper::Forget(Stream* s) {
  epoll_.Remove(s->read_end.get());
  by_read_fd_.erase(s->read_end.get());
  log::Debug(
      "log stream closed",
      {{"stream", s->id}, {"written", s->written}, {"dropped", s->dropped}});
  std::string id = s->id;
  streams_.erase(id);  // closes the pipe and the file
}

size_t Keeper::PipeBytes(const Stream& s) const {
  return BytesReadable(s.read_end.get());
}

size_t Keeper::Drain(Stream* s, size_t budget) {
  size_t total = 0;
  while (total < budget) {
    size_t want = std::min(kKeeperBufferBytes, budget - total);
    ssize_t n = sys::Read(s->read_end.get(), buf_.get(), want);
    if (n > 0) {
      Append(s, buf_.get(), static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // EAGAIN: empty. End of file cannot happen: we hold a write end.
    break;
  }
  return total;
}

void Keeper::Append(Stream* s, const char* p, size_t n) {
  if (!s->file || s->dropped_unreported > 0) {
    if (int err = Recover(s); err != 0) {
      Drop(s, n, "write", err);
      return;
    }
  }
  while (n > 0) {
    if (s->file_size >= s->cap) {
      if (int err = Rotate(s); err != 0) {
        Drop(s, n, "rotate", err);
        return;
      }
      continue;
    }
    const uint64_t room = s->cap - s->file_size;
    size_t take = n;
    bool rotate_after = false;
    if (n >= room) {
      // Fill the file up to the cap, or up to the last newline that fits,
      // so that a rotation splits no line that it need not split (as far
      // as this read shows: earlier reads are written already).
      take = static_cast<size_t>(room);
      rotate_after = true;
      if (const void* nl = memrchr(p, '\n', take); nl != nullptr) {
        take = static_cast<size_t>(static_cast<const char*>(nl) - p) + 1;
      }
    }
    int err = 0;
    size_t done = WriteAll(s, p, take, &err);
    s->written += done;
    if (done < take) {
      Drop(s, n - done, "write", err);
      return;
    }
    p += take;
    n -= take;
    if (rotate_after) {
      if (int err = Rotate(s); err != 0) {
        Drop(s, n, "rotate", err);
        return;
      }
    }
  }
}

size_t Keeper::WriteAll(Stream* s, const char* p, size_t n, int* err) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = sys::Write(s->file.get(), p + done, n - done);
    if (w > 0) {
      done += static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      *err = w < 0 ? errno : EIO;
      break;
    }
  }
  s->file_size += done;
  s->end_offset += done;
  if (done > 0) s->at_line_start = p[done - 1] == '\n';
  return done;
}

int Keeper::MakeParentDirs(const std::string& path) const {
  // Every directory between logs/ and the file, 0700: they hold workloads'
  // output. ValidatePath made sure that path is below logs/.
  for (size_t slash = path.find('/', logs_dir_.size() + 1);
       slash != std::string::npos; slash = path.find('/', slash + 1)) {
    std::string dir = path.substr(0, slash);
    if (sys::Mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return errno;
  }
  return 0;
}

int Keeper::OpenFile(Stream* s) {
  if (int err = MakeParentDirs(s->path); err != 0) return err;
  // O_NONBLOCK: a FIFO planted at the path must fail the open (ENXIO), not
  // hang the keeper; regular files ignore it.
  UniqueFd fd(sys::Open(s->path.c_str(),
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
                            O_NOCTTY | O_NONBLOCK,
                        0600));
  if (!fd) return errno;
  struct stat st;
  if (sys::Fstat(fd.get(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EINVAL;  // a FIFO or device: not ours
  if ((st.st_mode & 07777) != 0600) sys::Fchmod(fd.get(), 0600);
  s->file_size = static_cast<uint64_t>(st.st_size);
  if (std::optional<uint64_t> o = ReadStreamOffset(fd.get())) {
    s->file_offset = *o;
  } else {
    // A new file, or one written before files recorded their position:
    // it starts where the stream is.
    s->file_offset = s->end_offset;
    absl::Status w = WriteStreamOffset(fd.get(), s->file_offset);
    if (!w.ok() && !absl::IsUnimplemented(w)) {
      log::Warn("log file without its stream position",
                {{"path", s->path}, {"error", w}});
    }
  }
  s->end_offset = s->file_offset + s->file_size;
  s->at_line_start = true;
  char last;
  if (st.st_size > 0 && sys::Pread(fd.get(), &last, 1, st.st_size - 1) == 1) {
    s->at_line_start = last == '\n';
  }
  s->file = std::move(fd);
  return 0;
}

int Keeper::Rotate(Stream* s) {
  const std::string rotated = RotatedLogPath(s->path);
  // ENOENT: the file was removed under us; a new one starts all the same.
  if (sys::Rename(s->path.c_str(), rotated.c_str()) != 0 && errno != ENOENT) {
    return errno;
  }
  // Never written again once renamed: readers rely on it.
  s->file.reset();
  s->file_size = 0;
  return OpenFile(s);
}

int Keeper::Recover(Stream* s) {
  if (!s->file) {
    if (int err = OpenFile(s); err != 0) return err;
  }
  if (s->dropped_unreported == 0) return 0;
  auto notice = [s] {
    return absl::StrCat(
        s->at_line_start ? "" : "\n", "[mycel: ", s->dropped_unreported,
        " bytes of output dropped: ", strerror(s->drop_errno), "]\n");
  };
  std::string line = notice();
  if (s->file_size + line.size() > s->cap) {
    if (int err = Rotate(s); err != 0) return err;
    line = notice();
  }
  const uint64_t size_before = s->file_size;
  const bool at_line_start_before = s->at_line_start;
  int err = 0;
  size_t done = WriteAll(s, line.data(), line.size(), &err);
  if (done < line.size()) {
    // Half a notice would be read as output; take it back.
    if (done > 0 &&
        Truncate(s->file.get(), static_cast<off_t>(size_before), s->path)
            .ok()) {
      s->file_size = size_before;
      s->end_offset -= done;
      s->at_line_start = at_line_start_before;
    }
    return err;
  }
  log::Info("log output resumed",
            {{"stream", s->id}, {"dropped", s->dropped_unreported}});
  s->dropped_unreported = 0;
  s->drop_errno = 0;
  return 0;
}

void Keeper::Drop(Stream* s, size_t n, absl::string_view what, int err) {
  s->dropped += n;
  s->dropped_unreported += n;
  if (s->drop_errno == 0) {
    // Once per episode, not once per chunk.
    log::Error("log output dropped",
               {{"stream", s->id},
                {"error", PosixError(absl::StrCat(what, " ", s->path), err)}});
  }
  s->drop_errno = err;
}

// The keeper must outlive anything but SIGKILL and its own faults: the
// pipes of running workloads die with it.
void IgnoreEndingSignals() {
  std::vector<int> faults = FaultSignals();
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGCONT ||
        sig == SIGURG || sig == SIGWINCH ||
        std::find(faults.begin(), faults.end(), sig) != faults.end()) {
      continue;
    }
    IgnoreSignal(sig);  // glibc's own real-time signals refuse: fine
  }
  GuardFaultSignals();
  UnblockAllSignals();
}

}  // namespace

int LogKeeperMain(const std::string& state_dir) {
  SetThreadName(kLogKeeperName);
  // Its memory holds workloads' output on its way to disk.
  SetDumpable(false).IgnoreError();
  IgnoreEndingSignals();
  SetUmask(077);
  StdinFromDevNull().IgnoreError();
  // No-op when spawned (already a session leader).
  StartSession().IgnoreError();
  if (absl::Status s = ChangeDir("/"); !s.ok()) {
    log::Warn("log keeper cannot chdir to /", {{"error", s}});
  }
  // Each stream holds three descriptors.
  RaiseOpenFileLimit().IgnoreError();
  std::string dir = state_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty() || dir[0] != '/') {
    log::Error("log keeper needs an absolute state directory",
               {{"state_dir", state_dir}});
    return 1;
  }
  Keeper keeper(dir);
  absl::StatusOr<bool> started = keeper.Start();
  if (!started.ok()) {
    log::Error("log keeper cannot start",
               {{"state_dir", dir}, {"error", started.status()}});
    return 1;
  }
  if (!*started) return 0;  // another keeper serves this state dir
  return keeper.Run();
}

}  // namespace mycel::cells
