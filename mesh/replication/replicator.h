// Replicator: gossip of the mesh's replicated objects, as an I/O-free state
// machine. It reads no clock, opens no socket and starts no thread; its
// randomness is a Prng seeded by the caller. Events go in (a change this
// node committed, a message from an authenticated peer, a tick, a new list
// of live members); messages and one wake-up time come out. Its only seam
// to the outside is the ReplicaLog (the local SQLite replica), which it
// reads and writes synchronously. The daemon drives it over mTLS gRPC; the
// simulation test drives the same code in virtual time.
// docs/replication.md describes the protocol.
//
// Driving it:
//
//   auto r = Replicator::Create(options, &log, now);
//   r->SetMembers(live, away, now);              // and on every change
//   loop:
//     after a local write commits:           r->OnLocalChange(change, now)
//     on a message from an authenticated peer: r->HandleMessage(peer, m, now)
//     when now >= r->NextDeadline():          r->Tick(now)
//     after any of them: send every r->TakeOutbox() entry, re-arm the timer
//
// Dissemination. Push: a new change goes at once to every live peer in a
// mesh of up to `direct_push_max`; in a larger one to `fanout` random live
// peers with a hop budget that grows with log(N), and a peer that had not
// seen it passes it on to `fanout` more with one hop less, so each change
// is gossiped a bounded number of times. Anti-entropy: every
// `anti_entropy_interval`, the fingerprint of this node's version vector
// goes to one random peer, which answers with its own when they match (so
// that each knows the other holds the same); a peer whose vector has
// another fingerprint starts the exchange: a digest (its version vector),
// answered with ours. Each side then streams to the other only the changes
// it lacks, in chunks of at most `max_chunk_bytes`, at most `window`
// unacknowledged per stream (backpressure) and at most `max_streams` streams
// at once. A peer behind the log's floor (changes compacted by GC) gets a
// full snapshot instead. Live pushes never queue behind a stream: a stream
// has at most `window` chunks out, and pushes are sent as they happen.
//
// Received changes that arrive ahead of a gap (seq not the next of their
// origin) wait in a bounded buffer until the gap fills, and the sender is
// asked for a digest exchange. Changes the store refuses (another node's
// object, a time too far ahead) are counted and dropped.
//
// A peer's refused changes are charged to it: an honest peer passes on only
// changes it checked, so changes whose origin did not sign them, another
// node's objects and malformed ones are a sender's doing, and each costs a
// signature check (or a certificate parse). Each spends a token of the
// peer's bucket (`refusal_burst`, refilled at `refusals_per_second`); once
// it is empty the rest of that peer's message is dropped unread, and so are
// its messages until a token is back (RESOURCE_EXHAUSTED,
// stats().messages_quarantined), while other peers carry on.
//
// A change whose origin this node has no certificate for (the log says
// UNAVAILABLE, with kUnknownOriginPayload) is refused for now, and the
// sender, which checked it, is asked for the certificates of the unknown
// origins in its message. Once the log takes one, a digest exchange with
// that sender brings the changes again.
//
// Thread-safety: none; the driver serialises calls (one strand). `log` is
// borrowed and must outlive the Replicator.
#ifndef MYCEL_MESH_REPLICATION_REPLICATOR_H_
#define MYCEL_MESH_REPLICATION_REPLICATOR_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/store/objects.h"
#include "mesh/membership/prng.h"
#include "mesh/membership/rate_limiter.h"
#include "mesh/replication/replica_log.h"
#include "mycel/v1/replication.pb.h"

