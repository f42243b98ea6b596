// LogKeeperClient: the daemon's side of the log keeper
// (cells/log_keeper.h), over cells/log_keeper_protocol.h.
#ifndef MYCEL_CELLS_LOG_KEEPER_CLIENT_H_
#define MYCEL_CELLS_LOG_KEEPER_CLIENT_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cells/log_keeper_protocol.h"
#include "runtime/unique_fd.h"

namespace mycel::cells {

// Starts a process with `argv` (argv[0] an absolute path) and returns its
// pid. The daemon passes one that spawns through its reaper, so that the
// keeper is reaped when it exits.
using KeeperSpawnFn =
    std::function<absl::StatusOr<pid_t>(const std::vector<std::string>& argv)>;

// Spawns with runtime/spawn's Spawn(): stdin and stdout /dev/null, stderr
// the caller's, a session of its own. Nobody reaps the child: for tests,
// and callers that reap every child anyway.
absl::StatusOr<pid_t> SpawnKeeperProcess(const std::vector<std::string>& argv);

// What LIST says about one stream.
struct LogStreamInfo {
  std::string id;
  std::string path;
  uint64_t cap_bytes = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_dropped = 0;
};

// What FLUSH and CLOSE say: the stream's output written to its files and
// dropped (a full disk) since the keeper opened it.
struct LogStreamCounts {
  uint64_t bytes_written = 0;
  uint64_t bytes_dropped = 0;
};

// A connection to the state directory's log keeper, started on demand.
//
// Thread-safe: one request and its reply at a time, under a mutex. Each
// call that finds the connection gone (the keeper died, or exited because
// it had nothing to serve) connects again, starting a keeper if none
// answers, and sends its request once more; every request is idempotent
// (a CLOSE repeated after a lost reply answers NOT_FOUND, which Close then
// reports as done). A call fails with UNAVAILABLE only when no keeper can
// be reached or started.
//
// Streams of a keeper that died are gone with it: their pipes have no
// reader, so executables writing to them get EPIPE (or SIGPIPE), and a new
// keeper does not know them (Flush and Close answer NOT_FOUND). Nothing is
// re-opened behind the caller's back: the daemon opens a stream again when
// it next starts the executable, and the new stream continues the same
// files.
class LogKeeperClient {
 public:
  struct Options {
    // Absolute, or relative to the working directory (made absolute here:
    // the keeper runs in /).
    std::string state_dir;
    // How to start a keeper; default SpawnKeeperProcess.
    KeeperSpawnFn spawn;
    // The binary started as `<binary> --log-keeper <state-dir>`: the
    // daemon itself by default (the keeper is always the version of the
    // daemon that started it, even after an upgrade on disk).
    std::string binary = "/proc/self/exe";
    // How long a keeper that was just started has to answer.
    absl::Duration start_timeout = absl::Seconds(2);
    // How long one reply may take before the call fails (DEADLINE_EXCEEDED)
    // and the connection is dropped.
    absl::Duration call_timeout = absl::Seconds(10);
    // Connect (and start a keeper if none runs) in Connect; when false, on
    // the first call that needs one, so that a daemon that starts no
    // executable starts no keeper.
    bool connect_now = true;
  };

  // Connects to the running keeper, or starts one and connects.
  static absl::StatusOr<std::unique_ptr<LogKeeperClient>> Connect(
      Options options);
  static absl::StatusOr<std::unique_ptr<LogKeeperClient>> Connect(
      const std::string& state_dir);

  LogKeeperClient(const LogKeeperClient&) = delete;
  LogKeeperClient& operator=(const LogKeeperClient&) = delete;
  ~LogKeeperClient() = default;

  // The write end of stream `id`'s pipe, to become an executable's stdout
  // and stderr (a new descriptor each call, O_CLOEXEC, blocking: a writer
  // faster than the disk waits on the full pipe). The stream is
  // created, with its file at `path` (absolute, below <state-dir>/logs/)
  // and `cap_bytes` per file, unless it exists: then its pipe is returned
  // (`cap_bytes` replaces the old cap), so that a restarted executable goes
  // on in the same stream. ALREADY_EXISTS if `id` writes another path, or
  // another stream writes `path`.
  absl::StatusOr<UniqueFd> Open(const std::string& id, const std::string& path,
                                uint64_t cap_bytes);
  // Has the keeper copy what the stream's pipe holds now to its file, and
  // returns once it is there. Call it before reading the log of an
  // executable that has exited, to see all it wrote. NOT_FOUND if the
  // keeper has no such stream.
  absl::StatusOr<LogStreamCounts> Flush(const std::string& id);
  // Flushes, then ends the stream: its pipe closes (a process still
  // writing to it gets EPIPE) and the keeper forgets it. For executables
  // gone for good (their cell was deleted). NOT_FOUND if there is none.
  absl::StatusOr<LogStreamCounts> Close(const std::string& id);
  // Every stream the keeper serves, in id order.
  absl::StatusOr<std::vector<LogStreamInfo>> List();
  // Like List, of a keeper that runs already: none is started, and none
  // running means no streams.
  absl::StatusOr<std::vector<LogStreamInfo>> ListIfRunning();

  // The pid of the keeper last connected to, -1 before any.
  pid_t keeper_pid() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit LogKeeperClient(Options options);

  // One request, its reply, and for OPEN the descriptor that comes with
  // it. Connects (or reconnects once) as the class comment says.
  absl::Status Call(const KeeperRequest& request, KeeperReply* reply,
                    std::vector<KeeperListEntry>* entries, UniqueFd* fd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnsureConnected() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Connects to a listening keeper and says HELLO. UNAVAILABLE when no
  // keeper listens (or one was just exiting).
  absl::Status TryConnect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends and receives on the current connection. `lost` is set when the
  // connection broke (the request may be sent again on a new one).
  absl::Status Exchange(const KeeperRequest& request, KeeperReply* reply,
                        std::vector<KeeperListEntry>* entries, UniqueFd* fd,
                        bool* lost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const std::string socket_path_;
  mutable absl::Mutex mu_;
  UniqueFd sock_ ABSL_GUARDED_BY(mu_);
  pid_t keeper_pid_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_LOG_KEEPER_CLIENT_H_
