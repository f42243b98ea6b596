// Listener: accepts connections on a listening socket, on a Boost.Asio
// event loop, and hands each one it keeps to a callback (the gRPC server's
// external connection acceptor, in the daemon).
//
// Accepting ourselves, rather than letting gRPC listen, puts three
// decisions here:
//  - who may connect: an admission check runs on every connection before
//    any byte is read from it (the unix socket's peer check);
//  - how many: a connection is refused (closed at once) when it would use
//    one of the last `fd_reserve` descriptors the process may open, so
//    that clients can never take the descriptors the daemon needs for its
//    own work; and, per source (an IPv4 address, or the /64 of an IPv6
//    one: runtime/source_address.h), when that source opened more than
//    `per_source_burst` connections within `per_source_window`, or has
//    `per_source_open` connections open already (gRPC owns a connection
//    once handed over and closes it without telling us, so a connection
//    counts as open while its descriptor still names the same socket:
//    SO_COOKIE, checked only when a source reaches its cap);
//  - running out: when accept4 fails with EMFILE or ENFILE, the listener
//    waits `retry_delay` and tries again, so it accepts again as soon as
//    descriptors are free (gRPC 1.51's own listener stops for good).
//
// Thread-safety: Start and Close run on any thread; everything else runs
// on the io_context's thread. The io_context must outlive the listener.
#ifndef MYCEL_RUNTIME_LISTENER_H_
#define MYCEL_RUNTIME_LISTENER_H_

#include <sys/socket.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/unique_fd.h"

namespace mycel {

// A listening socket, bound and listening, not yet accepting.
struct ListeningSocket {
  UniqueFd fd;
  int port = 0;  // TCP: the bound port (useful with port 0); unix: 0
};

// Binds a unix stream socket at `path` (which must not exist) with `mode`,
// created with that mode from the start (no window in which it is open to
// others). Non-blocking, close-on-exec.
absl::StatusOr<ListeningSocket> ListenUnix(const std::string& path,
                                           mode_t mode);

// Binds a TCP socket at "HOST:PORT" ("[v6]:PORT" for IPv6; port 0 picks
// one). Non-blocking, close-on-exec, SO_REUSEADDR.
absl::StatusOr<ListeningSocket> ListenTcp(const std::string& host_port);

class Listener {
 public:
  struct Options {
    // A name for log lines ("unix", "tcp").
    std::string name;
    // Runs on each accepted connection before it is handed over; an error
    // refuses it (the connection is closed, and the error logged at most
    // once a second). Empty: every connection is admitted.
    std::function<absl::Status(int fd)> admit;
    // Receives each admitted connection.
    std::function<void(UniqueFd fd)> on_connection;
    int fd_reserve = 64;
    // Per source (TCP only; a unix socket's peers share none): an IPv4
    // address, or an IPv6 /64 (SourceBlock).
    int per_source_burst = 512;
    absl::Duration per_source_window = absl::Seconds(10);
    int per_source_open = 256;
    absl::Duration retry_delay = absl::Milliseconds(100);
    // A window in which connections are taken on weaker terms (the daemon:
    // while it serves joins, clients without a certificate). Asked at each
    // accept; a connection accepted while it answers true is kept (a
    // duplicate of its descriptor) and shut down once it answers false,
    // asked every `window_check` while such connections are open, so that
    // none outlives the window. Empty: no window.
    std::function<bool()> window;
    absl::Duration window_check = absl::Seconds(2);
    // A connection accepted before the window opened may finish its
    // handshake inside it (and so be taken on the weaker terms): those
    // accepted this long before the window was seen to open are kept as
    // if taken in it. The server's handshake timeout (10 s) and a check's
    // delay.
    absl::Duration window_lookback = absl::Seconds(12);
  };

  // Counters, for tests and status lines.
  struct Stats {
    uint64_t accepted = 0;
    uint64_t refused_admission = 0;
    uint64_t refused_no_fds = 0;       // within the reserve
    uint64_t refused_rate = 0;         // a source over its burst
    uint64_t refused_open = 0;         // a source with per_source_open open
    uint64_t accept_failures = 0;      // EMFILE/ENFILE and others, retried
    uint64_t closed_after_window = 0;  // shut down when the window closed
    uint64_t refused_banned = 0;  // a banned source while the window is open
  };

  Listener(boost::asio::io_context* io, ListeningSocket socket,
           Options options);
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener();

  // Starts accepting (posts to the io_context).
  void Start();
  // Stops accepting and closes the listening socket. Blocks until the
  // io_context's thread has let go of it, unless called on that thread.
  void Close();

  int port() const { return port_; }
  Stats stats() const;

  // Shuts down (SHUT_RDWR) every connection handed over that is still
  // open, for the server that owns it to close; returns how many. Its
  // clients reconnect. On the io_context's thread.
  size_t ShutdownOpen();
  // The same for the connections taken while the window was open (or
  // kept as if they were); the others stay. For `ban_sources` after, the
  // sources they came from are refused new connections while the window
  // is open (a flood on one of them cannot be told from the others). On
  // the io_context's thread.
  size_t ShutdownWindowConnections(
      absl::Duration ban_sources = absl::ZeroDuration());

 private:
  void Arm();
  void OnReadable();
  bool OverRate(const std::string& source);
  // Whether `source` has per_source_open connections open; forgets the
  // ones that have closed since they were handed over.
  bool AtOpenCap(const std::string& source);
  // Records a connection handed over (its descriptor and socket cookie).
  void RecordOpen(const std::string& source, int fd);
  void LogRefusal(absl::string_view why, const absl::Status& detail);
  // Keeps `dup`, a duplicate of a connection accepted while the window was
  // open.
  void KeepWindowConnection(UniqueFd dup);
  // Asks whether the window is open; when it has opened since last asked,
  // first keeps the connections accepted within window_lookback.
  bool WindowOpen();
  void KeepRecentConnections();
  void ArmWindowCheck();
  // Forgets window connections that have closed, asks the window, and
  // shuts the others down when it has closed; re-arms.
  void CheckWindow();
  void CloseWindowConnections();
  // Whether `source` is banned now; forgets its ban once over.
  bool SourceBanned(const std::string& source);

  boost::asio::io_context* const io_;
  const Options options_;
  const int port_;
  std::shared_ptr<boost::asio::posix::stream_descriptor> socket_;
  boost::asio::steady_timer retry_;
  boost::asio::steady_timer window_timer_;
  bool window_armed_ = false;
  // The window's state when last asked.
  bool window_seen_open_ = false;
  // Duplicates of the connections accepted while the window was open.
  std::vector<UniqueFd> window_conns_;
  // Recent connection times per source (SourceBlock), oldest first.
  absl::flat_hash_map<std::string, std::vector<absl::Time>> recent_;
  // Connections handed over per source, as (descriptor, cookie).
  struct Handed {
    int fd;
    uint64_t cookie;
    absl::Time accepted;
  };
  absl::flat_hash_map<std::string, std::vector<Handed>> open_;
  // Sources refused while the window is open, until when.
  absl::flat_hash_map<std::string, absl::Time> banned_sources_;
  size_t recorded_since_sweep_ = 0;
  absl::Time last_refusal_log_ = absl::InfinitePast();
  std::atomic<uint64_t> accepted_{0}, refused_admission_{0}, refused_no_fds_{0},
      refused_rate_{0}, refused_open_{0}, accept_failures_{0},
      closed_after_window_{0}, refused_banned_{0};
  bool closed_ = false;
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_LISTENER_H_
