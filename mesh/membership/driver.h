// MembershipDriver: runs the I/O-free Membership state machine
// (membership.h) on the daemon's event loop. It owns the Membership and
// serialises every call to it on one Boost.Asio strand; it takes the time
// and its timers from a mycel::Clock (AsioClock in the daemon, ManualClock
// in tests), keeps one timer armed at NextDeadline(), sends the outbox
// through a Transport (driver_transport.h), and applies the events to the
// MemberStore (batched) and to subscribers. docs/membership.md, "The
// driver", describes it.
#ifndef MYCEL_MESH_MEMBERSHIP_DRIVER_H_
#define MYCEL_MESH_MEMBERSHIP_DRIVER_H_

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/membership/config.h"
#include "mesh/membership/driver_transport.h"
#include "mesh/membership/member_store.h"
#include "mesh/membership/membership.h"
#include "runtime/clock.h"

namespace mycel::membership {

// The protocol profile by name: "lan" (memberlist's DefaultLANConfig, the
// default) or "wan" (DefaultWANConfig). INVALID_ARGUMENT naming the
// membership_profile field for anything else.
absl::StatusOr<Config> ProfileByName(absl::string_view name);

struct DriverOptions {
  // The state machine's options: config, name, meta, signer and verifier
  // (borrowed; they must outlive the driver). With a store, members, seeds
  // and incarnation are restored from it (seeds given here win).
  MembershipOptions membership;
  // All borrowed; they must outlive the driver. Timers from `clock` may
  // fire on any thread: the driver moves their work onto its strand on
  // `io`. `store` is optional (null: nothing persisted).
  Clock* clock = nullptr;
  boost::asio::io_context* io = nullptr;
  Transport* transport = nullptr;
  MemberStore* store = nullptr;

  // Sends not yet completed to one address; a further send to it is
  // dropped and counted (DriverStats::send_drops) rather than queued, so a
  // peer that stops reading costs bounded memory and never blocks.
  int max_in_flight_per_peer = 16;
  // Received messages waiting for the strand; beyond, Deliver drops them
  // (a flood must not grow the queue without bound).
  int max_queued_deliveries = 4096;
  // Membership events are written in one transaction this long after the
  // first of a batch; every member's row (last_heard) at most this often.
  absl::Duration save_delay = absl::Milliseconds(500);
  absl::Duration full_save_interval = absl::Minutes(1);
};

// One member, for the API (`mycel mesh members`).
struct MemberInfo {
  std::string name;
  // All its addresses, the preferred one first.
  std::vector<std::string> addresses;
  MemberState state = MemberState::kAlive;
  uint64_t incarnation = 0;
  std::vector<std::pair<std::string, std::string>> labels;
  std::vector<std::pair<std::string, int64_t>> capacity;
  absl::Time state_since = absl::InfinitePast();
  // InfinitePast when never heard from directly (and for this node).
  absl::Time last_heard = absl::InfinitePast();
  bool self = false;
};

struct DriverStats {
  MembershipStats membership;
  int health_score = 0;
  uint64_t ticks = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_received = 0;
  // Rejected by the state machine (malformed, oversized, rate-limited,
  // sender mismatch); membership.* says which.
  uint64_t messages_rejected = 0;
  // Dropped by Deliver because max_queued_deliveries were waiting.
  uint64_t deliveries_dropped = 0;
  uint64_t messages_sent = 0;
  uint64_t bytes_sent = 0;
  // Dropped because max_in_flight_per_peer sends to the address were
  // pending, or the message had no address or was too large.
  uint64_t send_drops = 0;
  // Completed with an error by the transport.
  uint64_t send_failures = 0;
  // Direct answers (acks, push-pull answers) returned in the response of
  // the call that carried the message, not sent on their own.
  uint64_t replies_in_response = 0;
  // Sends started and not completed.
  uint64_t sends_in_flight = 0;
  uint64_t saves = 0;
  uint64_t save_failures = 0;
};

// Thread-safe: every public method may be called from any thread (gRPC's
// included). Mutations are posted to the strand; queries read the state
// under a lock. Callbacks (subscribers, Leave's and UpdateMeta's `done`)
// run on the strand, with no lock held; they may call the queries but must
// not block.
class MembershipDriver {
 public:
  using Subscriber = std::function<void(const MemberEvent&)>;
  using Done = std::function<void(absl::Status)>;

  // Restores from options.store, picks the incarnation (above the stored
  // one and at least the wall clock in microseconds) and stores it before
  // anything is sent, creates the Membership and starts driving it.
  // INVALID_ARGUMENT for missing clock, io or transport, or what
  // Membership::Create refuses; the store's errors.
  static absl::StatusOr<std::unique_ptr<MembershipDriver>> Start(
      DriverOptions options);

  MembershipDriver(const MembershipDriver&) = delete;
  MembershipDriver& operator=(const MembershipDriver&) = delete;
  // Stop().
  ~MembershipDriver();

  // --- In ---

  // Bytes from a peer whose certificate names `authenticated_peer`: one
  // encoded GossipMessage. Posted to the strand; never blocks.
  void Deliver(std::string authenticated_peer, std::string bytes);
  // Deliver, and then `reply` (exactly once, on any thread) with the direct
  // answer the message made (an ack to a ping, the answer to a push-pull:
  // one encoded GossipMessage, which is then not sent on its own), or ""
  // when it made none, was dropped or the driver is stopped.
  void DeliverWithReply(std::string authenticated_peer, std::string bytes,
                        std::function<void(std::string)> reply);
  // Contacts the seed addresses (and keeps them, persisted, to retry).
  void Join(std::vector<std::string> seeds);
  // Leaves gracefully: gossips a signed leaving record, and keeps ticking
  // until it has been sent enough or `timeout` passes; then the driver
  // halts (no more ticks, incoming messages ignored; the queries still
  // answer). `done` gets OK, DEADLINE_EXCEEDED at the timeout, or the
  // state machine's error (FAILED_PRECONDITION: already left).
  void Leave(absl::Duration timeout, Done done);
  // New addresses, labels or capacity, gossiped at the next incarnation.
  void UpdateMeta(NodeMeta meta, Done done);
  // Every later membership event, in order.
  void Subscribe(Subscriber subscriber);

  // --- Queries ---

  // Every member, this node included, sorted by name.
  std::vector<MemberInfo> Members() const;
  std::optional<MemberInfo> Find(absl::string_view name) const;
  // The certificate (DER) of the member's newest signed record; nullopt
  // when the member is unknown.
  std::optional<std::string> CertificateOf(absl::string_view name) const;
  DriverStats Stats() const;
  const std::string& name() const;
  uint64_t incarnation() const;

  // Stops driving: no more sends, ticks or deliveries; pending changes are
  // written to the store. A pending Leave gets CANCELLED. Idempotent.
  void Stop();
  // Stops as a crash would: nothing more is written (tests).
  void Abort();

  class Core;

 private:
  explicit MembershipDriver(std::shared_ptr<Core> core);
  std::shared_ptr<Core> core_;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_DRIVER_H_
