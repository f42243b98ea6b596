// NodeMembership: the membership of one myceld, put together from its
// parts: the MembershipDriver (driver.h) with the node's real signer and
// verifier (pki_signer.h), the gRPC transport over PeerChannels
// (grpc_transport.h), and the member table in the state database
// (member_store.h). The daemon creates one, starts it once the node has
// mesh credentials and a TCP listener, and hands it to the Gossip and
// Membership services.
#ifndef MYCEL_MESH_MEMBERSHIP_NODE_MEMBERSHIP_H_
#define MYCEL_MESH_MEMBERSHIP_NODE_MEMBERSHIP_H_

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/store.h"
#include "mesh/identity/peer_channels.h"
#include "mesh/identity/trust.h"
#include "mesh/membership/driver.h"
#include "mesh/membership/grpc_transport.h"
#include "mesh/membership/member_store.h"
#include "mesh/membership/pki_signer.h"
#include "runtime/clock.h"

namespace mycel::membership {

// Thread-safe. Start() once; the other methods may be called before it
// (they answer FAILED_PRECONDITION) and from any thread.
class NodeMembership {
 public:
  struct Options {
    std::string name;
    // "lan" or "wan" (ProfileByName).
    std::string profile = "lan";
    // Config::dead_retention and left_retention; zero: the profile's.
    absl::Duration dead_retention = absl::ZeroDuration();
    // Where peers reach this node ("host:port").
    std::string advertise;
    std::vector<std::string> seeds;
    // The node's credentials, PEM files (re-read for rotation).
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
    // How often PeerChannels re-read them.
    absl::Duration refresh = absl::Minutes(1);
    // Borrowed when set: the channels to use (the mesh's own, which
    // replication and the identity calls use, so that one connection to a
    // peer carries them all); else membership makes its own from the
    // files above.
    identity::PeerChannels* channels = nullptr;
    // Borrowed; they must outlive this object. `store` may be null.
    const identity::Trust* trust = nullptr;
    Clock* clock = nullptr;
    boost::asio::io_context* io = nullptr;
    store::Store* store = nullptr;
    // Called with every membership event from the start on (before the
    // first seed is contacted), on the driver's callback thread; may be
    // empty.
    MembershipDriver::Subscriber on_event;
  };

  NodeMembership() = default;
  NodeMembership(const NodeMembership&) = delete;
  NodeMembership& operator=(const NodeMembership&) = delete;
  // Stop().
  ~NodeMembership();

  // Starts gossiping as options.name and joins through the seeds (and the
  // members remembered in the store). ALREADY_EXISTS when started before;
  // INVALID_ARGUMENT naming the setting (membership_profile, advertise)
  // or the file at fault; the driver's and the store's errors.
  absl::Status Start(Options options) ABSL_LOCKS_EXCLUDED(mu_);
  bool running() const ABSL_LOCKS_EXCLUDED(mu_);

  // A frame of the Gossip service from node `peer` (its verified
  // certificate's name). Queued, never blocks. FAILED_PRECONDITION when
  // membership is not running.
  // Deliver, with the direct answer returned through `reply` (see
  // MembershipDriver::DeliverWithReply); not called on an error.
  absl::Status DeliverWithReply(std::string peer, std::string bytes,
                                std::function<void(std::string)> reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Deliver(std::string peer, std::string bytes)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The server end of a Gossip.Link from node `peer` (its certificate's
  // name, which the trust accepted at its generation `admitted_at`), or
  // null with `refused` set (FAILED_PRECONDITION when membership is not
  // running).
  grpc::ServerBidiReactor<mycel::v1::GossipFrame, mycel::v1::GossipFrame>*
  AcceptLink(grpc::CallbackServerContext* context, std::string peer,
             uint64_t admitted_at, absl::Status* refused)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The transport's counters (links, frames); FAILED_PRECONDITION when not
  // running.
  absl::StatusOr<GrpcTransport::Stats> TransportStats() const
      ABSL_LOCKS_EXCLUDED(mu_);
  // GrpcTransport::DescribeLinks; FAILED_PRECONDITION when not running.
  absl::StatusOr<std::string> DescribeLinks() const ABSL_LOCKS_EXCLUDED(mu_);

  // Every member, this node included, sorted by name; FAILED_PRECONDITION
  // when membership is not running.
  absl::StatusOr<std::vector<MemberInfo>> Members() const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The certificate (DER) of a member's newest signed record (this node
  // included); NOT_FOUND when membership does not know it,
  // FAILED_PRECONDITION when not running.
  absl::StatusOr<std::string> CertificateOf(absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The driver's counters; FAILED_PRECONDITION when not running.
  absl::StatusOr<DriverStats> Stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // MembershipDriver::Leave; `done` gets FAILED_PRECONDITION at once when
  // membership is not running.
  void Leave(absl::Duration timeout, MembershipDriver::Done done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Stops gossiping and saves the member table. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The driver, or FAILED_PRECONDITION saying why there is none.
  absl::StatusOr<MembershipDriver*> Driver() const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Set once by Start and kept until destruction (the services may hold
  // calls into it until the servers are shut down); Stop only stops it.
  std::unique_ptr<identity::PeerChannels> channels_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PkiSigner> signer_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PkiVerifier> verifier_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<GrpcTransport> transport_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<MemberStore> store_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<MembershipDriver> driver_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_NODE_MEMBERSHIP_H_
