// Server credentials of the daemon's listeners.
#ifndef MYCEL_DAEMON_SERVER_CREDENTIALS_H_
#define MYCEL_DAEMON_SERVER_CREDENTIALS_H_

#include <grpcpp/security/server_credentials.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mycel/v1/config.pb.h"

namespace mycel {

// The PEM files of a TLS listener: their paths, and their contents as read
// when the listener started (checked then, so that a missing or unreadable
// file is an error naming the setting rather than a failing handshake).
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  std::string cert;
  std::string key;
  std::string ca;
};

// Reads --tls-cert, --tls-key and --tls-ca; errors name the setting.
absl::StatusOr<TlsFiles> ReadTlsFiles(const mycel::v1::DaemonConfig& config);

// Mutual TLS: the server presents the certificate of `files` and asks every
// client for a certificate, which must chain to the CA when one is
// presented. Whether a client without one completes the handshake is
// `admits_certless`'s answer, asked at each such handshake (empty: always
// yes). Those that do can reach only the methods anyone may call
// (Mesh.GetCa, Mesh.Admit): the authorizer (mesh/identity) refuses them
// everything else, and re-checks every certificate on every call. The
// daemon admits them only while it serves joins (an authority holding a
// join token that can still admit someone): gRPC 1.51's HTTP/2 server has
// no defence against a client that opens and resets streams without end
// (docs/security.md), so a node takes streams only from holders of a mesh
// certificate unless it must serve joins.
//
// `refuses`, when set, is asked at every handshake with the client
// certificate's SPIFFE ID ("" for none): a client it names is refused
// (identity::FloodGuard's bans).
//
// The files are re-read every `refresh`, so that a renewed certificate
// (written atomically in place) serves new connections without a restart.
// The first call turns TLS session tickets off for the process
// (mesh/identity/tls_defaults.h).
std::shared_ptr<grpc::ServerCredentials> MtlsServerCredentials(
    const TlsFiles& files, absl::Duration refresh,
    std::function<bool()> admits_certless = nullptr,
    std::function<bool(absl::string_view identity)> refuses = nullptr);

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_CREDENTIALS_H_
