#include "mesh/replication/replicator.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mesh/replication/codec.h"
#include "runtime/status.h"

namespace mycel::replication {
namespace {

void Keep(absl::Status* first, absl::Status s) {
  if (first->ok() && !s.ok()) *first = std::move(s);
}

// Origins in one certificate request, and certificates in one answer.
constexpr int kMaxCertificatesPerMessage = 64;
// Snapshots received from one peer at once (an honest one sends one).
constexpr int kMaxSnapshotsPerPeer = 2;

}  // namespace

absl::StatusOr<std::unique_ptr<Replicator>> Replicator::Create(
    ReplicatorOptions options, ReplicaLog* log, absl::Time now) {
  auto invalid = [](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (options.name.empty()) return invalid("name", "empty");
  if (options.origin.empty()) options.origin = options.name;
  if (store::OriginNode(options.origin) != options.name) {
    return invalid("origin",
                   absl::StrCat("\"", options.origin,
                                "\" is not an origin of node ", options.name));
  }
  if (options.fanout < 1) return invalid("fanout", "must be at least 1");
  if (options.push_hops < 0) return invalid("push_hops", "must not be < 0");
  if (options.direct_push_max > 100000) {
    return invalid("direct_push_max", "must not be > 100000");
  }
  if (options.anti_entropy_interval <= absl::ZeroDuration()) {
    return invalid("anti_entropy_interval", "must be positive");
  }
  if (options.max_chunk_bytes == 0) {
    return invalid("max_chunk_bytes", "must be positive");
  }
  if (options.window < 1) return invalid("window", "must be at least 1");
  if (options.max_streams < 1) {
    return invalid("max_streams", "must be at least 1");
  }
  if (options.stream_timeout <= absl::ZeroDuration()) {
    return invalid("stream_timeout", "must be positive");
  }
  if (options.gc_interval <= absl::ZeroDuration()) {
    return invalid("gc_interval", "must be positive");
  }
  if (options.tombstone_max_age <= absl::ZeroDuration()) {
    return invalid("tombstone_max_age", "must be positive");
  }
  if (options.forgotten_after <= absl::ZeroDuration()) {
    return invalid("forgotten_after", "must be positive");
  }
  if (options.max_pending_bytes == 0) {
    return invalid("max_pending_bytes", "must be positive");
  }
  if (options.pending_timeout <= absl::ZeroDuration()) {
    return invalid("pending_timeout", "must be positive");
  }
  if (options.own_writes_hold < absl::ZeroDuration()) {
    return invalid("own_writes_hold", "must not be negative");
  }
  if (!(options.refusal_burst >= 1)) {
    return invalid("refusal_burst", "must be at least 1");
  }
  if (!(options.refusals_per_second > 0)) {
    return invalid("refusals_per_second", "must be positive");
  }
  if (log == nullptr) return invalid("log", "null");
  std::unique_ptr<Replicator> r(new Replicator(std::move(options), log, now));
  RETURN_IF_ERROR(r->ReloadVersions());
  return r;
}

Replicator::Replicator(ReplicatorOptions options, ReplicaLog* log,
                       absl::Time now)
    : options_(std::move(options)),
      log_(log),
      prng_(options_.random_seed),
      refusals_(options_.refusals_per_second, options_.refusal_burst) {
  if (!options_.await_durable) durable_ = INT64_MAX;
  // Nodes started together spread their rounds over the interval.
  const int64_t interval_us =
      absl::ToInt64Microseconds(options_.anti_entropy_interval);
  next_anti_entropy_ =
      now +
      absl::Microseconds(prng_.Uniform(std::max<int64_t>(interval_us, 1)));
  next_gc_ = now + options_.gc_interval;
  if (options_.own_writes_hold > absl::ZeroDuration()) {
    holding_ = true;
    hold_deadline_ = now + options_.own_writes_hold;
  }
}

void Replicator::UpdateHold(absl::Time now) {
  if (!holding_) return;
  if (OwnCaughtUp()) {
    holding_ = false;
  } else if (now >= hold_deadline_) {
    holding_ = false;
    ++stats_.own_hold_expired;
  }
}

void Replicator::AskOwnSequence(absl::Time now) {
  // Asked until a peer answers, and again (at most every min_digest_gap)
  // while what it said this node lacks has not all come: each digest makes
  // the peer stream what this node lacks.
  if (!holding_ || OwnCaughtUp()) {
    return;
  }
  next_ask_ = now + options_.min_digest_gap;
  int asked = 0;
  for (const std::string& peer : members_) {
    if (asked >= options_.fanout) break;
    if (!DigestDue(peer, now)) continue;
    SendDigest(peer, /*reply=*/true, now);
    ++asked;
  }
}

absl::Status Replicator::ReloadVersions() {
  ASSIGN_OR_RETURN(store::VersionVector held, log_->Versions());
  TakeVersions(std::move(held));
  return absl::OkStatus();
}

void Replicator::TakeVersions(store::VersionVector held) {
  held_ = std::move(held);
  auto own = held_.find(options_.origin);
  if (own != held_.end() && own->second > durable_) {
    if (durable_ == 0) {
      held_.erase(own);
    } else {
      own->second = durable_;
    }
  }
}

void Replicator::SetMembers(std::vector<std::string> live,
                            std::vector<std::string> away, absl::Time now) {
  for (std::vector<std::string>* v : {&live, &away}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
    v->erase(std::remove(v->begin(), v->end(), options_.name), v->end());
  }
  members_ = std::move(live);
  away_ = std::move(away);
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (std::binary_search(members_.begin(), members_.end(), it->second.peer)) {
      ++it;
    } else {
      it = streams_.erase(it);
    }
  }
  // Nobody else to hold changes of this node: its writes go on.
  if (members_.empty() && away_.empty()) own_answered_ = true;
  UpdateHold(now);
  AskOwnSequence(now);
}

void Replicator::OnLocalChange(const store::ObjectChange& change,
                               absl::Time now) {
  if (!Published(change.stamp)) {
    if (undurable_.size() >= options_.max_pending) {
      undurable_.pop_front();
      ++stats_.undurable_dropped;
    }
    undurable_.push_back(change);
    return;
  }
  PushOwn({change});
}

void Replicator::PushOwn(const std::vector<store::ObjectChange>& changes) {
  for (const store::ObjectChange& c : changes) {
    int64_t& held = held_[c.stamp.origin];
    held = std::max(held, c.stamp.seq);
  }
  if (members_.size() <= options_.direct_push_max) {
    // Every live member at once, with no hops: N - 1 messages, fewer than
    // gossip's up to fanout * N, and no node left to anti-entropy.
    Push(changes, 0, "", members_.size());
    return;
  }
  Push(changes, PushHops(), "");
}

void Replicator::OnDurable(int64_t seq, absl::Time now) {
  if (!options_.await_durable || seq <= durable_) return;
  durable_ = seq;
  // What waited goes out in pushes of at most max_chunk_bytes (a message
  // past the transport's limit would be dropped whole).
  std::vector<store::ObjectChange> batch;
  size_t bytes = 0;
  size_t taken = 0;
  for (; taken < undurable_.size() && Published(undurable_[taken].stamp);
       ++taken) {
    store::ObjectChange& c = undurable_[taken];
    const size_t size = c.ns.size() + c.key.size() +
                        (c.value.has_value() ? c.value->size() : 0) +
                        c.stamp.signature.size() + 64;
    if (!batch.empty() && bytes + size > options_.max_chunk_bytes) {
      PushOwn(batch);
      batch.clear();
      bytes = 0;
    }
    bytes += size;
    batch.push_back(std::move(c));
  }
  if (!batch.empty()) PushOwn(batch);
  undurable_.erase(undurable_.begin(), undurable_.begin() + taken);
  // Whatever was not pushed (dropped from the wait, or committed before
  // this replicator started) is now shown to digests; and snapshots that
  // waited go on.
  int64_t& held = held_[options_.origin];
  held = std::max(held, seq);
  for (auto& [id, s] : streams_) {
    if (s.waiting_durable) {
      s.waiting_durable = false;
      Pump(s, now);
    }
  }
}

int Replicator::PushHops() const {
  // A push reaches at most fanout^(hops + 1) nodes (fewer, as pushes meet
  // nodes that already hold the change), so hops >= log_fanout(N) leaves a
  // hop of slack for that overlap; anti-entropy repairs the rest.
  const double n = static_cast<double>(members_.size() + 1);
  int needed = 1;
  if (options_.fanout > 1) {
    needed =
        static_cast<int>(std::ceil(std::log(n) / std::log(options_.fanout)));
  }
  return std::max(options_.push_hops, needed);
}

absl::Status Replicator::HandleMessage(absl::string_view peer,
                                       const v1::ReplicationMessage& message,
                                       absl::Time now) {
  if (peer == options_.name) {
    ++stats_.from_self;
    return absl::PermissionDeniedError(absl::StrCat(
        "a replication message from ", peer,
        ", this node's own name: it reached itself, or another node holds "
        "its certificate"));
  }
  if (Quarantined(peer, now)) {
    ++stats_.messages_quarantined;
    return absl::ResourceExhaustedError(absl::StrCat(
        "replication: ", peer,
        " sent too many changes this node refused; its messages are dropped "
        "for now"));
  }
  unknown_origins_.clear();
  absl::Status s;
  switch (message.body_case()) {
    case v1::ReplicationMessage::kPush:
      s = HandlePush(peer, message.push(), now);
      if (!unknown_origins_.empty()) AskCertificates(peer, message, now);
      return s;
    case v1::ReplicationMessage::kDigest:
      return HandleDigest(peer, message.digest(), now);
    case v1::ReplicationMessage::kChunk:
      s = HandleChunk(peer, message.chunk(), now);
      if (!unknown_origins_.empty()) AskCertificates(peer, message, now);
      return s;
    case v1::ReplicationMessage::kAck:
      HandleAck(peer, message.ack(), now);
      return absl::OkStatus();
    case v1::ReplicationMessage::kCertificateRequest:
      return HandleCertificateRequest(peer, message.certificate_request());
    case v1::ReplicationMessage::kCertificates:
      return HandleCertificates(peer, message.certificates(), now);
    case v1::ReplicationMessage::BODY_NOT_SET:
      break;
  }
  ++stats_.malformed;
  return absl::InvalidArgumentError(
      absl::StrCat("body: a replication message from ", peer, " has none"));
}

absl::Status Replicator::HandlePush(absl::string_view peer,
                                    const v1::ReplicationPush& push,
                                    absl::Time now) {
  std::vector<store::ObjectChange> fresh;
  absl::Status first = ReceiveAll(peer, push.changes(), now, &fresh);
  // A sender cannot make a change travel further than this node would.
  const int hops = std::min(static_cast<int>(push.hops()), PushHops() + 1);
  if (hops > 0) Push(fresh, hops - 1, peer);
  return first;
}

absl::Status Replicator::ReceiveAll(
    absl::string_view peer,
    const google::protobuf::RepeatedPtrField<v1::ReplicationChange>& changes,
    absl::Time now, std::vector<store::ObjectChange>* fresh) {
  absl::Status first;
  for (int i = 0; i < changes.size(); ++i) {
    if (Quarantined(peer, now)) {
      stats_.changes_quarantined += changes.size() - i;
      Keep(&first, absl::ResourceExhaustedError(absl::StrCat(
                       "replication: ", peer,
                       " sent too many changes this node refused; the rest "
                       "of its message is dropped")));
      break;
    }
    absl::StatusOr<store::ObjectChange> c = FromProto(changes[i]);
    if (!c.ok()) {
      ++stats_.malformed;
      ChargeRefusal(peer, c.status(), now);
      Keep(&first, c.status());
      continue;
    }
    absl::Status s = Receive(peer, *std::move(c), now, fresh);
    ChargeRefusal(peer, s, now);
    Keep(&first, s);
  }
  return first;
}

void Replicator::ChargeRefusal(absl::string_view peer, const absl::Status& s,
                               absl::Time now) {
  // A change of an origin revoked since the peer took it: not its doing.
  if (s.GetPayload(store::kRefusedOriginPayload).has_value()) return;
  if (absl::IsPermissionDenied(s) || absl::IsInvalidArgument(s)) {
    ChargeRefusals(peer, 1, now);
  }
}

void Replicator::ChargeRefusals(absl::string_view peer, size_t n,
                                absl::Time now) {
  stats_.refusals_charged += n;
  for (size_t i = 0; i < n && refusals_.Allow(peer, now); ++i) {
  }
}

absl::Status Replicator::Receive(absl::string_view peer,
                                 store::ObjectChange change, absl::Time now,
                                 std::vector<store::ObjectChange>* fresh) {
  ++stats_.changes_received;
  const int64_t held = store::SeqAt(held_, change.stamp.origin);
  if (change.stamp.seq <= held) {
    ++stats_.duplicates;
    return absl::OkStatus();
  }
  if (change.stamp.seq > held + 1) {
    // Ahead of a gap: keep it until the ones before arrive, and ask the
    // sender, which holds them, for a digest exchange.
    AddPending(peer, std::move(change), now);
    if (DigestDue(peer, now))
      SendDigest(std::string(peer), /*reply=*/true, now);
    return absl::OkStatus();
  }
  absl::Status s = ApplyOne(peer, change, now);
  if (!s.ok()) return s;
  const std::string origin = change.stamp.origin;
  fresh->push_back(std::move(change));
  DrainPending(origin, now, fresh);
  return absl::OkStatus();
}

bool Replicator::AddPending(absl::string_view peer, store::ObjectChange change,
                            absl::Time now) {
  const size_t bytes = store::ObjectStore::SizeOf(change);
  Share& mine = pending_by_sender_[std::string(peer)];
  // A quarter of the buffer each: one sender (a member sending changes far
  // ahead of any gap that will fill) cannot crowd out the others.
  if (pending_.size() >= options_.max_pending ||
      pending_bytes_ + bytes > options_.max_pending_bytes ||
      mine.count >= std::max<size_t>(1, options_.max_pending / 4) ||
      mine.bytes + bytes > options_.max_pending_bytes / 4) {
    if (mine.count == 0) pending_by_sender_.erase(std::string(peer));
    ++stats_.pending_dropped;
    return false;
  }
  auto key = std::make_pair(change.stamp.origin, change.stamp.seq);
  auto [it, inserted] = pending_.try_emplace(
      std::move(key),
      Pending{std::move(change), std::string(peer), now, bytes});
  if (!inserted) {
    if (mine.count == 0) pending_by_sender_.erase(std::string(peer));
    return false;
  }
  ++mine.count;
  mine.bytes += bytes;
  pending_bytes_ += bytes;
  ++stats_.changes_buffered;
  return true;
}

Replicator::PendingMap::iterator Replicator::ErasePending(
    PendingMap::iterator it) {
  auto share = pending_by_sender_.find(it->second.sender);
  if (share != pending_by_sender_.end()) {
    --share->second.count;
    share->second.bytes -= it->second.bytes;
    if (share->second.count == 0) pending_by_sender_.erase(share);
  }
  pending_bytes_ -= it->second.bytes;
  return pending_.erase(it);
}

absl::Status Replicator::ApplyOne(absl::string_view peer,
                                  const store::ObjectChange& change,
                                  absl::Time now) {
  absl::StatusOr<store::ApplyResult> r = log_->Apply(change, peer);
  if (!r.ok()) {
    ++stats_.changes_refused;
    NoteUnknownOrigin(r.status());
    return r.status();
  }
  int64_t& held = held_[change.stamp.origin];
  held = std::max(held, change.stamp.seq);
  if (change.stamp.origin == options_.origin &&
      *r != store::ApplyResult::kDuplicate) {
    // A change of this node that its database had lost: a peer holds it,
    // so it may be shown and sent on like any published one.
    ++stats_.own_changes_taken_back;
    durable_ = std::max(durable_, change.stamp.seq);
    if (holding_) hold_deadline_ = now + options_.own_writes_hold;
    UpdateHold(now);
  }
  switch (*r) {
    case store::ApplyResult::kApplied:
      ++stats_.changes_applied;
      break;
    case store::ApplyResult::kLost:
      ++stats_.changes_lost;
      break;
    case store::ApplyResult::kDuplicate:
      ++stats_.duplicates;
      break;
  }
  return absl::OkStatus();
}

void Replicator::DrainPending(absl::string_view origin, absl::Time now,
                              std::vector<store::ObjectChange>* fresh) {
  const std::string o(origin);
  for (;;) {
    const int64_t held = store::SeqAt(held_, o);
    // Drop what is held already (it came another way).
    for (auto it = pending_.lower_bound({o, 0}); it != pending_.end() &&
                                                 it->first.first == o &&
                                                 it->first.second <= held;) {
      it = ErasePending(it);
    }
    auto it = pending_.find({o, held + 1});
    if (it == pending_.end()) return;
    // ErasePending reads the sender (its share) and the bytes: copied first.
    const std::string sender = it->second.sender;
    store::ObjectChange change = std::move(it->second.change);
    ErasePending(it);
    if (absl::Status s = ApplyOne(sender, change, now); !s.ok()) {
      ChargeRefusal(sender, s, now);
      return;
    }
    fresh->push_back(std::move(change));
  }
}

absl::Status Replicator::HandleDigest(absl::string_view peer,
                                      const v1::ReplicationDigest& digest,
                                      absl::Time now) {
  if (digest.by_fingerprint()) {
    if (digest.versions_size() > 0) {
      ++stats_.malformed;
      return absl::InvalidArgumentError(
          "digest: a fingerprint comes without versions");
    }
    const std::string p(peer);
    if (digest.fingerprint() == Fingerprint(held_)) {
      // It holds what we hold; asked, we say the same back, so that its
      // view of us (how far behind we are) is as fresh as ours of it.
      ++stats_.digests_in_sync;
      peer_versions_[p] = held_;
      own_answered_ = true;  // it holds what this node holds
      UpdateHold(now);
      if (digest.reply()) SendFingerprint(p, /*reply=*/false);
      return absl::OkStatus();
    }
    // Different: the full exchange, started by us, at most once per
    // min_digest_gap per peer (8 bytes asking for a whole vector must not
    // become a way to make us send vectors at will). An answer that differs
    // means a change arrived in between; pushes and the next round see to
    // it.
    if (digest.reply() && DigestDue(p, now)) {
      SendDigest(p, /*reply=*/true, now);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<store::VersionVector> theirs = FromProto(digest.versions());
  if (!theirs.ok()) {
    ++stats_.malformed;
    return theirs.status();
  }
  const int64_t own = store::SeqAt(*theirs, options_.origin);
  if (own > store::SeqAt(held_, options_.origin)) ++stats_.own_sequence_behind;
  if (holding_) {
    // The changes of this node that it holds come in its stream.
    own_answered_ = true;
    own_wanted_ = std::max(own_wanted_, own);
    UpdateHold(now);
  }
  // Only the origins this node holds (and its own) are ever read from a
  // peer's vector: what to stream to it, what it has seen for GC, its lag.
  // The rest are not kept, so that a peer's vector costs no more memory
  // than ours, whatever it claims.
  for (auto it = theirs->begin(); it != theirs->end();) {
    if (it->first != options_.origin && !held_.contains(it->first)) {
      it = theirs->erase(it);
    } else {
      ++it;
    }
  }
  const std::string p(peer);
  peer_versions_[p] = *theirs;
  if (digest.reply()) SendDigest(p, /*reply=*/false, now);
  StartStream(p, *theirs, now);
  return absl::OkStatus();
}

uint64_t Replicator::Fingerprint(const store::VersionVector& v) {
  // FNV-1a over each (origin, seq) in the map's order, which is the same on
  // every node; lengths keep ("ab", 1) apart from ("a", ...). Not a defence
  // against a peer (a peer can lie with a full vector too): an equality
  // check between honest replicas.
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](uint64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= (x >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(v.size());
  for (const auto& [origin, seq] : v) {
    mix(origin.size());
    for (unsigned char c : origin) {
      h ^= c;
      h *= 1099511628211ull;
    }
    mix(static_cast<uint64_t>(seq));
  }
  return h;
}

void Replicator::SendFingerprint(const std::string& peer, bool reply) {
  v1::ReplicationMessage m;
  m.mutable_digest()->set_fingerprint(Fingerprint(held_));
  m.mutable_digest()->set_by_fingerprint(true);
  m.mutable_digest()->set_reply(reply);
  ++stats_.digests_sent;
  Send(peer, std::move(m));
}

bool Replicator::DigestDue(absl::string_view peer, absl::Time now) const {
  auto last = last_digest_to_.find(peer);
  return last == last_digest_to_.end() ||
         now - last->second >= options_.min_digest_gap;
}

void Replicator::SendDigest(const std::string& peer, bool reply,
                            absl::Time now) {
  v1::ReplicationMessage m;
  ToProto(held_, m.mutable_digest()->mutable_versions());
  m.mutable_digest()->set_reply(reply);
  last_digest_to_[peer] = now;
  ++stats_.digests_sent;
  Send(peer, std::move(m));
}

void Replicator::StartStream(const std::string& peer,
                             const store::VersionVector& theirs,
                             absl::Time now) {
  for (auto it = streams_.begin(); it != streams_.end(); ++it) {
    if (it->second.peer != peer) continue;
    // One at a time; it sends the news too. But a stream the peer has not
    // acknowledged for min_digest_gap is one it lost (it restarted, and
    // its digest says what it holds now): it starts over from there.
    if (now - it->second.last_progress < options_.min_digest_gap) return;
    ++stats_.streams_timed_out;
    streams_.erase(it);
    break;
  }
  std::set<std::string> lacking;
  for (const auto& [origin, seq] : held_) {
    // Not what every node refuses now (a revoked origin's).
    if (seq > store::SeqAt(theirs, origin) && !log_->OriginRefused(origin)) {
      lacking.insert(origin);
    }
  }
  if (lacking.empty()) return;
  if (streams_.size() >= static_cast<size_t>(options_.max_streams)) return;
  absl::StatusOr<store::VersionVector> floors = log_->Floors();
  if (!floors.ok()) {
    ++stats_.store_errors;
    return;
  }
  OutStream s;
  do {
    s.id = prng_.Next();
  } while (s.id == 0 || streams_.contains(s.id));
  s.peer = peer;
  s.last_progress = now;
  for (const std::string& origin : lacking) {
    // Part of what it lacks is no longer in the log: only a snapshot
    // brings it up to date without resurrecting collected deletes.
    if (store::SeqAt(theirs, origin) < store::SeqAt(*floors, origin))
      s.snapshot = true;
    s.cursors[origin] = store::SeqAt(theirs, origin);
  }
  if (s.snapshot) {
    s.cursors.clear();
    ++stats_.snapshots_started;
  } else {
    s.targets = lacking;
    ++stats_.streams_started;
  }
  const uint64_t id = s.id;
  streams_.emplace(id, std::move(s));
  Pump(streams_.at(id), now);
}

void Replicator::Pump(OutStream& s, absl::Time now) {
  while (!s.done_reading &&
         s.unacked.size() < static_cast<size_t>(options_.window)) {
    v1::ReplicationMessage m;
    v1::ReplicationChunk* chunk = m.mutable_chunk();
    chunk->set_stream(s.id);
    chunk->set_index(s.next_index);
    const Fill fill =
        s.snapshot ? FillSnapshot(s, chunk) : FillChanges(s, chunk);
    if (fill == Fill::kWait) {
      s.waiting_durable = true;
      break;
    }
    if (fill == Fill::kError) {
      // The store failed: stop; the receiver drops a stream that goes
      // quiet, and the next digest exchange starts again.
      ++stats_.store_errors;
      s.done_reading = true;
      break;
    }
    s.unacked.insert(s.next_index++);
    ++stats_.chunks_sent;
    Send(s.peer, std::move(m));
  }
}

Replicator::Fill Replicator::FillChanges(OutStream& s,
                                         v1::ReplicationChunk* chunk) {
  size_t used = 0;
  const std::vector<std::string> targets(s.targets.begin(), s.targets.end());
  for (const std::string& origin : targets) {
    if (used >= options_.max_chunk_bytes) break;
    absl::StatusOr<store::ChangeBatch> batch = log_->ReadChanges(
        origin, s.cursors[origin], options_.max_chunk_bytes - used);
    if (!batch.ok()) return Fill::kError;
    bool more = batch->more;
    for (const store::ObjectChange& c : batch->changes) {
      // This node's changes not yet durable go by push once they are.
      if (!Published(c.stamp)) {
        more = false;
        break;
      }
      *chunk->add_changes() = ToProto(c);
      s.cursors[origin] = c.stamp.seq;
      ++stats_.changes_streamed;
    }
    used += batch->bytes;
    if (!more) s.targets.erase(origin);
  }
  if (s.targets.empty()) {
    s.done_reading = true;
    chunk->set_last(true);
  }
  return Fill::kSent;
}

Replicator::Fill Replicator::FillSnapshot(OutStream& s,
                                          v1::ReplicationChunk* chunk) {
  absl::StatusOr<store::SnapshotChunk> snap =
      log_->ReadSnapshot(s.after, options_.max_chunk_bytes);
  if (!snap.ok()) return Fill::kError;
  // A row written by a change of this node not yet durable cannot be left
  // out (the receiver would drop its own copy of the key, which a power
  // loss here could leave only on this node) nor sent: the chunk waits.
  // So does a first chunk whose vector (the receiver's base) covers such a
  // change.
  if ((s.next_index == 0 &&
       store::SeqAt(snap->versions, options_.origin) > durable_) ||
      std::any_of(
          snap->rows.begin(), snap->rows.end(),
          [&](const store::Object& o) { return !Published(o.stamp); })) {
    return Fill::kWait;
  }
  chunk->set_snapshot(true);
  chunk->set_after_namespace(s.after.first);
  chunk->set_after_key(s.after.second);
  chunk->set_last_namespace(snap->last.first);
  chunk->set_last_key(snap->last.second);
  for (const store::Object& row : snap->rows) *chunk->add_rows() = ToProto(row);
  for (const store::ObjectChange& c : snap->proofs) {
    *chunk->add_proofs() = ToProto(c);
  }
  ToProto(snap->versions, chunk->mutable_versions());
  stats_.rows_streamed += snap->rows.size();
  if (!snap->rows.empty()) s.after = snap->last;
  if (snap->done) {
    s.done_reading = true;
    chunk->set_last(true);
  }
  return Fill::kSent;
}

void Replicator::HandleAck(absl::string_view peer,
                           const v1::ReplicationAck& ack, absl::Time now) {
  auto it = streams_.find(ack.stream());
  if (it == streams_.end() || it->second.peer != peer) return;
  OutStream& s = it->second;
  if (s.unacked.erase(ack.index()) == 0) return;
  s.last_progress = now;
  if (s.done_reading && s.unacked.empty()) {
    streams_.erase(it);
    return;
  }
  Pump(s, now);
}

absl::Status Replicator::HandleChunk(absl::string_view peer,
                                     const v1::ReplicationChunk& chunk,
                                     absl::Time now) {
  {
    v1::ReplicationMessage ack;
    ack.mutable_ack()->set_stream(chunk.stream());
    ack.mutable_ack()->set_index(chunk.index());
    Send(std::string(peer), std::move(ack));
  }
  if (!chunk.snapshot()) {
    std::vector<store::ObjectChange> fresh;
    return ReceiveAll(peer, chunk.changes(), now, &fresh);
  }

  // An honest sender streams to a node one at a time; the state of each
  // snapshot received (its proofs, the chunks seen) is held until it ends
  // or stalls, so a sender may have only so many open.
  if (!snapshots_.contains({std::string(peer), chunk.stream()})) {
    int open = 0;
    for (auto it = snapshots_.lower_bound({std::string(peer), 0});
         it != snapshots_.end() && it->first.first == peer; ++it) {
      ++open;
    }
    if (open >= kMaxSnapshotsPerPeer) {
      ++stats_.snapshots_refused;
      return absl::ResourceExhaustedError(absl::StrCat(
          "snapshot stream ", chunk.stream(), " from ", peer, ": ", open,
          " of its snapshots are open here already (at most ",
          kMaxSnapshotsPerPeer, ")"));
    }
  }
  store::SnapshotChunk snap;
  snap.after = {chunk.after_namespace(), chunk.after_key()};
  snap.last = {chunk.last_namespace(), chunk.last_key()};
  snap.done = chunk.last();
  for (const v1::ReplicationChange& p : chunk.rows()) {
    absl::StatusOr<store::ObjectChange> c = FromProto(p);
    if (!c.ok()) {
      ++stats_.malformed;
      ChargeRefusal(peer, c.status(), now);
      return c.status();  // the chunk is unusable; the resync will not end
    }
    snap.rows.push_back(store::Object{.ns = std::move(c->ns),
                                      .key = std::move(c->key),
                                      .value = std::move(c->value),
                                      .stamp = std::move(c->stamp)});
  }
  absl::StatusOr<store::VersionVector> versions = FromProto(chunk.versions());
  if (!versions.ok()) {
    ++stats_.malformed;
    return versions.status();
  }
  snap.versions = *std::move(versions);
  std::vector<store::ObjectChange> proofs;
  for (const v1::ReplicationChange& p : chunk.proofs()) {
    absl::StatusOr<store::ObjectChange> c = FromProto(p);
    if (!c.ok()) {
      ++stats_.malformed;
      return c.status();
    }
    proofs.push_back(*std::move(c));
  }
  // Rows the log refuses are charged like changes, and the log stops
  // checking signatures past what the peer has left.
  // A row this node holds is removed as superseded and collected there only
  // when it is old enough for that to be true (ReplicatorOptions::
  // forgotten_after), a minute of clock skew aside.
  const absl::Duration min_age =
      std::min(options_.forgotten_after, options_.tombstone_max_age);
  const store::HlcTime remove_before =
      store::MakeHlc(absl::ToUnixMillis(now - min_age + absl::Minutes(1)), 0);
  absl::StatusOr<size_t> refused = log_->ApplySnapshot(
      snap, peer,
      static_cast<size_t>(std::max(0.0, refusals_.Available(peer, now))),
      remove_before);
  if (!refused.ok()) {
    if (absl::IsResourceExhausted(refused.status())) {
      ChargeRefusals(peer, snap.rows.size(), now);
    } else if (!NoteUnknownOrigin(refused.status())) {
      ++stats_.store_errors;  // else not the store's fault
    }
    return refused.status();
  }
  ChargeRefusals(peer, *refused, now);
  InSnapshot& in = snapshots_[{std::string(peer), chunk.stream()}];
  in.last_progress = now;
  in.received.insert(chunk.index());
  if (chunk.index() == 0) {
    in.base = snap.versions;
    in.proofs = std::move(proofs);
    in.have_base = true;
  }
  if (chunk.last()) in.last_index = static_cast<int64_t>(chunk.index());
  if (!in.have_base || in.last_index < 0 ||
      in.received.size() != static_cast<size_t>(in.last_index + 1)) {
    return absl::OkStatus();
  }
  // Every range arrived: this node holds all the sender held at chunk 0.
  const store::VersionVector base = in.base;
  std::vector<store::ObjectChange> resync_proofs = std::move(in.proofs);
  snapshots_.erase({std::string(peer), chunk.stream()});
  if (absl::Status s = log_->FinishResync(base, resync_proofs, peer); !s.ok()) {
    NoteUnknownOrigin(s);
    return s;
  }
  ASSIGN_OR_RETURN(store::VersionVector now_held, log_->Versions());
  // Changes of this node the resync brought back (its database had lost
  // them; a peer holds them) may be shown like published ones.
  if (const int64_t own = store::SeqAt(base, options_.origin);
      own > durable_ && store::SeqAt(now_held, options_.origin) >= own) {
    stats_.own_changes_taken_back += own - store::SeqAt(held_, options_.origin);
    durable_ = own;
  }
  TakeVersions(std::move(now_held));
  UpdateHold(now);
  ++stats_.resyncs_completed;
  std::vector<store::ObjectChange> fresh;
  std::set<std::string> origins;
  for (const auto& [key, entry] : pending_) origins.insert(key.first);
  for (const std::string& origin : origins) DrainPending(origin, now, &fresh);
  return absl::OkStatus();
}

void Replicator::Tick(absl::Time now) {
  UpdateHold(now);
  AskOwnSequence(now);
  if (now >= next_anti_entropy_) {
    next_anti_entropy_ = now + options_.anti_entropy_interval;
    std::vector<std::string> peer = RandomPeers(1, "", "");
    if (!peer.empty()) SendFingerprint(peer[0], /*reply=*/true);
  }
  if (now >= next_gc_) {
    next_gc_ = now + options_.gc_interval;
    CollectGarbage(now);
  }
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (now - it->second.last_progress >= options_.stream_timeout) {
      ++stats_.streams_timed_out;
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
  // Allowances back to full are forgotten (they behave as new ones).
  refusals_.Prune(now);
  // A gap that anti-entropy has not filled by now will not be filled by
  // what waits behind it (a sender far ahead of any gap, or lying).
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second.since >= options_.pending_timeout) {
      ++stats_.pending_expired;
      it = ErasePending(it);
    } else {
      ++it;
    }
  }
  for (auto it = snapshots_.begin(); it != snapshots_.end();) {
    if (now - it->second.last_progress >= 2 * options_.stream_timeout) {
      it = snapshots_.erase(it);
    } else {
      ++it;
    }
  }
  // An ask not answered by now will not be; the next message that meets
  // the origin asks again.
  for (auto it = asked_.begin(); it != asked_.end();) {
    if (now - it->second >= 2 * options_.stream_timeout) {
      it = asked_.erase(it);
    } else {
      ++it;
    }
  }
}

bool Replicator::NoteUnknownOrigin(const absl::Status& s) {
  if (!absl::IsUnavailable(s)) return false;
  auto origin = s.GetPayload(kUnknownOriginPayload);
  if (!origin.has_value()) return false;
  unknown_origins_.insert(std::string(*origin));
  return true;
}

void Replicator::AskCertificates(absl::string_view peer,
                                 const v1::ReplicationMessage& message,
                                 absl::Time now) {
  // The origins the log named, and the message's others (a bounded number
  // of them: a sender picks them). A resync's proofs came in its first
  // chunk, so an origin only they hold is known by the log's word alone.
  constexpr size_t kMaxOriginsLooked = 256;
  std::set<std::string> origins = std::move(unknown_origins_);
  unknown_origins_.clear();
  auto add = [&](const v1::ReplicationChange& c) {
    if (origins.size() < kMaxOriginsLooked) origins.insert(c.origin());
  };
  if (message.has_push()) {
    for (const auto& c : message.push().changes()) add(c);
  } else if (message.has_chunk()) {
    for (const auto& c : message.chunk().changes()) add(c);
    for (const auto& c : message.chunk().rows()) add(c);
    for (const auto& c : message.chunk().proofs()) add(c);
  }
  v1::ReplicationMessage ask;
  v1::ReplicationCertificateRequest* request =
      ask.mutable_certificate_request();
  for (const std::string& origin : origins) {
    if (request->origins_size() >= kMaxCertificatesPerMessage) break;
    if (origin.empty() || origin == options_.origin) continue;
    auto key = std::make_pair(std::string(peer), origin);
    auto it = asked_.find(key);
    if (it != asked_.end() && now - it->second < options_.min_digest_gap) {
      continue;
    }
    if (log_->KnowsOrigin(origin)) continue;
    asked_[std::move(key)] = now;
    request->add_origins(origin);
  }
  if (request->origins_size() == 0) return;
  stats_.certificates_asked += request->origins_size();
  Send(std::string(peer), std::move(ask));
}

absl::Status Replicator::HandleCertificateRequest(
    absl::string_view peer, const v1::ReplicationCertificateRequest& request) {
  if (request.origins_size() > kMaxCertificatesPerMessage) {
    ++stats_.malformed;
    return absl::InvalidArgumentError(
        absl::StrCat("origins: ", request.origins_size(),
                     " in one certificate request from ", peer, " (at most ",
                     kMaxCertificatesPerMessage, ")"));
  }
  std::set<std::string> seen;
  v1::ReplicationMessage answer;
  for (const std::string& origin : request.origins()) {
    if (!seen.insert(origin).second) continue;
    std::string der = log_->CertificateFor(origin);
    if (!der.empty()) answer.mutable_certificates()->add_certificates(der);
  }
  const int n = answer.certificates().certificates_size();
  if (n == 0) return absl::OkStatus();
  stats_.certificates_sent += n;
  Send(std::string(peer), std::move(answer));
  return absl::OkStatus();
}

absl::Status Replicator::HandleCertificates(
    absl::string_view peer, const v1::ReplicationCertificates& answer,
    absl::Time now) {
  const int n = answer.certificates_size();
  if (n > kMaxCertificatesPerMessage) {
    ++stats_.malformed;
    return absl::InvalidArgumentError(
        absl::StrCat("certificates: ", n, " in one answer from ", peer,
                     " (at most ", kMaxCertificatesPerMessage, ")"));
  }
  // Checked only as many as were asked of this peer and are unanswered:
  // each costs a parse and a path validation.
  int outstanding = 0;
  for (auto it = asked_.lower_bound({std::string(peer), std::string()});
       it != asked_.end() && it->first.first == peer; ++it) {
    ++outstanding;
  }
  const int checked = std::min(n, outstanding);
  stats_.certificates_unsolicited += n - checked;
  absl::Status first;
  int taken = 0;
  const std::string from(peer);
  auto asked = [this, &from](absl::string_view origin) {
    return asked_.contains({from, std::string(origin)});
  };
  for (int i = 0; i < checked; ++i) {
    absl::StatusOr<std::string> origin =
        log_->OfferCertificate(answer.certificates(i), asked);
    if (origin.ok()) {
      ++taken;
      ++stats_.certificates_taken;
      asked_.erase({std::string(peer), *origin});
    } else if (!absl::IsAlreadyExists(origin.status())) {
      ++stats_.certificates_refused;
      Keep(&first, Annotate(origin.status(),
                            absl::StrCat("a certificate from ", peer)));
    }
  }
  // The changes refused for want of these come again.
  if (taken > 0) SendDigest(std::string(peer), /*reply=*/true, now);
  return first;
}

absl::Time Replicator::NextDeadline() const {
  absl::Time t = std::min(next_anti_entropy_, next_gc_);
  if (holding_) t = std::min({t, hold_deadline_, next_ask_});
  for (const auto& [id, s] : streams_) {
    t = std::min(t, s.last_progress + options_.stream_timeout);
  }
  for (const auto& [key, in] : snapshots_) {
    t = std::min(t, in.last_progress + 2 * options_.stream_timeout);
  }
  return t;
}

std::vector<Outbound> Replicator::TakeOutbox() {
  std::vector<Outbound> out;
  out.swap(outbox_);
  return out;
}

store::VersionVector Replicator::SeenByAll() const {
  store::VersionVector seen = held_;
  for (const std::vector<std::string>* group : {&members_, &away_}) {
    for (const std::string& m : *group) {
      auto it = peer_versions_.find(m);
      if (it == peer_versions_.end()) return {};
      for (auto& [origin, seq] : seen) {
        seq = std::min(seq, store::SeqAt(it->second, origin));
      }
    }
  }
  return seen;
}

void Replicator::CollectGarbage(absl::Time now) {
  const store::HlcTime cutoff =
      store::MakeHlc(absl::ToUnixMillis(now - options_.tombstone_max_age), 0);
  absl::StatusOr<store::GcResult> r = log_->CollectGarbage(SeenByAll(), cutoff);
  if (!r.ok()) {
    ++stats_.store_errors;
    return;
  }
  stats_.gc_tombstones += r->tombstones;
  stats_.gc_log_changes += r->log_changes;
}

void Replicator::Push(const std::vector<store::ObjectChange>& changes, int hops,
                      absl::string_view except, size_t width) {
  if (changes.empty()) return;
  v1::ReplicationMessage m;
  for (const store::ObjectChange& c : changes) {
    *m.mutable_push()->add_changes() = ToProto(c);
  }
  m.mutable_push()->set_hops(static_cast<uint32_t>(hops));
  const int k = width > 0 ? static_cast<int>(width) : options_.fanout;
  for (std::string& peer : RandomPeers(k, except, "")) {
    ++stats_.pushes_sent;
    Send(std::move(peer), m);
  }
}

std::vector<std::string> Replicator::RandomPeers(int k,
                                                 absl::string_view except_a,
                                                 absl::string_view except_b) {
  std::vector<std::string> pool;
  pool.reserve(members_.size());
  for (const std::string& m : members_) {
    if (m != except_a && m != except_b) pool.push_back(m);
  }
  const size_t n = std::min(pool.size(), static_cast<size_t>(k));
  for (size_t i = 0; i < n; ++i) {
    std::swap(pool[i], pool[i + prng_.Uniform(pool.size() - i)]);
  }
  pool.resize(n);
  return pool;
}

void Replicator::Send(std::string to, v1::ReplicationMessage message) {
  outbox_.push_back({std::move(to), std::move(message)});
}

}  // namespace mycel::replication
