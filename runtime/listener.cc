#include "runtime/listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <future>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/log.h"
#include "runtime/source_address.h"
#include "runtime/status.h"

namespace mycel {
namespace {

// Connections taken per wake-up before yielding to the loop's other work.
constexpr int kAcceptsPerWake = 64;

absl::StatusOr<ListeningSocket> Listening(UniqueFd fd, int backlog) {
  if (listen(fd.get(), backlog) != 0) return PosixError("listen", errno);
  ListeningSocket out;
  out.fd = std::move(fd);
  return out;
}

}  // namespace

absl::StatusOr<ListeningSocket> ListenUnix(const std::string& path,
                                           mode_t mode) {
  sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  // The socket is bound inside a fresh private directory, given its mode,
  // and renamed into place, so that it never exists at `path` with the
  // mode bind(2) gives it (0777 less the umask).
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  std::string tmpl = dir + "/.mycel-socket-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return PosixError(absl::StrCat("mkdtemp in ", dir), errno);
  }
  const std::string tmp = tmpl + "/s";
  struct TmpDir {
    std::string dir, file;
    ~TmpDir() {
      unlink(file.c_str());
      rmdir(dir.c_str());
    }
  } cleanup{tmpl, tmp};
  if (tmp.size() >= sizeof(addr.sun_path) ||
      path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket: ", path, " is too long for a unix socket"));
  }
  memcpy(addr.sun_path, tmp.c_str(), tmp.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return PosixError("socket(AF_UNIX)", errno);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return PosixError(absl::StrCat("bind ", tmp), errno);
  }
  if (chmod(tmp.c_str(), mode) != 0) {
    return PosixError(absl::StrCat("chmod ", tmp), errno);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return PosixError(absl::StrCat("rename ", tmp, " to ", path), errno);
  }
  return Listening(std::move(fd), SOMAXCONN);
}

absl::StatusOr<ListeningSocket> ListenTcp(const std::string& host_port) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: want IPV4:PORT, [IPV6]:PORT or localhost:PORT, got \"",
        host_port, "\""));
  };
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad();
  std::string host = host_port.substr(0, colon);
  int port = -1;
  if (!absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return bad();
  }
  sockaddr_storage ss;
  memset(&ss, 0, sizeof(ss));
  socklen_t len = 0;
  if (host == "localhost") host = "127.0.0.1";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(),
                  &a6->sin6_addr) != 1) {
      return bad();
    }
    len = sizeof(*a6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1) return bad();
    len = sizeof(*a4);
  }
  UniqueFd fd(
      socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return PosixError("socket(AF_INET)", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return PosixError(absl::StrCat("listen: bind ", host_port), errno);
  }
  ASSIGN_OR_RETURN(ListeningSocket out, Listening(std::move(fd), SOMAXCONN));
  sockaddr_storage bound;
  socklen_t bound_len = sizeof(bound);
  if (getsockname(out.fd.get(), reinterpret_cast<sockaddr*>(&bound),
                  &bound_len) != 0) {
    return PosixError("getsockname", errno);
  }
  out.port = ntohs(bound.ss_family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return out;
}

Listener::Listener(boost::asio::io_context* io, ListeningSocket socket,
                   Options options)
    : io_(io),
      options_(std::move(options)),
      port_(socket.port),
      socket_(std::make_shared<boost::asio::posix::stream_descriptor>(
          *io, socket.fd.release())),
      retry_(*io),
      window_timer_(*io) {}

Listener::~Listener() { Close(); }

void Listener::Start() {
  boost::asio::post(*io_, [this] {
    Arm();
    // The window is asked every window_check, so that connections accepted
    // just before it opens are kept too (WindowOpen).
    if (options_.window) ArmWindowCheck();
  });
}

void Listener::Close() {
  auto close = [this] {
    if (closed_) return;
    closed_ = true;
    retry_.cancel();
    window_timer_.cancel();
    window_conns_.clear();
    boost::system::error_code ignored;
    socket_->cancel(ignored);
    socket_->close(ignored);
  };
  if (io_->get_executor().running_in_this_thread() || io_->stopped()) {
    close();
    return;
  }
  std::promise<void> done;
  boost::asio::post(*io_, [&] {
    close();
    done.set_value();
  });
  // The loop may stop before it runs the closure; then nothing uses the
  // socket any more and it can be closed here.
  std::future<void> f = done.get_future();
  if (f.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    close();
  }
}

Listener::Stats Listener::stats() const {
  Stats s;
  s.accepted = accepted_.load();
  s.refused_admission = refused_admission_.load();
  s.refused_no_fds = refused_no_fds_.load();
  s.refused_rate = refused_rate_.load();
  s.refused_open = refused_open_.load();
  s.accept_failures = accept_failures_.load();
  s.closed_after_window = closed_after_window_.load();
  s.refused_banned = refused_banned_.load();
  return s;
}

void Listener::Arm() {
  if (closed_) return;
  socket_->async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      [this, sock = socket_](const boost::system::error_code& ec) {
        if (ec || closed_) return;
        OnReadable();
      });
}