namespace mycel::replication {

struct ReplicatorOptions {
  // This node, as membership names it.
  std::string name;
  // The origin of this node's changes (store::OriginNode): its name, or
  // NAME~KEYID for a node admitted under a revoked node's name. Empty:
  // `name`.
  std::string origin;
  // Peers a new change is pushed to, and hops it travels past the first:
  // at least `push_hops`, and at least ceil(log_fanout(N)) for N nodes
  // (4 at 50 nodes with a fanout of 3), so that a push alone can reach
  // every node. A node passes on only what was new to it, so a change
  // costs at most fanout messages per node.
  int fanout = 3;
  int push_hops = 2;
  // In a mesh of at most this many live peers, a new change goes to all of
  // them directly instead (N - 1 messages, against up to fanout * N for
  // gossip, which also leaves about e^-fanout of the nodes to
  // anti-entropy). 0: always gossip.
  size_t direct_push_max = 64;
  absl::Duration anti_entropy_interval = absl::Seconds(2);
  // After a gap, or a fingerprint that differs from ours, the soonest
  // another digest (with our vector) goes to the same peer.
  absl::Duration min_digest_gap = absl::Milliseconds(500);
  // A stream's chunk budget, its window of unacknowledged chunks, and how
  // many outgoing streams run at once.
  size_t max_chunk_bytes = 64 << 10;
  int window = 4;
  int max_streams = 4;
  // A stream with no acknowledgement for this long is dropped (the next
  // digest exchange starts over from what the peer holds).
  absl::Duration stream_timeout = absl::Seconds(5);
  // Garbage collection: how often, and the age after which tombstones and
  // log entries go even if a member has not seen them (the GC horizon).
  absl::Duration gc_interval = absl::Minutes(1);
  absl::Duration tombstone_max_age = absl::Hours(72);
  // How long membership keeps a member that is away before it forgets it
  // (its dead retention); until then the member's vector holds back GC.
  // A change this node missed can be collected only once it was away past
  // this or past tombstone_max_age, so the rows it holds that a resync
  // finds superseded and collected were written at least the lesser of
  // the two ago: a snapshot removes no younger row (whatever the sender's
  // vector claims).
  absl::Duration forgotten_after = absl::Hours(24);
  // Received changes waiting for a gap before them to fill: at most so
  // many, and so many bytes (ObjectStore::SizeOf), of which one sender may
  // hold a quarter; one that waited `pending_timeout` is dropped (the
  // anti-entropy exchange brings what it was waiting for).
  size_t max_pending = 16384;
  size_t max_pending_bytes = 64 << 20;
  absl::Duration pending_timeout = absl::Seconds(30);
  // Refused changes a peer may send before its messages are dropped, and
  // how fast that allowance comes back (see the top of this file).
  double refusal_burst = 32;
  double refusals_per_second = 1;
  // Publish this node's own changes only once the store says they are on
  // disk (OnDurable): pushes wait for it, and digests, streams and
  // snapshots show no more of this node's sequence than is durable. A
  // store that can lose its last commits (synchronous=NORMAL and a power
  // loss) would otherwise stamp their numbers again on other changes,
  // which peers that hold the first take as duplicates: replicas that
  // never converge. Off: a change is durable when committed (the
  // simulator, and synchronous=FULL).
  bool await_durable = false;
  // After it starts, this node's own writes are held (OwnWritesHeldUntil)
  // until a peer has said how many of this node's changes it holds and this
  // node holds as many, having taken back from peers those its database
  // lost (restored from an older copy, or a virtual machine's snapshot): a
  // write committed before that would stamp one of their sequence numbers
  // again, and peers that hold the first would take it as a duplicate.
  // Held for at most this long with no peer answering and no change taken
  // back, so that a node cut off from every peer still writes; zero:
  // never held. A node that knows no other member is not held.
  absl::Duration own_writes_hold = absl::ZeroDuration();
  uint64_t random_seed = 0;
};

struct Outbound {
  std::string to;
  v1::ReplicationMessage message;
};

// Counters a driver exports as metrics; tests assert on them.
struct ReplicatorStats {
  uint64_t pushes_sent = 0;
  uint64_t changes_received = 0;  // in pushes and chunks
  uint64_t changes_applied = 0;   // won their key
  uint64_t changes_lost = 0;      // new, but an older write than the key's
  uint64_t duplicates = 0;        // already held
  uint64_t changes_refused = 0;   // the store refused them
  uint64_t changes_buffered = 0;  // arrived ahead of a gap
  uint64_t pending_dropped = 0;   // the buffer, or the sender's share, full
  uint64_t pending_expired = 0;   // waited pending_timeout
  uint64_t digests_sent = 0;
  // Fingerprint digests that matched ours: nothing to exchange.
  uint64_t digests_in_sync = 0;
  uint64_t streams_started = 0;
  uint64_t snapshots_started = 0;
  uint64_t chunks_sent = 0;
  uint64_t changes_streamed = 0;   // changes sent in chunks
  uint64_t rows_streamed = 0;      // snapshot rows sent
  uint64_t resyncs_completed = 0;  // full snapshots received whole
  // Snapshot chunks of a new stream from a peer with kMaxSnapshotsPerPeer
  // open already: refused.
  uint64_t snapshots_refused = 0;
  uint64_t streams_timed_out = 0;
  uint64_t malformed = 0;
  // Messages whose sender authenticated under this node's own name (a node
  // that reached itself, or another that holds its certificate): refused.
  uint64_t from_self = 0;
  uint64_t store_errors = 0;
  // A peer's digest holds more of this node's own changes than it does:
  // its database lost commits (restored from an older copy, or a power
  // loss under synchronous=NORMAL), and its next writes reuse their
  // numbers. The driver logs it (at error level, at most every 10
  // minutes).
  uint64_t own_sequence_behind = 0;
  // Changes of this node taken back from peers (its database had lost
  // them), and holds of its writes that ended by running out of time
  // rather than by a peer's answer (ReplicatorOptions::own_writes_hold).
  uint64_t own_changes_taken_back = 0;
  uint64_t own_hold_expired = 0;
  uint64_t gc_tombstones = 0;
  uint64_t gc_log_changes = 0;
  // Own changes waiting for OnDurable that were dropped from the wait
  // (more than max_pending): anti-entropy sends them instead.
  uint64_t undurable_dropped = 0;
  // Origins whose certificate was asked of the sender of their changes;
  // certificates sent to peers that asked; certificates taken from an
  // answer, refused by the log, or sent without being asked (ignored).
  uint64_t certificates_asked = 0;
  uint64_t certificates_sent = 0;
  uint64_t certificates_taken = 0;
  uint64_t certificates_refused = 0;
  uint64_t certificates_unsolicited = 0;
  // Refused changes charged to their sender (see the top of this file);
  // messages of a peer dropped unread while its allowance was spent, and
  // the changes dropped unread with them.
  uint64_t refusals_charged = 0;
  uint64_t messages_quarantined = 0;
  uint64_t changes_quarantined = 0;
};

class Replicator {
 public:
  // INVALID_ARGUMENT for a bad option (names it); the log's error when it
  // cannot read the version vector.
  static absl::StatusOr<std::unique_ptr<Replicator>> Create(
      ReplicatorOptions options, ReplicaLog* log, absl::Time now);

  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // --- Events in ---

