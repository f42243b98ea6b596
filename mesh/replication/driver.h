// ReplicationDriver: runs the I/O-free Replicator (replicator.h) on the
// daemon's event loop, as membership's driver runs SWIM. Every call to the
// Replicator happens on one Boost.Asio strand; the time and the one timer
// (at NextDeadline) come from a mycel::Clock (AsioClock in the daemon,
// ManualClock in tests); messages leave through a Transport and arrive
// through Deliver with the peer name the transport authenticated.
//
// The set of peers comes from membership: SetMembers gives the live
// members with their addresses, and those away (suspect or dead), whose
// version vectors still hold back garbage collection.
#ifndef MYCEL_MESH_REPLICATION_DRIVER_H_
#define MYCEL_MESH_REPLICATION_DRIVER_H_

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/store/objects.h"
#include "mesh/replication/replica_log.h"
#include "mesh/replication/replicator.h"
#include "runtime/clock.h"

namespace mycel::replication {

// The seam to the network (the same contract as membership's Transport):
// Send must not block, and calls `done` exactly once, from any thread.
class Transport {
 public:
  using SendDone = std::function<void(absl::Status)>;
  virtual ~Transport() = default;
  // Sends `bytes` (one encoded mycel.v1.ReplicationMessage) to the node
  // `peer` at `address`; the peer's certificate must name `peer`.
  virtual void Send(absl::string_view peer, absl::string_view address,
                    std::string bytes, SendDone done) = 0;
};

struct ReplicationPeer {
  std::string name;
  std::string address;

  friend bool operator==(const ReplicationPeer&,
                         const ReplicationPeer&) = default;
};

struct ReplicationDriverOptions {
  ReplicatorOptions replicator;
  // Borrowed; they must outlive the driver.
  Clock* clock = nullptr;
  boost::asio::io_context* io = nullptr;
  Transport* transport = nullptr;
  ReplicaLog* log = nullptr;
  // Sends not yet completed to one peer; more are dropped and counted (the
  // anti-entropy exchange repairs what a dropped push carried).
  int max_in_flight_per_peer = 32;
  // Received messages waiting for the strand, in all and from one peer;
  // beyond, Deliver drops them (RESOURCE_EXHAUSTED).
  int max_queued_deliveries = 4096;
  int max_queued_per_peer = 1024;
  // A message larger than this is neither sent nor accepted.
  size_t max_message_bytes = 4 << 20;
  // Holds this node's writes (Store::HoldLocalWrites) while the Replicator
  // says so (ReplicatorOptions::own_writes_hold): called with how long at
  // most whenever that changes, zero to release them; first from Start,
  // then on the strand, and with zero from Stop. The store's own limit is
  // a second longer than the Replicator's, which decides.
  std::function<void(absl::Duration at_most)> hold_own_writes;
};

struct ReplicationDriverStats {
  ReplicatorStats replicator;
  uint64_t messages_received = 0;
  uint64_t messages_rejected = 0;  // undecodable, or the Replicator's error
  uint64_t deliveries_dropped = 0;
  // Messages of a peer that spent its allowance of refused changes
  // (ReplicatorOptions::refusal_burst), dropped before they queued.
  uint64_t deliveries_quarantined = 0;
  uint64_t messages_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t send_drops = 0;  // no address, too large, or too many in flight
  uint64_t send_failures = 0;
};

// How far a peer is behind this node, from the peer's last digest: for
// each origin, the changes this node holds that the peer did not.
struct PeerLag {
  std::string name;
  int64_t changes_behind = 0;
  bool known = false;  // false until the peer's first digest
};

// Thread-safe: every method may be called from any thread.
class ReplicationDriver {
 public:
  static absl::StatusOr<std::unique_ptr<ReplicationDriver>> Start(
      ReplicationDriverOptions options);
  ReplicationDriver(const ReplicationDriver&) = delete;
  ReplicationDriver& operator=(const ReplicationDriver&) = delete;
  ~ReplicationDriver();  // Stop()

  // A change this node committed: pushed to `fanout` peers at once.
  void OnLocalChange(store::ObjectChange change);
  // This node's changes up to `seq` are on disk (ReplicatorOptions::
  // await_durable).
  void OnDurable(int64_t seq);
  // Bytes from the peer whose certificate names `peer`, queued for the
  // strand. RESOURCE_EXHAUSTED when dropped: the queue, or the peer's share
  // of it, is full, or the peer spent its allowance of refused changes.
  absl::Status Deliver(std::string peer, std::string bytes);
  // The members now live (with where to reach them) and away.
  void SetMembers(std::vector<ReplicationPeer> live,
                  std::vector<std::string> away);

  ReplicationDriverStats Stats() const;
  // This node's version vector.
  store::VersionVector Versions() const;
  // Each live member's lag, by name.
  std::vector<PeerLag> Lag() const;

  // No more sends, ticks or deliveries. Idempotent.
  void Stop();

  class Core;

 private:
  explicit ReplicationDriver(std::shared_ptr<Core> core)
      : core_(std::move(core)) {}
  std::shared_ptr<Core> core_;
};

}  // namespace mycel::replication

#endif  // MYCEL_MESH_REPLICATION_DRIVER_H_