void Listener::LogRefusal(absl::string_view why, const absl::Status& detail) {
  const absl::Time now = absl::Now();
  if (now - last_refusal_log_ < absl::Seconds(1)) return;
  last_refusal_log_ = now;
  log::Warn("connection refused",
            {{"listener", options_.name}, {"reason", why}, {"error", detail}});
}

namespace {

// The kernel's identifier of the socket `fd` names (unique for the
// boot), or 0 when `fd` is closed or not a socket.
uint64_t SocketCookie(int fd) {
  uint64_t cookie = 0;
  socklen_t len = sizeof(cookie);
  if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0) return 0;
  return cookie;
}

// Sweeps the open connections of every source after this many were
// recorded, so that sources that never reach their cap are forgotten.
constexpr size_t kSweepEvery = 4096;

}  // namespace

void Listener::KeepWindowConnection(UniqueFd dup) {
  window_conns_.push_back(std::move(dup));
  ArmWindowCheck();
}

void Listener::ArmWindowCheck() {
  if (window_armed_) return;
  window_armed_ = true;
  window_timer_.expires_after(absl::ToChronoNanoseconds(options_.window_check));
  window_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || closed_) return;
    window_armed_ = false;
    CheckWindow();
  });
}

void Listener::CheckWindow() {
  // A socket its owner has shut down (gRPC shuts a connection down before
  // it closes it) reports POLLHUP on the duplicate: nothing left to do.
  window_conns_.erase(
      std::remove_if(window_conns_.begin(), window_conns_.end(),
                     [](const UniqueFd& fd) {
                       pollfd p{fd.get(), 0, 0};
                       return poll(&p, 1, 0) == 1 &&
                              (p.revents & (POLLHUP | POLLERR | POLLNVAL));
                     }),
      window_conns_.end());
  if (!WindowOpen() && !window_conns_.empty()) CloseWindowConnections();
  ArmWindowCheck();
}

bool Listener::WindowOpen() {
  const bool open = options_.window();
  if (open && !window_seen_open_) KeepRecentConnections();
  window_seen_open_ = open;
  return open;
}

void Listener::KeepRecentConnections() {
  const absl::Time since = absl::Now() - options_.window_lookback;
  for (const auto& [source, handed] : open_) {
    for (const Handed& h : handed) {
      if (h.accepted < since) continue;
      // gRPC may have closed the descriptor, and another taken its number:
      // the duplicate must name the socket handed over.
      UniqueFd dup(fcntl(h.fd, F_DUPFD_CLOEXEC, 0));
      if (!dup.valid() || SocketCookie(dup.get()) != h.cookie) continue;
      KeepWindowConnection(std::move(dup));
    }
  }
}