  // The live members, which pushes and digests go to, and the members
  // away (suspect, or dead but not yet forgotten by membership), which get
  // nothing but whose vectors still hold back garbage collection until the
  // age horizon, so that a node back from a short outage catches up from
  // the log rather than by a full resync. This node may be listed; it is
  // ignored. Streams to nodes no longer live stop.
  void SetMembers(std::vector<std::string> live, std::vector<std::string> away,
                  absl::Time now);

  // A change this node committed (ObjectStore::Write): pushed at once, or
  // with await_durable once OnDurable covers it.
  void OnLocalChange(const store::ObjectChange& change, absl::Time now);

  // With await_durable: this node's changes up to `seq` are on disk
  // (store::Store::durable_seq). Until the first call none is published.
  void OnDurable(int64_t seq, absl::Time now);

  // A message from `peer`, the name the transport authenticated. Returns
  // the first problem (a malformed message, a change the store refused),
  // for the driver to log; the rest of the message is still used. A
  // message under this node's own name is refused whole
  // (PERMISSION_DENIED): answering it would be talking to itself, or to
  // another node with its certificate.
  absl::Status HandleMessage(absl::string_view peer,
                             const v1::ReplicationMessage& message,
                             absl::Time now);

  // Runs what is due at `now` (anti-entropy, GC, stream timeouts). Calling
  // early is harmless.
  void Tick(absl::Time now);

  // --- Out ---

  absl::Time NextDeadline() const;
  std::vector<Outbound> TakeOutbox();

  // --- Queries ---

  // While this node's own writes must wait (ReplicatorOptions::
  // own_writes_hold): until when at most, as things stand (it moves on as
  // changes are taken back, and ends early once a peer has answered).
  // InfinitePast once they may go on.
  absl::Time OwnWritesHeldUntil() const {
    return holding_ ? hold_deadline_ : absl::InfinitePast();
  }

  // This node's version vector, as last read or advanced.
  const store::VersionVector& versions() const { return held_; }
  // The origin of this node's changes (ReplicatorOptions::origin).
  const std::string& origin() const { return options_.origin; }
  // ReplicaLog::OriginRefused.
  bool OriginRefused(absl::string_view origin) const {
    return log_->OriginRefused(origin);
  }
  // The same on every node for the same vector.
  static uint64_t Fingerprint(const store::VersionVector& v);
  // Each peer's vector, from its last digest: how far behind it is.
  const std::map<std::string, store::VersionVector, std::less<>>&
  peer_versions() const {
    return peer_versions_;
  }
  // What every member, live or away, holds (the minimum of their vectors
  // and ours); empty while some member's vector is unknown.
  store::VersionVector SeenByAll() const;
  size_t pending() const { return pending_.size(); }
  size_t pending_bytes() const { return pending_bytes_; }
  size_t outgoing_streams() const { return streams_.size(); }
  const ReplicatorStats& stats() const { return stats_; }
  // Whether `peer` spent its allowance of refused changes: its messages are
  // dropped unread until a token is back.
  bool Quarantined(absl::string_view peer, absl::Time now) const {
    return refusals_.Exhausted(peer, now);
  }
  const ReplicatorOptions& options() const { return options_; }

