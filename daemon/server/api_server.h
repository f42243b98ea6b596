// ApiServer: the gRPC endpoints of one myceld. Each endpoint is a
// listening socket (the local unix socket, the TCP port), its own
// grpc::Server with the services and policy chosen for that listener, and
// a Listener (runtime/listener.h) that accepts connections on the daemon's
// event loop, checks them, and hands them to that server.
#ifndef MYCEL_DAEMON_SERVER_API_SERVER_H_
#define MYCEL_DAEMON_SERVER_API_SERVER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/listener.h"

namespace mycel {

// Thread-safe after Start(). Services and the io_context must outlive the
// server.
class ApiServer {
 public:
  struct Endpoint {
    // "unix" or "tcp", for logs.
    std::string name;
    ListeningSocket socket;
    // How the connection is secured (insecure for the unix socket, whose
    // file mode and peer check guard it; mutual TLS for TCP).
    std::shared_ptr<grpc::ServerCredentials> credentials;
    std::vector<grpc::Service*> services;
    // The connection check of the Listener (see Listener::Options::admit).
    std::function<absl::Status(int fd)> admit;
    // New connections one source may open per 10 s (the
    // Listener's per_source_burst; the daemon passes its
    // connections_per_source setting).
    int per_source_burst = Listener::Options{}.per_source_burst;
    // Connections one source may hold open (per_source_open; the
    // daemon's open_connections_per_source).
    int per_source_open = Listener::Options{}.per_source_open;
    // The Listener's window (see Listener::Options::window); the daemon's
    // TCP endpoint: while it serves joins.
    std::function<bool()> window;
    // Server interceptors (identity::FloodGuard's).
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
  };

  // How long a connection may take to complete its handshake (TLS, and
  // HTTP/2's preface) before the server drops it: an unauthenticated
  // connection holds a descriptor and memory only this long.
  static constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);

  // Builds a grpc::Server per endpoint (with the health service on each)
  // and starts accepting on `io`.
  static absl::StatusOr<std::unique_ptr<ApiServer>> Start(
      boost::asio::io_context* io, std::vector<Endpoint> endpoints);

  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;
  ~ApiServer();

  // The bound port of the endpoint named `name` (0 when there is none, or
  // it is not TCP).
  int port(absl::string_view name) const;

  // Counters of the endpoint named `name`'s listener.
  Listener::Stats listener_stats(absl::string_view name) const;

  // What the health service of the endpoint named `endpoint` answers for
  // `service` (grpc.health.v1, Check and Watch). No-op once shut down.
  void SetServingStatus(absl::string_view endpoint, const std::string& service,
                        bool serving);

  // Shuts down every connection the endpoint named `name` holds
  // (Listener::ShutdownOpen); returns how many. On the io_context's thread.
  size_t ShutdownConnections(absl::string_view name);
  // Only those the endpoint took while it served joins to clients without
  // a certificate, and their sources are refused while it serves joins,
  // for `ban_sources` (Listener::ShutdownWindowConnections).
  size_t ShutdownWindowConnections(
      absl::string_view name,
      absl::Duration ban_sources = absl::ZeroDuration());

  // Marks every endpoint NOT_SERVING, stops accepting, and waits up to
  // `grace` for calls in flight. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Running {
    std::string name;
    int port = 0;
    std::unique_ptr<grpc::Server> server;
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor;
    std::unique_ptr<Listener> listener;
  };
  ApiServer() = default;

  std::vector<Running> endpoints_;
  bool stopped_ = false;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_API_SERVER_H_
