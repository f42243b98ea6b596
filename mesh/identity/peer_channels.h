// PeerChannels: how this node dials another node of its mesh. Every channel
// presents this node's certificate and accepts only a server whose
// certificate chains to the mesh CA and carries the SPIFFE ID of the node
// meant (spiffe://MESH/node/NAME), so that an address taken over by another
// member, or by anything outside the mesh, is refused during the handshake.
//
// The credentials are read from files and re-read every `refresh`: a
// renewed node certificate (mesh/pki/rotation.h) is used by new
// connections without a restart, and channels already open keep working.
//
// Shared by everything that talks to peers: join (after the CA is pinned),
// certificate renewal, revocation pushes, membership gossip, replication.
#ifndef MYCEL_MESH_IDENTITY_PEER_CHANNELS_H_
#define MYCEL_MESH_IDENTITY_PEER_CHANNELS_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mycel::identity {

// The server check of every channel to a node: its certificate chains to
// the trusted CA (gRPC checks that) and its URI SAN is exactly `want`, or,
// when `want` ends in '/', starts with it ("spiffe://MESH/node/": any node
// of the mesh). The host name is not checked: mesh certificates name none.
//
// Credentials that trust the CA `ca_pem` and present no certificate: a
// node joining a mesh, after it pinned the CA (mesh/pki/join_token.h).
std::shared_ptr<grpc::ChannelCredentials> PinnedCaCredentials(
    std::string ca_pem, std::string want);

// Credentials that present this node's certificate and trust the mesh CA,
// all read from files and re-read every `refresh`.
std::shared_ptr<grpc::ChannelCredentials> NodeCredentialsFromFiles(
    const std::string& ca_file, const std::string& cert_file,
    const std::string& key_file, absl::Duration refresh, std::string want);

// The file re-read interval for certificates that live `lifetime`: a
// thirtieth of it, between 1 second and 1 minute, so that a renewal (at two
// thirds of the life) is picked up long before the old certificate expires.
absl::Duration RefreshIntervalFor(absl::Duration lifetime);

// Thread-safe.
class PeerChannels {
 public:
  struct Options {
    // The mesh: servers must present spiffe://MESH/node/NAME.
    std::string mesh;
    // PEM files of the mesh CA, this node's certificate and its key.
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
    // How often the files are re-read (certificate rotation).
    absl::Duration refresh = absl::Minutes(1);
    // Channels kept open; the least recently used beyond are dropped.
    size_t max_channels = 256;
  };

  explicit PeerChannels(Options options) : options_(std::move(options)) {}
  PeerChannels(const PeerChannels&) = delete;
  PeerChannels& operator=(const PeerChannels&) = delete;

  const std::string& mesh() const { return options_.mesh; }

  // A channel to the node `name` at `address` ("host:port"). Its server
  // must be spiffe://MESH/node/NAME; when `name` is empty (a seed known
  // only by its address) any node of the mesh is accepted. Cached per
  // (name, address).
  std::shared_ptr<grpc::Channel> Get(absl::string_view name,
                                     absl::string_view address)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Channels currently cached.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::pair<std::string, std::string>;  // name, address
  struct Entry {
    std::shared_ptr<grpc::Channel> channel;
    std::list<Key>::iterator lru;
  };

  const Options options_;
  mutable absl::Mutex mu_;
  // Reads the files for every channel; made by the first Get.
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, Entry> channels_ ABSL_GUARDED_BY(mu_);
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_PEER_CHANNELS_H_