 private:
  // A stream this node sends, answering a peer's digest.
  struct OutStream {
    uint64_t id = 0;
    std::string peer;
    bool snapshot = false;
    // Changes: per origin, the last seq sent; those with more to send.
    std::map<std::string, int64_t> cursors;
    std::set<std::string> targets;
    // Snapshot: the last (namespace, key) sent.
    std::pair<std::string, std::string> after;
    bool done_reading = false;
    uint64_t next_index = 0;
    std::set<uint64_t> unacked;
    absl::Time last_progress;
    // Its next chunk waits for OnDurable (FillSnapshot's kWait).
    bool waiting_durable = false;
  };
  // A snapshot this node receives.
  struct InSnapshot {
    store::VersionVector base;                // from chunk 0
    std::vector<store::ObjectChange> proofs;  // of `base`, from chunk 0
    bool have_base = false;
    std::set<uint64_t> received;
    int64_t last_index = -1;  // known once the last chunk arrived
    absl::Time last_progress;
  };
  // A received change ahead of a gap, with its sender.
  struct Pending {
    store::ObjectChange change;
    std::string sender;
    absl::Time since;
    size_t bytes = 0;
  };
  using PendingMap = std::map<std::pair<std::string, int64_t>, Pending>;

  Replicator(ReplicatorOptions options, ReplicaLog* log, absl::Time now);

  absl::Status HandlePush(absl::string_view peer,
                          const v1::ReplicationPush& push, absl::Time now);
  absl::Status HandleDigest(absl::string_view peer,
                            const v1::ReplicationDigest& digest,
                            absl::Time now);
  absl::Status HandleChunk(absl::string_view peer,
                           const v1::ReplicationChunk& chunk, absl::Time now);
  void HandleAck(absl::string_view peer, const v1::ReplicationAck& ack,
                 absl::Time now);
  absl::Status HandleCertificateRequest(
      absl::string_view peer, const v1::ReplicationCertificateRequest& request);
  absl::Status HandleCertificates(absl::string_view peer,
                                  const v1::ReplicationCertificates& answer,
                                  absl::Time now);
  // After `message` from `peer` met an origin with no certificate here:
  // asks `peer` for the certificates of the message's unknown origins that
  // were not asked of it within min_digest_gap.
  void AskCertificates(absl::string_view peer,
                       const v1::ReplicationMessage& message, absl::Time now);
  // Charges `s`, the log's refusal of a change from `peer`, to the peer
  // when it is the sender's doing (PERMISSION_DENIED, INVALID_ARGUMENT).
  void ChargeRefusal(absl::string_view peer, const absl::Status& s,
                     absl::Time now);
  void ChargeRefusals(absl::string_view peer, size_t n, absl::Time now);
  // Whether `s` is the log's UNAVAILABLE for an origin with no certificate;
  // if so, notes the origin for AskCertificates.
  bool NoteUnknownOrigin(const absl::Status& s);

  // Applies one received change (or buffers it behind a gap); appends to
  // `fresh` every change it newly applied, including buffered ones it
  // unblocked.
  // Receive for each of a message's changes, while the peer's allowance of
  // refusals lasts (the rest are dropped unread); the first error.
  absl::Status ReceiveAll(
      absl::string_view peer,
      const google::protobuf::RepeatedPtrField<v1::ReplicationChange>& changes,
      absl::Time now, std::vector<store::ObjectChange>* fresh);
  absl::Status Receive(absl::string_view peer, store::ObjectChange change,
                       absl::Time now, std::vector<store::ObjectChange>* fresh);
  absl::Status ApplyOne(absl::string_view peer,
                        const store::ObjectChange& change, absl::Time now);
  // Ends the hold of this node's writes once a peer has answered and this
  // node holds as much of its own as any peer said, or at its deadline.
  void UpdateHold(absl::Time now);
  // While held and unanswered: a digest asking for theirs to a few live
  // peers.
  void AskOwnSequence(absl::Time now);
  void DrainPending(absl::string_view origin, absl::Time now,
                    std::vector<store::ObjectChange>* fresh);
  // Buffers `change` from `peer` behind its gap, within the limits
  // (ReplicatorOptions::max_pending); false when it was dropped.
  bool AddPending(absl::string_view peer, store::ObjectChange change,
                  absl::Time now);
  PendingMap::iterator ErasePending(PendingMap::iterator it);
  absl::Status ReloadVersions();
  // held_ = `held`, this node's own entry no further than durable_.
  void TakeVersions(store::VersionVector held);
  // A peer has said what it holds of this node's changes, and this node
  // holds as much of its own as any peer said.
  bool OwnCaughtUp() const {
    return own_answered_ && store::SeqAt(held_, options_.origin) >= own_wanted_;
  }

