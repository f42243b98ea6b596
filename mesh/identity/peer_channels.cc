#include "mesh/identity/peer_channels.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mycel::identity {
namespace {

namespace gx = grpc::experimental;

constexpr absl::Duration kStallTimeout = absl::Seconds(10);

// Accepts a server whose certificate (already chained to the trusted CA by
// gRPC) carries the SPIFFE ID wanted.
class SpiffeServerVerifier final : public gx::ExternalCertificateVerifier {
 public:
  explicit SpiffeServerVerifier(std::string want) : want_(std::move(want)) {}

  bool Verify(gx::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)>,
              grpc::Status* sync_status) override {
    const bool prefix = absl::EndsWith(want_, "/");
    for (const grpc::string_ref& ref : request->uri_names()) {
      absl::string_view uri(ref.data(), ref.size());
      if (prefix ? absl::StartsWith(uri, want_) && uri.size() > want_.size() &&
                       uri.find('/', want_.size()) == absl::string_view::npos
                 : uri == want_) {
        *sync_status = grpc::Status::OK;
        return true;
      }
    }
    *sync_status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                absl::StrCat("the server's certificate is not ",
                                             want_, prefix ? "<name>" : ""));
    return true;
  }
  void Cancel(gx::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::string want_;
};

std::shared_ptr<grpc::ChannelCredentials> Credentials(
    std::shared_ptr<gx::CertificateProviderInterface> provider, bool identity,
    std::string want) {
  gx::TlsChannelCredentialsOptions tls;
  tls.set_certificate_provider(std::move(provider));
  tls.watch_root_certs();
  if (identity) tls.watch_identity_key_cert_pairs();
  tls.set_verify_server_certs(true);
  tls.set_check_call_host(false);
  tls.set_certificate_verifier(
      gx::ExternalCertificateVerifier::Create<SpiffeServerVerifier>(
          std::move(want)));
  return gx::TlsCredentials(tls);
}

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> PinnedCaCredentials(
    std::string ca_pem, std::string want) {
  return Credentials(
      std::make_shared<gx::StaticDataCertificateProvider>(std::move(ca_pem)),
      false, std::move(want));
}

std::shared_ptr<grpc::ChannelCredentials> NodeCredentialsFromFiles(
    const std::string& ca_file, const std::string& cert_file,
    const std::string& key_file, absl::Duration refresh, std::string want) {
  auto seconds = static_cast<unsigned int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(refresh)));
  return Credentials(std::make_shared<gx::FileWatcherCertificateProvider>(
                         key_file, cert_file, ca_file, seconds),
                     true, std::move(want));
}

absl::Duration RefreshIntervalFor(absl::Duration lifetime) {
  return std::clamp(lifetime / 30, absl::Seconds(1), absl::Minutes(1));
}

std::shared_ptr<grpc::Channel> PeerChannels::Get(absl::string_view name,
                                                 absl::string_view address) {
  Key key{std::string(name), std::string(address)};
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(key);
  if (it != channels_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.channel;
  }
  std::string want = absl::StrCat("spiffe://", options_.mesh, "/node/", name);
  grpc::ChannelArguments args;
  // A peer that is down is retried by the caller's own schedule (probes,
  // anti-entropy, renewal); the channel should not back off for minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Peer calls are small and frequent (a probe a second): the bandwidth-
  // delay probe would add an HTTP/2 PING and its ack to most of them.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Peer connections carry long-lived streams (membership links): data
  // left unacknowledged for kStallTimeout (a peer behind a partition, a
  // host gone) tears the connection down (TCP_USER_TIMEOUT, which gRPC
  // sets on a client only with keepalive on), so that the next message
  // dials afresh rather than queueing behind TCP's retransmission backoff.
  // The keepalive pings themselves are hourly: nearly no bytes at rest.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 60 * 60 * 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kStallTimeout)));
  if (provider_ == nullptr) {
    // One watcher of the files for every channel: each of its own re-read
    // and re-parsed them (and kept a thread), which on a 50-node mesh
    // starting on one host was an eighth of all the CPU.
    auto seconds = static_cast<unsigned int>(
        std::max<int64_t>(1, absl::ToInt64Seconds(options_.refresh)));
    provider_ = std::make_shared<gx::FileWatcherCertificateProvider>(
        options_.key_file, options_.cert_file, options_.ca_file, seconds);
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      key.second, Credentials(provider_, true, std::move(want)), args);
  lru_.push_front(key);
  channels_.emplace(std::move(key), Entry{channel, lru_.begin()});
  while (channels_.size() > std::max<size_t>(1, options_.max_channels)) {
    channels_.erase(lru_.back());
    lru_.pop_back();
  }
  return channel;
}

size_t PeerChannels::size() const {
  absl::MutexLock lock(&mu_);
  return channels_.size();
}

}  // namespace mycel::identity
