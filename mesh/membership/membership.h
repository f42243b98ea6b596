// SWIM membership with the Lifeguard extensions, as an I/O-free state
// machine. It reads no clock, does no I/O, starts no thread and owns its
// randomness (a Prng seeded by the caller): events go in (a message with the
// identity the transport authenticated, a timer tick, a join request, a
// leave), messages and one wake-up time come out. The daemon drives it over
// mTLS gRPC on its event loop; mesh/sim drives the very same code for
// thousands of nodes in virtual time. docs/membership.md describes the
// protocol.
//
// Driving it:
//
//   auto m = Membership::Create(options, now);        // signs our record
//   m->Join(seeds, now);                               // optional
//   loop:
//     on bytes from an authenticated peer: m->HandleBytes(peer, bytes, now)
//     when now >= m->NextDeadline():      m->Tick(now)
//     after either: send every m->TakeOutbox() entry, apply m->TakeEvents()
//     (e.g. to SQLite), re-arm the timer at m->NextDeadline()
//
// Thread-safety: none; the driver serialises calls (one strand). The signer
// and verifier are borrowed and must outlive the Membership.
#ifndef MYCEL_MESH_MEMBERSHIP_MEMBERSHIP_H_
#define MYCEL_MESH_MEMBERSHIP_MEMBERSHIP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "mesh/membership/awareness.h"
#include "mesh/membership/broadcast_queue.h"
#include "mesh/membership/config.h"
#include "mesh/membership/message.h"
#include "mesh/membership/prng.h"
#include "mesh/membership/rate_limiter.h"
#include "mesh/membership/signing.h"
#include "mesh/membership/suspicion.h"

namespace mycel::membership {

// One member as this node sees it: what `mycel mesh members` shows and what
// the driver stores (the record as EncodeAlive bytes) to restart from.
struct MemberSnapshot {
  std::string name;
  MemberState state = MemberState::kAlive;
  // At least record->incarnation; higher when suspected or declared dead at
  // a later incarnation than its newest record.
  uint64_t incarnation = 0;
  // Its newest signed record: addresses, labels, capacity.
  AliveRef record;
  absl::Time state_since = absl::InfinitePast();
  // Last direct word from it (a message it sent us, or an ack for it);
  // InfinitePast when never.
  absl::Time last_heard = absl::InfinitePast();
};

enum class MemberEventKind {
  kJoined,     // new, or back from dead or left
  kUpdated,    // alive with new addresses, labels or capacity
  kSuspected,  // alive -> suspect
  kRecovered,  // suspect -> alive (it refuted)
  kFailed,     // -> dead
  kLeft,       // -> left (graceful)
  kRemoved,    // forgotten after its retention
};

struct MemberEvent {
  MemberEventKind kind;
  std::string name;
  uint64_t incarnation = 0;
  absl::Time at;
};

struct MembershipOptions {
  Config config;
  // This node. `incarnation` must be above anything this name has said
  // before: the driver passes max(persisted + 1, wall-clock microseconds),
  // so that a restarted node overrides its old death and is no ghost.
  std::string name;
  uint64_t incarnation = 0;
  NodeMeta meta;
  // Seeds this instance's Prng; the simulator derives one per node.
  uint64_t random_seed = 0;
  AliveSigner* signer = nullptr;
  AliveVerifier* verifier = nullptr;
  // Restored from the driver's store: members (our own entry is ignored) and
  // seed addresses. With members, a restarted node rejoins without a seed.
  std::vector<MemberSnapshot> members;
  std::vector<std::string> seeds;
  // On start, announce our record and push-pull with one restored member at
  // once. The simulator turns this off for nodes modelled as having been
  // running all along.
  bool rejoin_on_start = true;
};

// Counters a driver exports as metrics; tests assert on them.
struct MembershipStats {
  uint64_t messages_received = 0;
  uint64_t rejected_oversized = 0;
  uint64_t rejected_malformed = 0;
  uint64_t rejected_sender_mismatch = 0;
  uint64_t rejected_rate_limited = 0;
  uint64_t alive_rejected_signature = 0;
  uint64_t alive_rejected_name = 0;
  uint64_t stale_updates = 0;
  uint64_t stale_accusations_corrected = 0;  // records sent back (below)
  uint64_t misdirected_pings = 0;
  uint64_t probes = 0;
  uint64_t probes_indirect = 0;
  uint64_t probes_failed = 0;
  uint64_t suspicions = 0;
  uint64_t deaths_declared = 0;
  uint64_t refutations = 0;
  uint64_t push_pulls_sent = 0;
  uint64_t push_pulls_received = 0;
  uint64_t push_pulls_by_fingerprint = 0;  // sent so
  uint64_t fingerprint_mismatches = 0;     // received so, views differing
  uint64_t reconnect_attempts = 0;
  uint64_t signing_failures = 0;
};

class Membership {
 public:
  // INVALID_ARGUMENT for a bad config, name, meta or missing signer and
  // verifier; the signer's error when it cannot sign our first record.
  static absl::StatusOr<std::unique_ptr<Membership>> Create(
      MembershipOptions options, absl::Time now);

  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // --- Events in ---

