// ApiServer: the gRPC server of one myceld, on a unix socket and optionally
// on TCP with mutual TLS. It also serves grpc.health.v1 and reflection.
#ifndef MYCEL_DAEMON_SERVER_API_SERVER_H_
#define MYCEL_DAEMON_SERVER_API_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mycel/v1/config.pb.h"

namespace mycel {

// Thread-safe after Start(). Services must outlive the server.
class ApiServer {
 public:
  // Binds the unix socket (mode 0660) and, when config.listen() is set and
  // the TLS files are configured, the TCP port. Without TLS files the TCP
  // port stays closed and a warning says why. The socket path must not
  // exist (the caller removes a stale one under its lock).
  static absl::StatusOr<std::unique_ptr<ApiServer>> Start(
      const mycel::v1::DaemonConfig& config,
      const std::vector<grpc::Service*>& services);

  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;
  ~ApiServer();

  // The TCP port actually bound (useful with port 0), or 0 when TCP is off.
  int tcp_port() const { return tcp_port_; }

  // Marks the node NOT_SERVING, then stops accepting calls and waits up to
  // `grace` for those in flight. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  ApiServer() = default;

  std::unique_ptr<grpc::Server> server_;
  std::string socket_path_;
  int tcp_port_ = 0;
  bool stopped_ = false;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_API_SERVER_H_