size_t Listener::ShutdownWindowConnections(absl::Duration ban_sources) {
  const absl::Time now = absl::Now();
  const absl::Time until = now + ban_sources;
  // Bans that are over are forgotten here too, not only when their source
  // comes back: sources that never do would stay for good.
  absl::erase_if(banned_sources_,
                 [now](const auto& ban) { return ban.second <= now; });
  size_t n = 0;
  for (UniqueFd& fd : window_conns_) {
    sockaddr_storage peer;
    socklen_t len = sizeof(peer);
    if (ban_sources > absl::ZeroDuration() &&
        getpeername(fd.get(), reinterpret_cast<sockaddr*>(&peer), &len) == 0) {
      if (std::string source = SourceBlock(peer); !source.empty()) {
        absl::Time& t = banned_sources_[source];
        t = std::max(t, until);
      }
    }
    if (shutdown(fd.get(), SHUT_RDWR) == 0) ++n;
  }
  window_conns_.clear();
  return n;
}

bool Listener::SourceBanned(const std::string& source) {
  auto it = banned_sources_.find(source);
  if (it == banned_sources_.end()) return false;
  if (absl::Now() < it->second) return true;
  banned_sources_.erase(it);
  return false;
}

void Listener::CloseWindowConnections() {
  const size_t n = window_conns_.size();
  // Counted and logged first, so that both are there by the time a client
  // sees its connection end.
  closed_after_window_.fetch_add(n);
  log::Info(
      "closed the connections taken while the window was open",
      {{"listener", options_.name}, {"connections", static_cast<int64_t>(n)}});
  for (UniqueFd& fd : window_conns_) shutdown(fd.get(), SHUT_RDWR);
  window_conns_.clear();
}

bool Listener::OverRate(const std::string& source) {
  const absl::Time now = absl::Now();
  if (recent_.size() > 4096) {
    // Forget sources that have been quiet for a whole window.
    for (auto it = recent_.begin(); it != recent_.end();) {
      auto next = std::next(it);
      if (it->second.empty() ||
          now - it->second.back() > options_.per_source_window) {
        recent_.erase(it);
      }
      it = next;
    }
  }
  std::vector<absl::Time>& times = recent_[source];
  size_t old = 0;
  while (old < times.size() && now - times[old] > options_.per_source_window) {
    ++old;
  }
  times.erase(times.begin(), times.begin() + static_cast<ptrdiff_t>(old));
  if (times.size() >= static_cast<size_t>(options_.per_source_burst)) {
    return true;
  }
  times.push_back(now);
  return false;
}

bool Listener::AtOpenCap(const std::string& source) {
  auto forget_closed = [](std::vector<Handed>& v) {
    v.erase(std::remove_if(
                v.begin(), v.end(),
                [](const Handed& h) { return SocketCookie(h.fd) != h.cookie; }),
            v.end());
  };
  if (recorded_since_sweep_ >= kSweepEvery) {
    recorded_since_sweep_ = 0;
    for (auto it = open_.begin(); it != open_.end();) {
      auto next = std::next(it);
      forget_closed(it->second);
      if (it->second.empty()) open_.erase(it);
      it = next;
    }
  }
  auto it = open_.find(source);
  if (it == open_.end()) return false;
  const auto cap = static_cast<size_t>(options_.per_source_open);
  if (it->second.size() < cap) return false;
  forget_closed(it->second);
  return it->second.size() >= cap;
}

size_t Listener::ShutdownOpen() {
  size_t n = 0;
  for (const auto& [source, handed] : open_) {
    for (const Handed& h : handed) {
      // Only while the descriptor still names the socket handed over.
      if (SocketCookie(h.fd) == h.cookie && shutdown(h.fd, SHUT_RDWR) == 0) {
        ++n;
      }
    }
  }
  open_.clear();
  return n;
}

void Listener::RecordOpen(const std::string& source, int fd) {
  const uint64_t cookie = SocketCookie(fd);
  if (cookie == 0) return;
  open_[source].push_back(Handed{fd, cookie, absl::Now()});
  ++recorded_since_sweep_;
}