  // Contacts each seed address with a join push-pull. The seeds are kept and
  // retried with backoff until one answers (and whenever this node knows no
  // live member).
  void Join(absl::Span<const std::string> seed_addresses, absl::Time now);

  // A message from `authenticated_peer` (the name in the peer's verified
  // certificate). Rejected, and counted, when: the peer is over its rate
  // (RESOURCE_EXHAUSTED), the message is malformed (INVALID_ARGUMENT), its
  // `from` is not the peer (PERMISSION_DENIED). Alive records that fail
  // verification are dropped and counted; the rest of the message is used.
  absl::Status HandleMessage(absl::string_view authenticated_peer,
                             const Message& message, absl::Time now);
  // The same from wire bytes; RESOURCE_EXHAUSTED above max_message_bytes.
  absl::Status HandleBytes(absl::string_view authenticated_peer,
                           absl::string_view bytes, absl::Time now);

  // Runs every timer due at `now`. Call when now >= NextDeadline(); calling
  // early is harmless.
  void Tick(absl::Time now);

  // Leaves gracefully: signs a leaving record and gossips it. The driver
  // keeps ticking until leave_done() (or a timeout), then stops.
  // FAILED_PRECONDITION when already left; the signer's error if it fails.
  absl::Status Leave(absl::Time now);
  bool leave_done() const;

  // Changes our addresses, labels or capacity: a new signed record at the
  // next incarnation, gossiped.
  absl::Status UpdateMeta(NodeMeta meta, absl::Time now);

  // --- Out ---

  // When Tick must next run.
  absl::Time NextDeadline() const;
  // Messages to send, in order. The caller owns them.
  std::vector<Outbound> TakeOutbox();
  // Membership changes since the last call, in order.
  std::vector<MemberEvent> TakeEvents();

  // --- Queries ---

  // Every member, ourselves included, in no particular order.
  std::vector<MemberSnapshot> Snapshot() const;
  std::optional<MemberSnapshot> Find(absl::string_view name) const;
  // Cheaper than Find when only the state matters.
  std::optional<MemberState> StateOf(absl::string_view name) const;
  // Seeds as given (for the driver to persist).
  std::vector<std::string> seeds() const;
  // A fingerprint of this node's view, as a push-pull summarizes it: every
  // member's name, record incarnation, state and incarnation, in any
  // order. Two nodes that hold the same view compute the same value.
  uint64_t Fingerprint() const;

  const std::string& name() const { return name_; }
  uint64_t incarnation() const { return members_[0].incarnation; }
  AliveRef record() const { return members_[0].record; }
  int health_score() const { return awareness_.score(); }
  // Members in `state`, ourselves included.
  int CountIn(MemberState state) const {
    return count_[static_cast<int>(state)];
  }
  const MembershipStats& stats() const { return stats_; }
  // Updates waiting to be piggybacked (at most one per member).
  size_t queued_updates() const { return broadcasts_.size(); }
  const Config& config() const { return config_; }

