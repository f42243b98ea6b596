// Server credentials of the daemon's listeners.
#ifndef MYCEL_DAEMON_SERVER_CREDENTIALS_H_
#define MYCEL_DAEMON_SERVER_CREDENTIALS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mycel/v1/config.pb.h"

namespace mycel {

// The PEM files of a TLS listener.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
};

// Reads --tls-cert, --tls-key and --tls-ca; errors name the setting.
absl::StatusOr<TlsFiles> ReadTlsFiles(const mycel::v1::DaemonConfig& config);

// Mutual TLS: the server presents `files.cert` and asks every client for a
// certificate, which must chain to `files.ca` when one is presented. A
// client without one completes the handshake, so that it can reach the
// methods anyone may call (Join); the authorizer (mesh/identity) refuses
// it everything else, and re-checks every certificate on every call.
std::shared_ptr<grpc::ServerCredentials> MtlsServerCredentials(
    const TlsFiles& files);

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_CREDENTIALS_H_
