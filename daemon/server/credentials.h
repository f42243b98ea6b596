// Server credentials of the daemon's listeners.
#ifndef MYCEL_DAEMON_SERVER_CREDENTIALS_H_
#define MYCEL_DAEMON_SERVER_CREDENTIALS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mycel/v1/config.pb.h"

namespace mycel {

// Mutual TLS from --tls-cert, --tls-key and --tls-ca: the server presents
// the certificate and requires a client certificate that chains to the CA.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MtlsFromFiles(
    const mycel::v1::DaemonConfig& config);

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_CREDENTIALS_H_