 private:
  // Kept small: a node holds one per member, and the simulator holds
  // nodes^2 of them (10,000 nodes: 10^8).
  struct Member {
    AliveRef record;
    uint64_t incarnation = 0;
    int64_t state_since_us = 0;
    int64_t last_heard_us = INT64_MIN;
    MemberState state = MemberState::kAlive;
    // Active, and we have sent it a message or heard from it since it was
    // last dead: the transport holds a connection to it, and a message
    // costs no new handshake. `listed`: its index is in linked_.
    bool linked = false;
    bool listed = false;
    // `record` is the first this node heard of another member (it replaced
    // none): no one can be suspecting an older incarnation of it, so it
    // goes whole in push-pulls for a shorter while (Freshness).
    bool first_record = false;
    // When `record` last changed (a new incarnation, a refutation).
    int64_t record_since_us = 0;
  };
  // The flags share the padding before record_since_us.
  static_assert(sizeof(Member) <= sizeof(AliveRef) + 5 * sizeof(int64_t),
                "Member grew: the simulator holds 10^8 of them");

  // The name index holds member positions and hashes the names they point
  // at, so it costs 4 bytes a member instead of a second copy of the name.
  struct IndexHash {
    using is_transparent = void;
    const std::vector<Member>* members;
    size_t operator()(uint32_t i) const;
    size_t operator()(absl::string_view name) const;
  };
  struct IndexEq {
    using is_transparent = void;
    const std::vector<Member>* members;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, absl::string_view b) const;
    bool operator()(absl::string_view a, uint32_t b) const {
      return (*this)(b, a);
    }
  };

  struct Probe {
    uint64_t seq;
    std::string target;
    absl::Time indirect_at;
    absl::Time deadline;
    bool indirect_sent = false;
    int expected_nacks = 0;
    int nacks = 0;
  };

  // A ping we send on another member's behalf.
  struct Relay {
    std::string origin;
    uint64_t origin_seq;
    bool nack;
  };

  enum class TimerKind : uint8_t { kSuspicion, kRelay };
  struct Timer {
    int64_t when_us;
    uint64_t order;
    TimerKind kind;
    uint64_t seq;
    std::string name;
    bool operator>(const Timer& o) const {
      return when_us != o.when_us ? when_us > o.when_us : order > o.order;
    }
  };

  struct Backoff {
    int failures = 0;
    int64_t next_us = 0;
  };

  struct SeedState {
    std::string address;
    std::string resolved;  // the name that answered, once one has
  };

  explicit Membership(const MembershipOptions& options);
  absl::Status Init(MembershipOptions options, absl::Time now);
  absl::Status HandleChecked(absl::string_view peer, const Message& message,
                             int64_t now_us);
  enum class Due {
    kNone,
    kTimer,
    kProbe,
    kGossip,
    kPushPull,
    kReconnect,
    kMaintenance
  };
  absl::Time Earliest(Due* which) const;

  // Members.
  std::optional<uint32_t> IndexOf(absl::string_view name) const;
  uint32_t AddMember(AliveRef record, MemberState state, uint64_t incarnation,
                     int64_t now_us);
  void SetState(uint32_t idx, MemberState state, int64_t now_us);
  void RemoveMember(uint32_t idx);
  int NumActive() const;
  MemberSnapshot SnapshotOf(const Member& m) const;
  void Emit(MemberEventKind kind, const Member& m, int64_t now_us);

