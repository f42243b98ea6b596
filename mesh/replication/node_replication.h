// NodeReplication: the replicated store of one myceld, put together from
// its parts: the ReplicationDriver (driver.h) over the local ObjectStore,
// the gRPC transport over the mesh's peer channels (grpc_transport.h), and
// the list of members, which it polls from membership. The daemon starts
// it once the node serves the mesh; the Replication service delivers to
// it, and the ObjectStore's listener tells it of local writes.
#ifndef MYCEL_MESH_REPLICATION_NODE_REPLICATION_H_
#define MYCEL_MESH_REPLICATION_NODE_REPLICATION_H_

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/objects.h"
#include "mesh/replication/driver.h"
#include "mesh/replication/grpc_transport.h"
#include "mesh/replication/replica_log.h"
#include "runtime/clock.h"

namespace mycel::replication {

// How often changes and tombstones are collected with a GC horizon of
// `tombstone_max_age`: a quarter of it, from every second to every minute.
absl::Duration GcInterval(absl::Duration tombstone_max_age);

// Thread-safe. Start() once; before it (or after Stop) the other methods
// answer FAILED_PRECONDITION or do nothing.
class NodeReplication {
 public:
  // Fills the members now live (with addresses) and away.
  using MemberSource = std::function<void(std::vector<ReplicationPeer>* live,
                                          std::vector<std::string>* away)>;

  struct Options {
    std::string name;
    // The origin of this node's changes (ReplicatorOptions::origin); empty:
    // `name`.
    std::string origin;
    // Borrowed; they must outlive this object.
    store::ObjectStore* objects = nullptr;
    // The verifier of `objects`' changes (ObjectStore::SetChangeVerifier),
    // which hands certificates to peers and takes theirs; null when
    // changes are not checked.
    OriginVerifier* verifier = nullptr;
    Clock* clock = nullptr;
    boost::asio::io_context* io = nullptr;
    GrpcTransport::ChannelSource channels;
    MemberSource members;
    // How often membership is asked for the members. A member replication
    // does not know yet gets no push, and its digests no answer: a short
    // poll keeps a new member's first writes off the slow path.
    absl::Duration member_poll = absl::Milliseconds(200);
    absl::Duration call_deadline = absl::Seconds(5);
    // ReplicatorOptions::tombstone_max_age. Garbage collection runs every
    // quarter of it, between every second and every minute.
    absl::Duration tombstone_max_age = absl::Hours(72);
    // ReplicatorOptions::forgotten_after: membership's dead retention.
    absl::Duration forgotten_after = absl::Hours(24);
    // ReplicatorOptions::own_writes_hold: after a start, this node's writes
    // wait (in the store's queue) until a peer has said what it holds of
    // them, and this node has taken back what its database lost, or for
    // this long with no answer.
    absl::Duration own_writes_hold = absl::Seconds(5);
  };

  NodeReplication() = default;
  NodeReplication(const NodeReplication&) = delete;
  NodeReplication& operator=(const NodeReplication&) = delete;
  ~NodeReplication() { Stop(); }

  // ALREADY_EXISTS when started before; the driver's errors.
  absl::Status Start(Options options) ABSL_LOCKS_EXCLUDED(mu_);
  bool running() const ABSL_LOCKS_EXCLUDED(mu_);

  // A frame of the Replication service from node `peer`.
  absl::Status Deliver(std::string peer, std::string bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A change this node committed (the ObjectStore's listener).
  void OnLocalChange(const store::ObjectChange& change)
      ABSL_LOCKS_EXCLUDED(mu_);
  // This node's changes up to `seq` are on disk (the Store's durable
  // listener). Its changes reach peers only then: a power loss cannot take
  // back a change a peer holds and give its number to another.
  void OnDurable(int64_t seq) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::vector<PeerLag>> Lag() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<ReplicationDriverStats> Stats() const ABSL_LOCKS_EXCLUDED(mu_);

  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Poller;

  mutable absl::Mutex mu_;
  std::unique_ptr<ObjectStoreLog> log_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<GrpcTransport> transport_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ReplicationDriver> driver_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Poller> poller_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mycel::replication

#endif  // MYCEL_MESH_REPLICATION_NODE_REPLICATION_H_