void Listener::OnReadable() {
  for (int i = 0; i < kAcceptsPerWake; ++i) {
    sockaddr_storage peer;
    socklen_t len = sizeof(peer);
    int raw =
        accept4(socket_->native_handle(), reinterpret_cast<sockaddr*>(&peer),
                &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (raw < 0) {
      const int error = errno;
      if (error == EAGAIN || error == EWOULDBLOCK) break;
      if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
      // Out of descriptors or memory (or anything unexpected): the
      // connection stays in the backlog; try again shortly, and keep
      // trying for as long as it takes.
      accept_failures_.fetch_add(1);
      LogRefusal("accept failed; retrying", PosixError("accept4", error));
      retry_.expires_after(absl::ToChronoNanoseconds(options_.retry_delay));
      retry_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) Arm();
      });
      return;
    }
    UniqueFd fd(raw);
    rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
        limit.rlim_cur != RLIM_INFINITY &&
        static_cast<rlim_t>(fd.get()) + options_.fd_reserve >= limit.rlim_cur) {
      // The kernel hands out the lowest free descriptor, so one this high
      // means nearly all of them are in use.
      refused_no_fds_.fetch_add(1);
      LogRefusal("too few file descriptors left",
                 absl::ResourceExhaustedError(absl::StrCat(
                     "descriptor ", fd.get(), " of ", limit.rlim_cur,
                     ", reserve ", options_.fd_reserve)));
      continue;
    }
    const std::string source = SourceBlock(peer);
    if (!source.empty() && !banned_sources_.empty() && options_.window &&
        SourceBanned(source) && WindowOpen()) {
      refused_banned_.fetch_add(1);
      LogRefusal(
          "a source whose connections flooded the node while it served "
          "joins",
          absl::ResourceExhaustedError(absl::StrCat(
              source, ": refused while joins are served, for a while")));
      continue;
    }
    if (!source.empty() && OverRate(source)) {
      refused_rate_.fetch_add(1);
      LogRefusal(
          "too many connections from one source",
          absl::ResourceExhaustedError(absl::StrCat(
              source, ": more than ", options_.per_source_burst, " within ",
              absl::FormatDuration(options_.per_source_window))));
      continue;
    }
    if (!source.empty() && AtOpenCap(source)) {
      refused_open_.fetch_add(1);
      LogRefusal("too many connections open from one source",
                 absl::ResourceExhaustedError(absl::StrCat(
                     source, ": ", options_.per_source_open, " open already")));
      continue;
    }
    if (options_.admit) {
      absl::Status admitted = options_.admit(fd.get());
      if (!admitted.ok()) {
        refused_admission_.fetch_add(1);
        LogRefusal("not admitted", admitted);
        continue;
      }
    }
    if (peer.ss_family == AF_INET || peer.ss_family == AF_INET6) {
      // gRPC sets TCP_NODELAY on the sockets it accepts itself, not on
      // those handed to it: without it, Nagle's algorithm holds each small
      // handshake record until the peer's delayed ACK (40 ms), which made
      // every new TLS connection take about 50 ms.
      int one = 1;
      if (setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) !=
          0) {
        LogRefusal("cannot set TCP_NODELAY; serving anyway",
                   PosixError("setsockopt", errno));
      }
    }
    UniqueFd window_dup;
    if (options_.window && WindowOpen()) {
      // Kept to shut the connection down when the window closes; one that
      // could not be kept is not taken.
      window_dup = UniqueFd(fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
      if (!window_dup.valid()) {
        refused_no_fds_.fetch_add(1);
        LogRefusal("cannot keep a connection taken during the window",
                   PosixError("fcntl(F_DUPFD_CLOEXEC)", errno));
        continue;
      }
    }
    accepted_.fetch_add(1);
    if (!source.empty()) RecordOpen(source, fd.get());
    if (window_dup.valid()) KeepWindowConnection(std::move(window_dup));
    options_.on_connection(std::move(fd));
  }
  Arm();
}

}  // namespace mycel
