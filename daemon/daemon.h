// Daemon: one running myceld. Owns the locks, the store, the API server and
// the event loop, and tears them down in order.
#ifndef MYCEL_DAEMON_DAEMON_H_
#define MYCEL_DAEMON_DAEMON_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/server/api_server.h"
#include "daemon/server/node_service.h"
#include "daemon/store/store.h"
#include "mycel/v1/config.pb.h"
#include "runtime/pid_lock.h"

namespace mycel {

// Not thread-safe: Start() and Run() are called from the main thread. The
// Shutdown RPC reaches the event loop through io_.post().
class Daemon {
 public:
  explicit Daemon(mycel::v1::DaemonConfig config);
  ~Daemon();

  // Prepares the state directory and socket, opens the store and starts
  // serving. Every failure names the path or setting at fault.
  absl::Status Start();

  // Runs the event loop until a signal or the Shutdown RPC stops it, then
  // shuts down in order. Returns the process exit code.
  int Run();

 private:
  absl::Status PrepareStateDir();
  absl::Status PrepareSocket();
  void RequestStop(absl::string_view why);
  void Stop();

  mycel::v1::DaemonConfig config_;
  absl::Time started_;
  std::optional<PidLock> state_lock_;
  std::optional<PidLock> socket_lock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<NodeService> node_service_;
  std::unique_ptr<ApiServer> server_;
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  bool stopping_ = false;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_DAEMON_H_