  // Updates.
  void HandleAlive(const AliveRef& alive, int64_t now_us);
  // Suspect and dead notices (and push-pull states) are not signed, so one
  // may not name an incarnation beyond the member's signed record that we
  // hold: an honest accuser accuses the incarnation it has seen signed, and
  // a forged 2^64-1 would leave the member no incarnation to refute with.
  // Such a notice is dropped (counted as stale); the record it would need
  // arrives by gossip, and the accusation again after it.
  static bool AheadOfRecord(const Member& m, uint64_t incarnation);
  // `relayer`: the peer whose message carried the notice, if any, and
  // `corrections` the records to send it back (CorrectStaleAccusation).
  void HandleSuspect(const Suspect& s, int64_t now_us,
                     absl::string_view relayer = {},
                     std::vector<Update>* corrections = nullptr);
  void HandleDead(const Dead& d, int64_t now_us);
  // A suspicion of an incarnation older than the member's record we hold
  // came from `relayer`: a peer that still spreads it missed the
  // refutation, and it (and the accuser, if it is the accuser) would
  // declare a live member dead when the suspicion times out. Adds the
  // record to `corrections`, which go back to that peer alone: at most
  // kMaxCorrectionsPerMessage a message, and each member's at most once a
  // probe interval per peer.
  void CorrectStaleAccusation(const Member& m, absl::string_view relayer,
                              std::vector<Update>* corrections);
  static constexpr size_t kMaxCorrectionsPerMessage = 8;
  // Sends `corrections` to `peer`: ahead of the updates of the first
  // message to it queued since `outbox_start` (an answer), leaving out the
  // records that message already carries, or else in a message of their
  // own.
  void SendCorrections(absl::string_view peer, size_t outbox_start,
                       std::vector<Update> corrections);
  void MergeState(const std::vector<MemberDigest>& members, int64_t now_us);
  // Replaces a member's record, noting when.
  void SetRecord(Member& m, AliveRef record);
  // Applies a push-pull request's summaries as MergeState would, and adds
  // to `want` the members whose records we lack or hold older.
  void MergeSummaries(absl::string_view peer,
                      const std::vector<MemberSummary>& summaries,
                      int64_t now_us, std::vector<std::string>* want);
  bool VerifyAlive(const Alive& alive);
  absl::StatusOr<AliveRef> SignSelf(uint64_t incarnation, bool leaving);
  void Refute(uint64_t accused_incarnation);
  // `join`: the news of a member that joined, sent join_retransmit_mult
  // rather than retransmit_mult times (Config).
  void Broadcast(absl::string_view name, Update update, bool join = false);

  // Bodies.
  void HandlePing(absl::string_view peer, const Ping& ping);
  void HandleIndirectPing(absl::string_view peer, const IndirectPing& req,
                          int64_t now_us);
  void HandleAck(absl::string_view peer, const Ack& ack, int64_t now_us);
  void HandleNack(const Nack& nack);
  void HandlePushPull(absl::string_view peer, const PushPull& pp,
                      int64_t now_us);

  // Timers.
  void StartProbe(int64_t now_us);
  void SendIndirectProbes(int64_t now_us);
  void FinishFailedProbe(int64_t now_us);
  void Gossip(int64_t now_us);
  void PushPullWithRandomMember(int64_t now_us);
  void Reconnect(int64_t now_us);
  void Maintain(int64_t now_us);
  void FireTimer(const Timer& timer, int64_t now_us);
  void PushTimer(absl::Time when, TimerKind kind, uint64_t seq,
                 std::string name);
  std::optional<uint32_t> NextProbeTarget(int64_t now_us);
  void ResetProbeOrder(int64_t now_us);

