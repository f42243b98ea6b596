#include "daemon/server/credentials.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <atomic>

#include "absl/base/call_once.h"
#include "absl/strings/match.h"
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

namespace gx = grpc::experimental;

// Refuses, at the handshake, a client that presents no certificate when
// the node admits none (see MtlsServerCredentials). A certificate that is
// presented was chained to the CA by gRPC before this runs.
class CertlessGate final : public gx::ExternalCertificateVerifier {
 public:
  CertlessGate(std::function<bool()> admits,
               std::function<bool(absl::string_view)> refuses)
      : admits_(std::move(admits)), refuses_(std::move(refuses)) {}

  bool Verify(gx::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)>,
              grpc::Status* sync_status) override {
    if (refuses_) {
      std::string identity;
      if (!request->peer_cert().empty()) {
        for (const grpc::string_ref& uri : request->uri_names()) {
          if (absl::StartsWith(absl::string_view(uri.data(), uri.size()),
                               "spiffe://")) {
            identity.assign(uri.data(), uri.size());
            break;
          }
        }
      }
      if (refuses_(identity)) {
        *sync_status = grpc::Status(
            grpc::StatusCode::UNAUTHENTICATED,
            "this certificate opened too many calls that never reached this "
            "node; it is refused for a while");
        return true;
      }
    }
    if (request->peer_cert().empty() && admits_ && !admits_()) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      LogRefusals();
      *sync_status = grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          "no client certificate: this node serves only holders of a mesh "
          "certificate (only an authority with a join token open serves "
          "joins)");
      return true;
    }
    *sync_status = grpc::Status::OK;
    return true;
  }
  void Cancel(gx::TlsCustomVerificationCheckRequest*) override {}

 private:
  // At most a line a minute, with the count since the last one.
  void LogRefusals() {
    const int64_t now = absl::ToUnixSeconds(absl::Now());
    int64_t last = last_log_.load(std::memory_order_relaxed);
    if (now - last < 60 || !last_log_.compare_exchange_strong(
                               last, now, std::memory_order_relaxed)) {
      return;
    }
    log::Info("closed connections without a client certificate",
              {{"count", static_cast<int64_t>(refused_.exchange(0))},
               {"reason",
                "only an authority with a join token open serves clients "
                "without one"}});
  }

  const std::function<bool()> admits_;
  const std::function<bool(absl::string_view)> refuses_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<int64_t> last_log_{0};
};

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
    const TlsFiles& files, absl::Duration refresh,
    std::function<bool()> admits_certless,
    std::function<bool(absl::string_view identity)> refuses) {
  ApplyTlsDefaults();
  auto seconds = static_cast<unsigned int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(refresh)));
  gx::TlsServerCredentialsOptions tls(
      std::make_shared<gx::FileWatcherCertificateProvider>(
          files.key_file, files.cert_file, files.ca_file, seconds));
  tls.watch_root_certs();
  tls.watch_identity_key_cert_pairs();
  tls.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  if (admits_certless || refuses) {
    tls.set_certificate_verifier(
        gx::ExternalCertificateVerifier::Create<CertlessGate>(
            std::move(admits_certless), std::move(refuses)));
  }
  return gx::TlsServerCredentials(tls);
}

}  // namespace mycel
