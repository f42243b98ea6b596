#include "daemon/server/credentials.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>

#include "absl/base/call_once.h"
#include "mesh/identity/tls_defaults.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel {
namespace {

// Once, before this process's first TLS server: OpenSSL then applies it
// to that server's SSL_CTX and every later one. Not at start: a node that
// serves no TLS never loads OpenSSL's configuration (about 2 MiB of RSS).
void ApplyTlsDefaults() {
  static absl::once_flag once;
  absl::call_once(once, [] {
    if (absl::Status s = identity::DisableSessionTickets(); !s.ok()) {
      log::Info("TLS session tickets stay on", {{"reason", s}});
    }
  });
}

}  // namespace

absl::StatusOr<TlsFiles> ReadTlsFiles(const mycel::v1::DaemonConfig& config) {
  TlsFiles files;
  files.cert_file = config.tls_cert();
  files.key_file = config.tls_key();
  files.ca_file = config.tls_ca();
  ASSIGN_OR_RETURN(files.cert, ReadPemFile("tls_cert", config.tls_cert()));
  ASSIGN_OR_RETURN(files.key, ReadPemFile("tls_key", config.tls_key()));
  ASSIGN_OR_RETURN(files.ca, ReadPemFile("tls_ca", config.tls_ca()));
  return files;
}

std::shared_ptr<grpc::ServerCredentials> MtlsServerCredentials(
    const TlsFiles& files, absl::Duration refresh) {
  namespace gx = grpc::experimental;
  ApplyTlsDefaults();
  auto seconds = static_cast<unsigned int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(refresh)));
  gx::TlsServerCredentialsOptions tls(
      std::make_shared<gx::FileWatcherCertificateProvider>(
          files.key_file, files.cert_file, files.ca_file, seconds));
  tls.watch_root_certs();
  tls.watch_identity_key_cert_pairs();
  tls.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  return gx::TlsServerCredentials(tls);
}

}  // namespace mycel
