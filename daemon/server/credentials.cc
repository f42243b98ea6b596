#include "daemon/server/credentials.h"

#include <grpcpp/security/server_credentials.h>

#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel {

absl::StatusOr<TlsFiles> ReadTlsFiles(const mycel::v1::DaemonConfig& config) {
  TlsFiles files;
  ASSIGN_OR_RETURN(files.cert, ReadPemFile("tls_cert", config.tls_cert()));
  ASSIGN_OR_RETURN(files.key, ReadPemFile("tls_key", config.tls_key()));
  ASSIGN_OR_RETURN(files.ca, ReadPemFile("tls_ca", config.tls_ca()));
  return files;
}

std::shared_ptr<grpc::ServerCredentials> MtlsServerCredentials(
    const TlsFiles& files) {
  grpc::SslServerCredentialsOptions opts(
      GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = files.ca;
  opts.pem_key_cert_pairs.push_back({files.key, files.cert});
  return grpc::SslServerCredentials(opts);
}

}  // namespace mycel