  // Output.
  std::vector<uint32_t> RandomMembers(int k, uint32_t exclude, bool alive_only,
                                      int64_t now_us);
  // A round's gossip targets: RandomMembers, with live members we have no
  // connection to replaced by ones we have, beyond what gossip_new_links
  // allows (Config).
  std::vector<uint32_t> GossipTargets(int64_t now_us);
  // Adds to `out` up to `k` active linked members not already in it.
  void SampleLinked(size_t k, std::vector<uint32_t>* out);
  void MarkLinked(uint32_t idx);
  bool Eligible(const std::string& key, int64_t now_us) const;
  // The reconnect schedule's base: join_retry_interval while this node
  // knows no live member, else reconnect_interval.
  absl::Duration ReconnectBase() const;
  void RecordAttempt(const std::string& key, int64_t now_us);
  std::string AddressOf(absl::string_view name) const;
  void Send(std::string to, std::string address, Body body,
            std::vector<Update> first_updates = {});
  template <typename Visit>
  void ForEachInSyncOrder(Visit visit) const;
  // Full records for a push-pull, within its size budget: all of them; or
  // those that are news to `request`'s sender; or those named in `names`.
  std::vector<MemberDigest> Records(
      const PushPull* request, const std::vector<std::string>* names) const;
  // A push-pull request's view of our members: summaries, and whole
  // records for those that changed lately.
  void Summarize(PushPull* pp) const;
  // Whether a member's record changed lately enough to go whole in
  // push-pulls (Summarize): a record that replaced another for
  // `suspicion_max_timeout_mult` suspicion timeouts, a first one for one.
  struct Freshness {
    int64_t now_us;
    int64_t replaced_us;
    int64_t first_us;
    bool operator()(const Member& m) const {
      return now_us - m.record_since_us <=
             (m.first_record ? first_us : replaced_us);
    }
  };
  Freshness Fresh() const;
  // A push-pull request (a join carries full records). `by_fingerprint`:
  // a fingerprint instead of summaries when no record changed lately.
  void SendPushPull(std::string to, std::string address, uint64_t seq,
                    bool join, bool by_fingerprint = false);

  const Config config_;
  const std::string name_;
  NodeMeta meta_;
  AliveSigner* const signer_;
  AliveVerifier* const verifier_;
  Prng prng_;
  Awareness awareness_;
  PeerRateLimiter limiter_;
  BroadcastQueue broadcasts_;

  // members_[0] is this node.
  std::vector<Member> members_;
  absl::flat_hash_set<uint32_t, IndexHash, IndexEq> index_;
  int count_[5] = {0, 0, 0, 0, 0};

  std::vector<uint32_t> probe_order_;
  // Members with `linked` set, and stale entries that SampleLinked drops
  // as it meets them; rebuilt after RemoveMember moves indices.
  std::vector<uint32_t> linked_;
  bool linked_stale_ = false;
  int linked_count_ = 0;  // members with `linked` set

  size_t probe_pos_ = 0;
  std::optional<Probe> probe_;
  uint64_t next_seq_;

  absl::flat_hash_map<std::string, Suspicion> suspicions_;
  absl::flat_hash_map<uint64_t, Relay> relays_;
  std::vector<Timer> timers_;  // a min-heap
  uint64_t timer_order_ = 0;

  absl::flat_hash_map<std::string, Backoff> backoff_;
  // (peer, member) -> when we last sent the peer that member's record to
  // correct a stale suspicion (CorrectStaleAccusation).
  absl::flat_hash_map<std::pair<std::string, std::string>, int64_t>
      corrections_;
  std::vector<SeedState> seeds_;
  // Seq of a push-pull sent to a seed -> the seed's address.
  absl::flat_hash_map<uint64_t, std::string> seed_requests_;
  // Seqs of reconnection push-pulls to dead members.
  absl::flat_hash_set<uint64_t> reconnect_requests_;

  absl::Time next_probe_;
  absl::Time next_gossip_;
  absl::Time next_push_pull_;
  // The next push-pull is the sync soon after a join (join_sync_delay).
  bool join_sync_due_ = false;
  absl::Time next_reconnect_;
  absl::Time next_maintenance_;

  bool left_ = false;
  // The time of the call being handled (HandleMessage, Tick, ...).
  int64_t now_us_ = 0;
  std::vector<Outbound> outbox_;
  std::vector<MemberEvent> events_;
  MembershipStats stats_;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_MEMBERSHIP_H_
