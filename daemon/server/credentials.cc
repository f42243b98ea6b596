#include "daemon/server/credentials.h"

#include <grpcpp/security/server_credentials.h>

#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MtlsFromFiles(
    const mycel::v1::DaemonConfig& config) {
  ASSIGN_OR_RETURN(std::string cert,
                   ReadPemFile("tls_cert", config.tls_cert()));
  ASSIGN_OR_RETURN(std::string key, ReadPemFile("tls_key", config.tls_key()));
  ASSIGN_OR_RETURN(std::string ca, ReadPemFile("tls_ca", config.tls_ca()));
  grpc::SslServerCredentialsOptions opts(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = ca;
  opts.pem_key_cert_pairs.push_back({key, cert});
  return grpc::SslServerCredentials(opts);
}

}  // namespace mycel