  void SendDigest(const std::string& peer, bool reply, absl::Time now);
  // The periodic digest: the fingerprint of our vector only; `reply` asks
  // the peer for its own when they match.
  void SendFingerprint(const std::string& peer, bool reply);
  // Whether a digest with our vector may go to `peer` now: none went to it
  // within min_digest_gap.
  bool DigestDue(absl::string_view peer, absl::Time now) const;
  void StartStream(const std::string& peer, const store::VersionVector& theirs,
                   absl::Time now);
  void Pump(OutStream& s, absl::Time now);
  enum class Fill { kSent, kWait, kError };
  Fill FillChanges(OutStream& s, v1::ReplicationChunk* chunk);
  // kWait: the chunk would show a change of this node not yet durable.
  Fill FillSnapshot(OutStream& s, v1::ReplicationChunk* chunk);
  // Whether this node's change `seq` may be published (await_durable).
  bool Published(const store::ChangeStamp& stamp) const {
    return stamp.origin != options_.origin || stamp.seq <= durable_;
  }

  // Pushes changes of this node (now published) as a new change is.
  void PushOwn(const std::vector<store::ObjectChange>& changes);
  // Sends `changes` to `width` random live peers (0: fanout) but `except`,
  // each allowed to pass them on `hops` more times.
  void Push(const std::vector<store::ObjectChange>& changes, int hops,
            absl::string_view except, size_t width = 0);
  // The hop budget of a new change (see ReplicatorOptions::push_hops).
  int PushHops() const;
  std::vector<std::string> RandomPeers(int k, absl::string_view except_a,
                                       absl::string_view except_b);
  void Send(std::string to, v1::ReplicationMessage message);
  void CollectGarbage(absl::Time now);

  const ReplicatorOptions options_;
  ReplicaLog* const log_;
  membership::Prng prng_;
  std::vector<std::string> members_;  // live, sorted, without this node
  std::vector<std::string> away_;
  // What this node holds and shows peers; its own entry no more than
  // durable_.
  store::VersionVector held_;
  // With await_durable: the last own seq durable, and the own changes
  // committed after it, in order, waiting to be pushed.
  int64_t durable_ = 0;
  std::deque<store::ObjectChange> undurable_;
  // ReplicatorOptions::own_writes_hold: whether this node's writes wait,
  // until when, whether a peer has told what it holds of them, and the
  // most any peer said it holds.
  bool holding_ = false;
  absl::Time hold_deadline_ = absl::InfinitePast();
  bool own_answered_ = false;
  int64_t own_wanted_ = 0;
  // While held: when to ask again (AskOwnSequence).
  absl::Time next_ask_ = absl::InfinitePast();
  std::map<std::string, store::VersionVector, std::less<>> peer_versions_;
  std::map<std::string, absl::Time, std::less<>> last_digest_to_;
  // Received changes ahead of a gap, by (origin, seq), with their sender;
  // their bytes in all and by sender.
  PendingMap pending_;
  size_t pending_bytes_ = 0;
  struct Share {
    size_t count = 0;
    size_t bytes = 0;
  };
  std::map<std::string, Share, std::less<>> pending_by_sender_;
  std::map<uint64_t, OutStream> streams_;
  std::map<std::pair<std::string, uint64_t>, InSnapshot> snapshots_;
  // (peer, origin) -> when the origin's certificate was asked of the peer.
  std::map<std::pair<std::string, std::string>, absl::Time> asked_;
  // The origins with no certificate that the message being handled met.
  std::set<std::string> unknown_origins_;
  membership::PeerRateLimiter refusals_;
  absl::Time next_anti_entropy_;
  absl::Time next_gc_;
  std::vector<Outbound> outbox_;
  ReplicatorStats stats_;
};

}  // namespace mycel::replication

#endif  // MYCEL_MESH_REPLICATION_REPLICATOR_H_
