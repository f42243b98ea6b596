#include "mesh/membership/membership.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "mesh/membership/codec.h"
#include "runtime/status.h"

namespace mycel::membership {
namespace {

int64_t Us(absl::Time t) { return absl::ToUnixMicros(t); }
absl::Time At(int64_t us) { return absl::FromUnixMicros(us); }
int64_t DurUs(absl::Duration d) { return absl::ToInt64Microseconds(d); }

constexpr uint32_t kNoMember = UINT32_MAX;
constexpr absl::Duration kMaintenanceInterval = absl::Seconds(10);
// Room left in a push-pull for the envelope around the members.
constexpr size_t kPushPullOverhead = 4096;

std::string SeedKey(absl::string_view address) {
  return absl::StrCat("seed:", address);
}

int StateIndex(MemberState s) { return static_cast<int>(s); }

bool Active(MemberState s) {
  return s == MemberState::kAlive || s == MemberState::kSuspect;
}

// Whether a sync's accusation of a member (`theirs`: suspect or dead) is
// news to a node whose view is `ours`. Of a member held alive it becomes a
// suspicion. Of one held dead, a suspicion says the peer missed the death
// (HandleSuspect gossips it again); a death is our own verdict repeated, and
// every periodic sync would otherwise gossip every death again for as long
// as the dead member is kept.
bool AccusationIsNews(MemberState ours, MemberState theirs) {
  return ours == MemberState::kAlive ||
         (ours == MemberState::kDead && theirs == MemberState::kSuspect);
}

}  // namespace

size_t Membership::IndexHash::operator()(uint32_t i) const {
  return absl::Hash<absl::string_view>()((*members)[i].record->name);
}
size_t Membership::IndexHash::operator()(absl::string_view name) const {
  return absl::Hash<absl::string_view>()(name);
}
bool Membership::IndexEq::operator()(uint32_t a, absl::string_view b) const {
  return (*members)[a].record->name == b;
}

absl::StatusOr<std::unique_ptr<Membership>> Membership::Create(
    MembershipOptions options, absl::Time now) {
  RETURN_IF_ERROR(ValidateConfig(options.config));
  if (options.signer == nullptr || options.verifier == nullptr) {
    return absl::InvalidArgumentError("signer, verifier: required");
  }
  if (options.name.empty() || options.name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: must be 1-", kMaxNameBytes, " bytes"));
  }
  RETURN_IF_ERROR(NormalizeMeta(&options.meta));
  auto m = absl::WrapUnique(new Membership(options));
  RETURN_IF_ERROR(m->Init(std::move(options), now));
  return m;
}

Membership::Membership(const MembershipOptions& options)
    : config_(options.config),
      name_(options.name),
      meta_(options.meta),
      signer_(options.signer),
      verifier_(options.verifier),
      prng_(options.random_seed),
      awareness_(options.config.awareness_max_multiplier),
      limiter_(options.config.peer_messages_per_second,
               options.config.peer_burst),
      index_(0, IndexHash{&members_}, IndexEq{&members_}) {
  // A random start keeps acks meant for an earlier instance of this node
  // from matching our probes. 28 bits: a seq rides on every ping and ack,
  // and below 2^28 it takes 4 bytes on the wire, not 7.
  next_seq_ = prng_.Next() >> 36;
}

absl::Status Membership::Init(MembershipOptions options, absl::Time now) {
  const int64_t now_us = Us(now);
  absl::StatusOr<AliveRef> self = SignSelf(options.incarnation, false);
  if (!self.ok()) return Annotate(self.status(), "signing our record");
  // Verifying our own record catches a signer and verifier that disagree
  // (wrong certificate, wrong key) at start instead of as silence later.
  absl::StatusOr<std::string> certified = verifier_->Verify(**self);
  if (!certified.ok()) {
    return Annotate(certified.status(), "verifying our own record");
  }
  if (*certified != name_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "certificate names \"", *certified, "\", not \"", name_, "\""));
  }
  AddMember(*self, MemberState::kAlive, options.incarnation, now_us);

  bool any_alive = false;
  members_.reserve(options.members.size() + 1);
  index_.reserve(options.members.size() + 1);
  probe_order_.reserve(options.members.size());
  for (MemberSnapshot& s : options.members) {
    if (s.record == nullptr || s.record->name != s.name || s.name == name_ ||
        IndexOf(s.name).has_value() || !ValidateAlive(*s.record).ok()) {
      continue;
    }
    // Stored records were verified when first accepted; the store is as
    // trusted as the node key beside it. Members that were alive or suspect
    // come back alive: probing will find out.
    MemberState state = s.state;
    if (state == MemberState::kSuspect) state = MemberState::kAlive;
    if (state == MemberState::kLeft && !s.record->leaving) {
      state = MemberState::kDead;
    }
    const uint64_t inc = std::max(s.incarnation, s.record->incarnation);
    Member& m = members_[AddMember(std::move(s.record), state, inc, now_us)];
    // From before the restart: not news to push whole (Summarize).
    m.record_since_us = INT64_MIN / 4;
    if (s.state_since != absl::InfinitePast()) {
      m.state_since_us = Us(s.state_since);
    }
    if (s.last_heard != absl::InfinitePast()) {
      m.last_heard_us = Us(s.last_heard);
    }
    any_alive |= state == MemberState::kAlive;
  }
  for (std::string& address : options.seeds) {
    if (!address.empty()) seeds_.push_back(SeedState{std::move(address), ""});
  }

  // Periodic work starts at a random phase, as memberlist staggers its
  // tickers, so that nodes started together do not act in lockstep.
  next_probe_ = now + config_.probe_interval * prng_.UniformDouble();
  next_gossip_ = now + config_.gossip_interval * prng_.UniformDouble();
  next_push_pull_ =
      now + PushPullScale(config_.push_pull_interval, NumActive()) *
                prng_.UniformDouble();
  next_reconnect_ = now + ReconnectBase() * prng_.UniformDouble();
  next_maintenance_ = now + kMaintenanceInterval;
  if (options.rejoin_on_start) {
    Broadcast(name_, members_[0].record);
    if (any_alive) next_push_pull_ = now;
  }
  return absl::OkStatus();
}

// --- Members ---

std::optional<uint32_t> Membership::IndexOf(absl::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return *it;
}

uint32_t Membership::AddMember(AliveRef record, MemberState state,
                               uint64_t incarnation, int64_t now_us) {
  const uint32_t idx = static_cast<uint32_t>(members_.size());
  members_.push_back(Member{.record = std::move(record),
                            .incarnation = incarnation,
                            .state_since_us = now_us,
                            .state = state,
                            // Our own record may replace one that others
                            // hold from before a restart.
                            .first_record = idx != 0,
                            .record_since_us = now_us});
  index_.insert(idx);
  ++count_[StateIndex(state)];
  if (idx != 0) {
    // A random slot in the probe order, as memberlist does, so that a new
    // member is not always probed last (which would stretch detection).
    const size_t n = probe_order_.size();
    const size_t slot = prng_.Uniform(n + 1);
    probe_order_.push_back(idx);
    std::swap(probe_order_[slot], probe_order_[n]);
  }
  return idx;
}

void Membership::SetState(uint32_t idx, MemberState state, int64_t now_us) {
  Member& m = members_[idx];
  if (m.state == state) return;
  --count_[StateIndex(m.state)];
  ++count_[StateIndex(state)];
  m.state = state;
  m.state_since_us = now_us;
  // Its connection is gone, or soon will be.
  if (!Active(state) && m.linked) {
    m.linked = false;
    --linked_count_;
  }
}

void Membership::MarkLinked(uint32_t idx) {
  Member& m = members_[idx];
  if (m.linked || !Active(m.state)) return;
  m.linked = true;
  ++linked_count_;
  if (!m.listed) {
    m.listed = true;
    linked_.push_back(idx);
  }
}

void Membership::RemoveMember(uint32_t idx) {
  const uint32_t last = static_cast<uint32_t>(members_.size() - 1);
  // The index hashes the names the members point at, so entries leave it
  // before their member moves.
  index_.erase(idx);
  --count_[StateIndex(members_[idx].state)];
  if (members_[idx].linked) --linked_count_;
  linked_stale_ = true;
  if (idx != last) {
    index_.erase(last);
    members_[idx] = std::move(members_[last]);
    members_.pop_back();
    index_.insert(idx);
  } else {
    members_.pop_back();
  }
}

int Membership::NumActive() const {
  return count_[StateIndex(MemberState::kAlive)] +
         count_[StateIndex(MemberState::kSuspect)];
}

MemberSnapshot Membership::SnapshotOf(const Member& m) const {
  return MemberSnapshot{m.record->name,
                        m.state,
                        m.incarnation,
                        m.record,
                        At(m.state_since_us),
                        m.last_heard_us == INT64_MIN ? absl::InfinitePast()
                                                     : At(m.last_heard_us)};
}

void Membership::Emit(MemberEventKind kind, const Member& m, int64_t now_us) {
  events_.push_back(
      MemberEvent{kind, m.record->name, m.incarnation, At(now_us)});
}

// --- Updates ---

bool Membership::VerifyAlive(const Alive& alive) {
  absl::StatusOr<std::string> certified = verifier_->Verify(alive);
  if (!certified.ok()) {
    ++stats_.alive_rejected_signature;
    return false;
  }
  if (*certified != alive.name) {
    ++stats_.alive_rejected_name;
    return false;
  }
  return true;
}

absl::StatusOr<AliveRef> Membership::SignSelf(uint64_t incarnation,
                                              bool leaving) {
  Alive a;
  a.name = name_;
  a.incarnation = incarnation;
  a.meta = meta_;
  a.leaving = leaving;
  if (absl::Status s = signer_->Sign(&a); !s.ok()) {
    ++stats_.signing_failures;
    return s;
  }
  return std::make_shared<const Alive>(std::move(a));
}

void Membership::Broadcast(absl::string_view name, Update update, bool join) {
  const size_t size = UpdateEncodedSize(update);
  broadcasts_.Push(name, std::move(update), size, /*urgent=*/name == name_,
                   join);
}

void Membership::SetRecord(Member& m, AliveRef record) {
  m.record = std::move(record);
  m.record_since_us = now_us_;
  m.first_record = false;
}

void Membership::Refute(uint64_t accused_incarnation) {
  Member& self = members_[0];
  const uint64_t inc = std::max(self.incarnation + 1, accused_incarnation + 1);
  absl::StatusOr<AliveRef> record = SignSelf(inc, false);
  if (!record.ok()) return;
  SetRecord(self, *record);
  self.incarnation = inc;
  // Being suspected is a hint that we are the slow one (Lifeguard).
  awareness_.ApplyDelta(1);
  ++stats_.refutations;
  Broadcast(name_, *std::move(record));
}

void Membership::HandleAlive(const AliveRef& ref, int64_t now_us) {
  const Alive& a = *ref;
  if (a.name == name_) {
    const Member& self = members_[0];
    if (left_ || a.incarnation < self.incarnation || ref == self.record ||
        (a.incarnation == self.incarnation && a == *self.record)) {
      return;
    }
    // A record of ours that we do not hold, as new or newer than ours: an
    // earlier instance of this node said it. Outbid it.
    if (VerifyAlive(a)) Refute(a.incarnation);
    return;
  }
  std::optional<uint32_t> idx = IndexOf(a.name);
  if (idx && a.incarnation <= members_[*idx].incarnation) {
    ++stats_.stale_updates;
    return;
  }
  if (!VerifyAlive(a)) return;
  const MemberState state =
      a.leaving ? MemberState::kLeft : MemberState::kAlive;
  bool joined = false;
  if (!idx) {
    const uint32_t i = AddMember(ref, state, a.incarnation, now_us);
    joined = !a.leaving;
    Emit(a.leaving ? MemberEventKind::kLeft : MemberEventKind::kJoined,
         members_[i], now_us);
  } else {
    Member& m = members_[*idx];
    const MemberState old = m.state;
    const bool meta_changed = !(m.record->meta == a.meta);
    suspicions_.erase(a.name);
    SetRecord(m, ref);
    m.incarnation = a.incarnation;
    SetState(*idx, state, now_us);
    if (state == MemberState::kLeft) {
      if (old != MemberState::kLeft) Emit(MemberEventKind::kLeft, m, now_us);
    } else if (old == MemberState::kDead || old == MemberState::kLeft) {
      joined = true;
      Emit(MemberEventKind::kJoined, m, now_us);
    } else if (old == MemberState::kSuspect) {
      Emit(MemberEventKind::kRecovered, m, now_us);
    } else if (meta_changed) {
      Emit(MemberEventKind::kUpdated, m, now_us);
    }
  }
  Broadcast(a.name, ref, joined);
}

bool Membership::AheadOfRecord(const Member& m, uint64_t incarnation) {
  return incarnation > m.record->incarnation;
}

void Membership::HandleSuspect(const Suspect& s, int64_t now_us,
                               absl::string_view relayer,
                               std::vector<Update>* corrections) {
  std::optional<uint32_t> idx = IndexOf(s.name);
  if (!idx) return;
  Member& m = members_[*idx];
  if (s.incarnation < m.incarnation || AheadOfRecord(m, s.incarnation)) {
    ++stats_.stale_updates;
    if (s.incarnation < m.record->incarnation) {
      CorrectStaleAccusation(m, relayer, corrections);
    }
    return;
  }
  if (auto it = suspicions_.find(s.name); it != suspicions_.end()) {
    // An independent accuser: the suspicion is more likely right, so the
    // timeout shrinks; pass the news on so that others shrink theirs.
    if (it->second.Confirm(s.from)) {
      PushTimer(it->second.deadline(), TimerKind::kSuspicion, 0, s.name);
      Broadcast(s.name, s);
    }
    return;
  }
  if (m.state == MemberState::kDead) {
    // The accuser missed every copy of a death we hold (gossip is
    // probabilistic; the copies may all be spent before it probed the
    // member itself). Without news it would wait out the longest
    // suspicion timeout alone, since no one who holds the member dead
    // confirms a suspicion. Gossip the death again, as HandleDead does
    // for a refutation someone missed; deaths are rare. As many times as
    // a join's news: after a cut, every node gossips the deaths of the
    // whole other side at once, and with 4 copies each one node in a
    // 200-node run of the simulator (partition, seed 4) missed them all
    // and still suspected a member at the heal.
    Broadcast(s.name, Dead{s.name, m.incarnation, name_}, /*join=*/true);
    return;
  }
  if (m.state != MemberState::kAlive) return;
  if (*idx == 0) {
    if (!left_) Refute(s.incarnation);
    return;
  }
  Broadcast(s.name, s);
  m.incarnation = s.incarnation;
  SetState(*idx, MemberState::kSuspect, now_us);
  ++stats_.suspicions;
  const int n = NumActive();
  int k = config_.suspicion_mult - 2;
  // Too few members to expect independent confirmations.
  if (n - 2 < k) k = 0;
  const absl::Duration min =
      SuspicionTimeout(config_.suspicion_mult, n, config_.probe_interval);
  const absl::Duration max = config_.suspicion_max_timeout_mult * min;
  auto [it, inserted] =
      suspicions_.try_emplace(s.name, s.from, k, min, max, At(now_us));
  PushTimer(it->second.deadline(), TimerKind::kSuspicion, 0, s.name);
  Emit(MemberEventKind::kSuspected, m, now_us);
}

void Membership::CorrectStaleAccusation(const Member& m,
                                        absl::string_view relayer,
                                        std::vector<Update>* corrections) {
  // Only a record that refutes the accusation: the member alive (or
  // suspected at its record's incarnation, which still outbids the older
  // suspicion), or ourselves while we are members.
  const bool self = m.record->name == name_;
  if (self ? left_ : !Active(m.state)) return;
  if (corrections == nullptr || relayer.empty() || relayer == m.record->name ||
      corrections->size() >= kMaxCorrectionsPerMessage) {
    return;
  }
  if (corrections_.size() >= 4096) corrections_.clear();  // fed garbage
  auto [it, fresh] = corrections_.try_emplace(
      std::make_pair(std::string(relayer), m.record->name), now_us_);
  if (!fresh && now_us_ - it->second <
                    absl::ToInt64Microseconds(config_.probe_interval)) {
    return;
  }
  it->second = now_us_;
  ++stats_.stale_accusations_corrected;
  corrections->emplace_back(m.record);
}

void Membership::SendCorrections(absl::string_view peer, size_t outbox_start,
                                 std::vector<Update> corrections) {
  auto name_of = [](const Update& u) -> absl::string_view {
    const AliveRef* r = std::get_if<AliveRef>(&u);
    return r != nullptr ? absl::string_view((*r)->name) : absl::string_view();
  };
  for (size_t i = outbox_start; i < outbox_.size(); ++i) {
    if (outbox_[i].to != peer) continue;
    std::vector<Update>& updates = outbox_[i].message.updates;
    // A record the answer already carries (a refutation made while
    // handling the message, say) is not sent twice.
    std::erase_if(corrections, [&](const Update& c) {
      return std::any_of(updates.begin(), updates.end(), [&](const Update& u) {
        return name_of(u) == name_of(c);
      });
    });
    updates.insert(updates.begin(),
                   std::make_move_iterator(corrections.begin()),
                   std::make_move_iterator(corrections.end()));
    return;
  }
  if (std::string address = AddressOf(peer); !address.empty()) {
    Send(std::string(peer), std::move(address), std::monostate(),
         std::move(corrections));
  }
}

void Membership::HandleDead(const Dead& d, int64_t now_us) {
  std::optional<uint32_t> idx = IndexOf(d.name);
  if (!idx) return;
  Member& m = members_[*idx];
  if (AheadOfRecord(m, d.incarnation)) {
    ++stats_.stale_updates;
    return;
  }
  if (d.incarnation < m.incarnation) {
    ++stats_.stale_updates;
    // Someone declared an older incarnation dead: it missed the refutation
    // we hold (gossip is probabilistic, and under heavy loss a node can miss
    // every copy). Gossip the newer record again, so that it and whoever
    // believed it recover in a round or two rather than at the member's
    // next refutation. Deaths are rare, so this costs little.
    if (m.state == MemberState::kAlive && !(*idx == 0 && left_)) {
      Broadcast(d.name, m.record);
    }
    return;
  }
  if (m.state == MemberState::kDead || m.state == MemberState::kLeft) return;
  suspicions_.erase(d.name);
  if (*idx == 0) {
    if (!left_) Refute(d.incarnation);
    return;
  }
  Broadcast(d.name, d);
  m.incarnation = d.incarnation;
  SetState(*idx, MemberState::kDead, now_us);
  Emit(MemberEventKind::kFailed, m, now_us);
}

void Membership::MergeState(const std::vector<MemberDigest>& members,
                            int64_t now_us) {
  for (const MemberDigest& d : members) {
    const std::string& name = d.alive->name;
    std::optional<uint32_t> idx = IndexOf(name);
    const bool newer_record =
        !idx || *idx == 0 || d.alive->incarnation > members_[*idx].incarnation;
    switch (d.state) {
      case MemberState::kAlive:
        if (newer_record) HandleAlive(d.alive, now_us);
        break;
      case MemberState::kLeft:
        // Only the member itself can say it left, in its signed record.
        if (newer_record && d.alive->leaving) HandleAlive(d.alive, now_us);
        break;
      case MemberState::kSuspect:
      case MemberState::kDead:
        if (!idx && d.state == MemberState::kDead) {
          // A member we never knew, already dead: keep it as dead, so that
          // its address is retried when a partition heals; at its record's
          // incarnation (the state's is not signed: AheadOfRecord).
          if (!d.alive->leaving && VerifyAlive(*d.alive)) {
            const uint32_t i = AddMember(d.alive, MemberState::kDead,
                                         d.alive->incarnation, now_us);
            Emit(MemberEventKind::kFailed, members_[i], now_us);
          }
          break;
        }
        if (newer_record) HandleAlive(d.alive, now_us);
        // As memberlist: another member's verdict becomes our suspicion,
        // not our verdict; the accused can still refute. Unlike memberlist,
        // it does not confirm a suspicion we already hold: a full-state
        // sync repeats accusations, it does not make new independent ones,
        // and counting it as one cut timeouts to the minimum under load.
        if (std::optional<uint32_t> held = IndexOf(name);
            held && AccusationIsNews(members_[*held].state, d.state) &&
            !suspicions_.contains(name)) {
          HandleSuspect(Suspect{name, d.incarnation, name_}, now_us);
        }
        break;
    }
  }
}

// --- Inbound ---

absl::Status Membership::HandleMessage(absl::string_view authenticated_peer,
                                       const Message& message, absl::Time now) {
  if (!limiter_.Allow(authenticated_peer, now)) {
    ++stats_.rejected_rate_limited;
    return absl::ResourceExhaustedError(
        absl::StrCat("peer ", authenticated_peer, ": over its rate limit"));
  }
  return HandleChecked(authenticated_peer, message, Us(now));
}

absl::Status Membership::HandleBytes(absl::string_view authenticated_peer,
                                     absl::string_view bytes, absl::Time now) {
  if (!limiter_.Allow(authenticated_peer, now)) {
    ++stats_.rejected_rate_limited;
    return absl::ResourceExhaustedError(
        absl::StrCat("peer ", authenticated_peer, ": over its rate limit"));
  }
  absl::StatusOr<Message> message =
      DecodeMessage(bytes, config_.max_message_bytes);
  if (!message.ok()) {
    ++stats_.messages_received;
    if (message.status().code() == absl::StatusCode::kResourceExhausted) {
      ++stats_.rejected_oversized;
    } else {
      ++stats_.rejected_malformed;
    }
    return message.status();
  }
  return HandleChecked(authenticated_peer, *message, Us(now));
}

absl::Status Membership::HandleChecked(absl::string_view peer,
                                       const Message& message, int64_t now_us) {
  now_us_ = now_us;
  ++stats_.messages_received;
  if (absl::Status s = ValidateMessage(message); !s.ok()) {
    ++stats_.rejected_malformed;
    return s;
  }
  // The sender is whom the transport authenticated; a message that names
  // another (our own messages leave `from` out) is refused.
  if ((!message.from.empty() && message.from != peer) || peer == name_) {
    ++stats_.rejected_sender_mismatch;
    return absl::PermissionDeniedError(
        absl::StrCat("message from \"", message.from, "\" arrived from peer \"",
                     peer, "\""));
  }
  // It answered: any reconnection backoff towards it is over.
  if (!backoff_.empty()) backoff_.erase(peer);

  // Updates first: a suspicion of us riding on a ping is refuted before the
  // ack is built, so the ack carries the refutation.
  std::vector<Update> corrections;
  const size_t outbox_start = outbox_.size();
  for (const Update& u : message.updates) {
    if (const AliveRef* a = std::get_if<AliveRef>(&u)) {
      HandleAlive(*a, now_us);
    } else if (const Suspect* s = std::get_if<Suspect>(&u)) {
      HandleSuspect(*s, now_us, peer, &corrections);
    } else {
      HandleDead(std::get<Dead>(u), now_us);
    }
  }
  if (const Ping* p = std::get_if<Ping>(&message.body)) {
    HandlePing(peer, *p);
  } else if (const Ack* a = std::get_if<Ack>(&message.body)) {
    HandleAck(peer, *a, now_us);
  } else if (const Nack* n = std::get_if<Nack>(&message.body)) {
    HandleNack(*n);
  } else if (const IndirectPing* ip =
                 std::get_if<IndirectPing>(&message.body)) {
    HandleIndirectPing(peer, *ip, now_us);
  } else if (const PushPull* pp = std::get_if<PushPull>(&message.body)) {
    HandlePushPull(peer, *pp, now_us);
  }
  // The records that refute what the peer still spreads go to the peer
  // alone (the one sender the transport vouches for): on our answer to
  // this message if there is one, else in a message of their own.
  if (!corrections.empty()) {
    SendCorrections(peer, outbox_start, std::move(corrections));
  }
  // After the message, which may have introduced the peer.
  if (std::optional<uint32_t> idx = IndexOf(peer); idx && *idx != 0) {
    members_[*idx].last_heard_us = now_us;
    MarkLinked(*idx);
  }
  return absl::OkStatus();
}

void Membership::HandlePing(absl::string_view peer, const Ping& ping) {
  if (!ping.target.empty() && ping.target != name_) {
    // Meant for another node that had our address; staying silent lets the
    // prober find out that node is gone.
    ++stats_.misdirected_pings;
    return;
  }
  Send(std::string(peer), AddressOf(peer), Ack{ping.seq});
}

void Membership::HandleIndirectPing(absl::string_view peer,
                                    const IndirectPing& req, int64_t now_us) {
  std::optional<uint32_t> idx = IndexOf(req.target);
  if (!idx || *idx == 0) {
    if (req.nack) Send(std::string(peer), AddressOf(peer), Nack{req.seq});
    return;
  }
  const uint64_t seq = next_seq_++;
  relays_.emplace(seq, Relay{std::string(peer), req.seq, req.nack});
  PushTimer(At(now_us) + config_.probe_timeout, TimerKind::kRelay, seq, "");
  Send(req.target, AddressOf(req.target), Ping{seq, req.target});
}

void Membership::HandleAck(absl::string_view peer, const Ack& ack,
                           int64_t now_us) {
  if (probe_ && ack.seq == probe_->seq) {
    if (std::optional<uint32_t> idx = IndexOf(probe_->target)) {
      members_[*idx].last_heard_us = now_us;
    }
    awareness_.ApplyDelta(-1);
    probe_.reset();
    return;
  }
  auto it = relays_.find(ack.seq);
  if (it == relays_.end()) return;  // late, or not ours
  Relay relay = std::move(it->second);
  relays_.erase(it);
  Send(relay.origin, AddressOf(relay.origin), Ack{relay.origin_seq});
}

void Membership::HandleNack(const Nack& nack) {
  if (probe_ && probe_->indirect_sent && nack.seq == probe_->seq) {
    ++probe_->nacks;
  }
}

void Membership::MergeSummaries(absl::string_view peer,
                                const std::vector<MemberSummary>& summaries,
                                int64_t now_us,
                                std::vector<std::string>* want) {
  for (const MemberSummary& x : summaries) {
    std::optional<uint32_t> idx = IndexOf(x.name);
    // A record we lack, or an older one than the sender's: ask for it (a
    // summary is not signed, so only the record itself can change one).
    if (!idx || x.record_incarnation > members_[*idx].record->incarnation) {
      want->push_back(x.name);
    }
    if (!idx) continue;
    // What MergeState does with the same view: an accusation becomes our
    // suspicion (or, about us, our refutation, which the reply carries).
    if ((x.state == MemberState::kSuspect || x.state == MemberState::kDead) &&
        AccusationIsNews(members_[*idx].state, x.state) &&
        !suspicions_.contains(x.name)) {
      HandleSuspect(
          Suspect{x.name, x.incarnation, *idx == 0 ? std::string(peer) : name_},
          now_us);
    }
  }
}

void Membership::HandlePushPull(absl::string_view peer, const PushPull& pp,
                                int64_t now_us) {
  if (pp.fill) {
    MergeState(pp.members, now_us);
    return;
  }
  ++stats_.push_pulls_received;
  if (!pp.reply && pp.fingerprint != 0) {
    // A request by fingerprint: it carries nothing to merge. The same view
    // needs nothing back; a different one, the sender's summaries.
    Message msg;
    PushPull answer{pp.seq, false, /*reply=*/true};
    answer.mismatch = pp.fingerprint != Fingerprint();
    if (answer.mismatch) ++stats_.fingerprint_mismatches;
    msg.body = std::move(answer);
    outbox_.push_back(
        Outbound{std::string(peer), AddressOf(peer), std::move(msg)});
    return;
  }
  MergeState(pp.members, now_us);
  std::vector<std::string> want;
  MergeSummaries(peer, pp.summaries, now_us, &want);
  if (pp.reply) {
    if (pp.mismatch && !left_) {
      // Our fingerprint found the views apart: sync in full with the same
      // member now.
      SendPushPull(std::string(peer), AddressOf(peer), next_seq_++, false);
    }
    if (!pp.want.empty()) {
      // The records the answer asked for; it gets no reply.
      Message msg;
      msg.body = PushPull{pp.seq, false, false, Records(nullptr, &pp.want),
                          {},     {},    true};
      outbox_.push_back(
          Outbound{std::string(peer), AddressOf(peer), std::move(msg)});
    }
    if (reconnect_requests_.erase(pp.seq) > 0 && !left_) {
      // A member we held dead answered: a partition is probably healing.
      // Reach for the next dead member soon instead of a full interval
      // later, so that the halves merge in a few rounds.
      next_reconnect_ = std::min(
          next_reconnect_, At(now_us) + config_.reconnect_interval / 10 *
                                            (0.5 + prng_.UniformDouble()));
    }
    auto it = seed_requests_.find(pp.seq);
    if (it != seed_requests_.end()) {
      for (SeedState& seed : seeds_) {
        if (seed.address == it->second) seed.resolved = std::string(peer);
      }
      backoff_.erase(SeedKey(it->second));
      seed_requests_.erase(it);
      // Members that joined after us are still news travelling by gossip:
      // one sync soon brings what a member has learnt since.
      if (config_.join_sync_delay > absl::ZeroDuration() && !left_) {
        const absl::Time at = At(now_us) + config_.join_sync_delay *
                                               (0.5 + prng_.UniformDouble());
        if (at < next_push_pull_) {
          next_push_pull_ = at;
          join_sync_due_ = true;
        }
      }
    }
    return;
  }
  // Reply after merging, so that the reply already carries our refutation
  // of anything the request said about us (this is what heals a partition
  // in one exchange per member). It carries only what the sender lacks.
  Message msg;
  msg.body =
      PushPull{pp.seq, pp.join,        /*reply=*/true, Records(&pp, nullptr),
               {},     std::move(want)};
  outbox_.push_back(
      Outbound{std::string(peer), AddressOf(peer), std::move(msg)});
}

// --- Timers ---

absl::Time Membership::Earliest(Due* which) const {
  absl::Time best = absl::InfiniteFuture();
  Due due = Due::kNone;
  auto consider = [&](absl::Time t, Due d) {
    if (t < best) {
      best = t;
      due = d;
    }
  };
  if (!timers_.empty()) consider(At(timers_.front().when_us), Due::kTimer);
  if (probe_) {
    consider(probe_->indirect_sent ? probe_->deadline : probe_->indirect_at,
             Due::kProbe);
  } else {
    consider(next_probe_, Due::kProbe);
  }
  consider(next_gossip_, Due::kGossip);
  consider(next_push_pull_, Due::kPushPull);
  consider(next_reconnect_, Due::kReconnect);
  consider(next_maintenance_, Due::kMaintenance);
  if (which != nullptr) *which = due;
  return best;
}

absl::Time Membership::NextDeadline() const { return Earliest(nullptr); }

void Membership::Tick(absl::Time now) {
  const int64_t now_us = Us(now);
  now_us_ = now_us;
  for (;;) {
    Due due;
    const absl::Time t = Earliest(&due);
    if (t > now) return;
    switch (due) {
      case Due::kNone:
        return;
      case Due::kTimer: {
        std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
        Timer timer = std::move(timers_.back());
        timers_.pop_back();
        FireTimer(timer, now_us);
        break;
      }
      case Due::kProbe:
        if (!probe_) {
          StartProbe(now_us);
        } else if (!probe_->indirect_sent) {
          SendIndirectProbes(now_us);
        } else {
          FinishFailedProbe(now_us);
        }
        break;
      case Due::kGossip:
        // Keep the cadence unless the driver fell far behind.
        next_gossip_ += config_.gossip_interval;
        if (next_gossip_ <= now) next_gossip_ = now + config_.gossip_interval;
        Gossip(now_us);
        break;
      case Due::kPushPull:
        next_push_pull_ =
            now + PushPullScale(config_.push_pull_interval, NumActive());
        PushPullWithRandomMember(now_us);
        break;
      case Due::kReconnect:
        next_reconnect_ = now + ReconnectBase() * (0.5 + prng_.UniformDouble());
        Reconnect(now_us);
        break;
      case Due::kMaintenance:
        next_maintenance_ = now + kMaintenanceInterval;
        Maintain(now_us);
        break;
    }
  }
}

void Membership::PushTimer(absl::Time when, TimerKind kind, uint64_t seq,
                           std::string name) {
  timers_.push_back(
      Timer{Us(when), timer_order_++, kind, seq, std::move(name)});
  std::push_heap(timers_.begin(), timers_.end(), std::greater<>());
}

void Membership::FireTimer(const Timer& timer, int64_t now_us) {
  if (timer.kind == TimerKind::kRelay) {
    auto it = relays_.find(timer.seq);
    if (it == relays_.end()) return;
    Relay relay = std::move(it->second);
    relays_.erase(it);
    if (relay.nack) {
      Send(relay.origin, AddressOf(relay.origin), Nack{relay.origin_seq});
    }
    return;
  }
  auto it = suspicions_.find(timer.name);
  // Stale entries (refuted, or rescheduled later) are skipped.
  if (it == suspicions_.end() || Us(it->second.deadline()) > now_us) return;
  std::optional<uint32_t> idx = IndexOf(timer.name);
  if (!idx || members_[*idx].state != MemberState::kSuspect) {
    suspicions_.erase(it);
    return;
  }
  ++stats_.deaths_declared;
  HandleDead(Dead{timer.name, members_[*idx].incarnation, name_}, now_us);
}

void Membership::ResetProbeOrder(int64_t now_us) {
  // Forget members dead or left longer than their retention. From the back,
  // because removal moves the last member into the hole.
  const int64_t dead_us = DurUs(config_.dead_retention);
  const int64_t left_us = DurUs(config_.left_retention);
  for (uint32_t i = static_cast<uint32_t>(members_.size()); i-- > 1;) {
    const Member& m = members_[i];
    const bool expired =
        (m.state == MemberState::kDead &&
         now_us - m.state_since_us > dead_us) ||
        (m.state == MemberState::kLeft && now_us - m.state_since_us > left_us);
    if (!expired) continue;
    Emit(MemberEventKind::kRemoved, m, now_us);
    backoff_.erase(m.record->name);
    RemoveMember(i);
  }
  probe_order_.resize(members_.size() - 1);
  std::iota(probe_order_.begin(), probe_order_.end(), 1u);
  prng_.Shuffle(&probe_order_);
  probe_pos_ = 0;
}

std::optional<uint32_t> Membership::NextProbeTarget(int64_t now_us) {
  for (size_t checked = 0; checked <= members_.size(); ++checked) {
    if (probe_pos_ >= probe_order_.size()) {
      ResetProbeOrder(now_us);
      if (probe_order_.empty()) return std::nullopt;
    }
    const uint32_t idx = probe_order_[probe_pos_++];
    if (idx < members_.size() && Active(members_[idx].state)) return idx;
  }
  return std::nullopt;
}

void Membership::StartProbe(int64_t now_us) {
  const absl::Time now = At(now_us);
  next_probe_ = now + config_.probe_interval;
  if (left_) return;
  std::optional<uint32_t> idx = NextProbeTarget(now_us);
  if (!idx) return;
  const std::string target = members_[*idx].record->name;
  const uint64_t seq = next_seq_++;
  // The direct timeout is not scaled: waiting longer does not bring back a
  // lost message. The whole probe (and so the next one) stretches with our
  // local health, as memberlist does.
  probe_ = Probe{seq, target, now + config_.probe_timeout,
                 now + awareness_.Scale(config_.probe_interval)};
  ++stats_.probes;
  // Send() adds the suspicion when the target is suspect (buddy system).
  Send(target, AddressOf(target), Ping{seq, target});
}

void Membership::SendIndirectProbes(int64_t now_us) {
  probe_->indirect_sent = true;
  const std::string target = probe_->target;
  const uint64_t seq = probe_->seq;
  std::optional<uint32_t> idx = IndexOf(target);
  if (!idx || !Active(members_[*idx].state)) {
    probe_.reset();
    return;
  }
  const std::vector<uint32_t> relays =
      RandomMembers(config_.indirect_checks, *idx, /*alive_only=*/true, now_us);
  probe_->expected_nacks = static_cast<int>(relays.size());
  if (!relays.empty()) ++stats_.probes_indirect;
  for (uint32_t r : relays) {
    const std::string& relay = members_[r].record->name;
    Send(relay, AddressOf(relay), IndirectPing{seq, target, true});
  }
}

void Membership::FinishFailedProbe(int64_t now_us) {
  const Probe p = std::move(*probe_);
  probe_.reset();
  // Lifeguard: relays that could not reach the target either say so with a
  // nack. Missing nacks mean our own messages are being lost, so we are the
  // likely culprit; with no relays at all, any failure counts against us.
  const int delta =
      p.expected_nacks > 0 ? std::max(0, p.expected_nacks - p.nacks) : 1;
  awareness_.ApplyDelta(delta);
  ++stats_.probes_failed;
  std::optional<uint32_t> idx = IndexOf(p.target);
  if (!idx || !Active(members_[*idx].state)) return;
  HandleSuspect(Suspect{p.target, members_[*idx].incarnation, name_}, now_us);
}

void Membership::Gossip(int64_t now_us) {
  if (broadcasts_.empty()) return;
  const std::vector<uint32_t> targets = GossipTargets(now_us);
  for (uint32_t t : targets) {
    if (broadcasts_.empty()) return;
    const std::string& name = members_[t].record->name;
    Send(name, AddressOf(name), std::monostate());
  }
}

void Membership::PushPullWithRandomMember(int64_t now_us) {
  if (left_) return;
  // The sync soon after a join (join_sync_delay) goes, over links (see
  // GossipTargets), to a member we have a connection with: every node of
  // a mesh that starts at once makes one, and a new connection costs a
  // handshake on both sides. The periodic one is memberlist's.
  std::vector<uint32_t> t;
  if (join_sync_due_ && config_.gossip_over_links && linked_count_ > 0) {
    SampleLinked(1, &t);
  }
  join_sync_due_ = false;
  if (t.empty()) t = RandomMembers(1, kNoMember, /*alive_only=*/true, now_us);
  if (t.empty()) return;
  const std::string& name = members_[t[0]].record->name;
  SendPushPull(name, AddressOf(name), next_seq_++, false,
               /*by_fingerprint=*/true);
}

bool Membership::Eligible(const std::string& key, int64_t now_us) const {
  auto it = backoff_.find(key);
  return it == backoff_.end() || it->second.next_us <= now_us;
}

absl::Duration Membership::ReconnectBase() const {
  const int others = NumActive() - (Active(members_[0].state) ? 1 : 0);
  return others <= 0
             ? std::min(config_.join_retry_interval, config_.reconnect_interval)
             : config_.reconnect_interval;
}

void Membership::RecordAttempt(const std::string& key, int64_t now_us) {
  Backoff& b = backoff_[key];
  ++b.failures;
  const int shift = std::min(b.failures - 1, 20);
  // Alone, from the join retry interval up to the reconnect interval;
  // else from the reconnect interval up to the maximum.
  const absl::Duration base = ReconnectBase();
  const absl::Duration cap = base < config_.reconnect_interval
                                 ? config_.reconnect_interval
                                 : config_.reconnect_max_backoff;
  const absl::Duration wait = std::min(base * (int64_t{1} << shift), cap);
  b.next_us = now_us + DurUs(wait);
}

void Membership::Reconnect(int64_t now_us) {
  if (left_) return;
  std::vector<uint32_t> dead;
  if (count_[StateIndex(MemberState::kDead)] > 0) {
    for (uint32_t i = 1; i < members_.size(); ++i) {
      if (members_[i].state == MemberState::kDead &&
          Eligible(members_[i].record->name, now_us)) {
        dead.push_back(i);
      }
    }
  }
  std::vector<size_t> seeds;
  for (size_t i = 0; i < seeds_.size(); ++i) {
    const SeedState& s = seeds_[i];
    if (!s.resolved.empty()) {
      std::optional<MemberState> state = StateOf(s.resolved);
      if (state && Active(*state)) continue;
    }
    if (Eligible(SeedKey(s.address), now_us)) seeds.push_back(i);
  }
  const size_t candidates = dead.size() + seeds.size();
  if (candidates == 0) return;
  // Serf's rule: about `candidates` attempts per interval across the whole
  // cluster, however large it is; alone, always try.
  const int others = NumActive() - (Active(members_[0].state) ? 1 : 0);
  const double p =
      others <= 0 ? 1.0
                  : std::min(1.0, static_cast<double>(candidates) / others);
  if (!prng_.Bernoulli(p)) return;
  const size_t pick = prng_.Uniform(candidates);
  const uint64_t seq = next_seq_++;
  ++stats_.reconnect_attempts;
  if (pick < dead.size()) {
    const std::string name = members_[dead[pick]].record->name;
    RecordAttempt(name, now_us);
    reconnect_requests_.insert(seq);
    SendPushPull(name, AddressOf(name), seq, false);
  } else {
    const std::string address = seeds_[seeds[pick - dead.size()]].address;
    RecordAttempt(SeedKey(address), now_us);
    seed_requests_[seq] = address;
    SendPushPull("", address, seq, /*join=*/true);
  }
}

void Membership::Maintain(int64_t now_us) {
  limiter_.Prune(At(now_us));
  // Seeds that never answered leave their requests behind; they are
  // retried under new seqs, so old ones can go.
  if (seed_requests_.size() > 256) seed_requests_.clear();
  if (reconnect_requests_.size() > 256) reconnect_requests_.clear();
}

// --- Output ---

std::vector<uint32_t> Membership::RandomMembers(int k, uint32_t exclude,
                                                bool alive_only,
                                                int64_t now_us) {
  std::vector<uint32_t> out;
  if (k <= 0) return out;
  const int64_t to_the_dead = DurUs(config_.gossip_to_the_dead_time);
  auto wanted = [&](uint32_t i) {
    if (i == 0 || i == exclude) return false;
    const Member& m = members_[i];
    if (alive_only) return m.state == MemberState::kAlive;
    if (Active(m.state)) return true;
    // Recently dead members still get gossip so that they can refute.
    return m.state == MemberState::kDead &&
           now_us - m.state_since_us <= to_the_dead;
  };
  const size_t n = members_.size();
  const size_t want = static_cast<size_t>(k);
  if (n < 3 * want) {
    // Few members: an exhaustive shuffled scan cannot miss any.
    std::vector<uint32_t> all(n);
    std::iota(all.begin(), all.end(), 0u);
    prng_.Shuffle(&all);
    for (uint32_t i : all) {
      if (out.size() == want) break;
      if (wanted(i)) out.push_back(i);
    }
    return out;
  }
  for (size_t tries = 0; tries < 3 * n && out.size() < want; ++tries) {
    const uint32_t i = static_cast<uint32_t>(prng_.Uniform(n));
    if (!wanted(i) || std::find(out.begin(), out.end(), i) != out.end()) {
      continue;
    }
    out.push_back(i);
  }
  return out;
}

std::vector<uint32_t> Membership::GossipTargets(int64_t now_us) {
  std::vector<uint32_t> out = RandomMembers(config_.gossip_nodes, kNoMember,
                                            /*alive_only=*/false, now_us);
  if (!config_.gossip_over_links) return out;
  // A live member we have no connection to costs a TLS handshake on both
  // sides, more CPU than everything else a message costs. Uniform targets
  // (memberlist's) make every pair of a mesh that starts at once pay one
  // within seconds. So the gossip goes over connections we have, once we
  // have gossip_nodes of them; until then, up to gossip_new_links new ones
  // a round. Probing still reaches every member, one a probe interval, and
  // once all are linked this is memberlist's choice. The recently dead
  // keep their gossip, so that they can refute.
  const int budget =
      linked_count_ >= config_.gossip_nodes ? 0 : config_.gossip_new_links;
  size_t replace = 0;
  int fresh = 0;
  auto dropped = std::remove_if(out.begin(), out.end(), [&](uint32_t i) {
    const Member& m = members_[i];
    if (m.linked || !Active(m.state)) return false;
    if (fresh < budget) {
      ++fresh;
      return false;
    }
    ++replace;
    return true;
  });
  out.erase(dropped, out.end());
  if (replace > 0) SampleLinked(replace, &out);
  return out;
}

void Membership::SampleLinked(size_t k, std::vector<uint32_t>* out) {
  if (linked_stale_) {
    linked_.clear();
    for (uint32_t i = 1; i < members_.size(); ++i) {
      members_[i].listed = members_[i].linked;
      if (members_[i].linked) linked_.push_back(i);
    }
    linked_stale_ = false;
  }
  const size_t want = out->size() + k;
  // Rejection sampling, bounded: a few tries per target, as in
  // RandomMembers. Entries no longer linked leave the list as they are met.
  for (size_t tries = 0; tries < 4 * k + 8 && out->size() < want; ++tries) {
    if (linked_.empty()) return;
    const size_t pos = prng_.Uniform(linked_.size());
    const uint32_t i = linked_[pos];
    Member& m = members_[i];
    if (!m.linked) {
      m.listed = false;
      linked_[pos] = linked_.back();
      linked_.pop_back();
      continue;
    }
    if (!Active(m.state) ||
        std::find(out->begin(), out->end(), i) != out->end()) {
      continue;
    }
    out->push_back(i);
  }
}

std::string Membership::AddressOf(absl::string_view name) const {
  std::optional<uint32_t> idx = IndexOf(name);
  if (!idx) return "";
  const std::vector<std::string>& a = members_[*idx].record->meta.addresses;
  return a.empty() ? "" : a.front();
}

void Membership::Send(std::string to, std::string address, Body body,
                      std::vector<Update> first_updates) {
  Message msg;
  msg.body = std::move(body);
  // A ping to its target leaves the name out: the transport reaches only
  // the member it names.
  if (Ping* p = std::get_if<Ping>(&msg.body); p != nullptr && p->target == to) {
    p->target.clear();
  }
  msg.updates = std::move(first_updates);
  // Buddy system: a member we suspect (or hold dead) is told so in every
  // message we send it, so that it can refute at once instead of waiting
  // for the gossip to reach it.
  if (std::optional<uint32_t> idx = IndexOf(to); idx && *idx != 0) {
    MarkLinked(*idx);
    const Member& m = members_[*idx];
    if (m.state == MemberState::kSuspect) {
      msg.updates.emplace_back(Suspect{to, m.incarnation, name_});
    } else if (m.state == MemberState::kDead) {
      msg.updates.emplace_back(Dead{to, m.incarnation, name_});
    }
  }
  size_t used = 0;
  for (const Update& u : msg.updates) used += UpdateEncodedSize(u);
  if (used < config_.gossip_budget_bytes && !broadcasts_.empty()) {
    broadcasts_.Take(config_.gossip_budget_bytes - used,
                     RetransmitLimit(config_.retransmit_mult, NumActive()),
                     RetransmitLimit(config_.join_retransmit_mult, NumActive()),
                     &msg.updates);
  }
  outbox_.push_back(
      Outbound{std::move(to), std::move(address), std::move(msg)});
}

namespace {

// Whether our view of a member (record incarnation, state, incarnation)
// would change a peer's: a newer record, a newer incarnation, or the same
// incarnation in a graver state. The peer's MergeState applies exactly
// such views; anything else it would ignore.
bool NewsTo(const MemberSummary& ours, const MemberSummary& theirs) {
  if (ours.record_incarnation != theirs.record_incarnation) {
    return ours.record_incarnation > theirs.record_incarnation;
  }
  if (ours.incarnation != theirs.incarnation) {
    return ours.incarnation > theirs.incarnation;
  }
  return ours.state > theirs.state;
}

}  // namespace

template <typename Visit>
void Membership::ForEachInSyncOrder(Visit visit) const {
  // Live members first, so that a state too large for one message drops
  // the dead and departed, not the living.
  for (int pass = 0; pass < 2; ++pass) {
    for (const Member& m : members_) {
      if (Active(m.state) == (pass == 0)) visit(m);
    }
  }
}

std::vector<MemberDigest> Membership::Records(
    const PushPull* request, const std::vector<std::string>* names) const {
  // What the requester holds, from its summaries or (joining) its records.
  absl::flat_hash_map<absl::string_view, MemberSummary> theirs;
  if (request != nullptr) {
    theirs.reserve(request->summaries.size() + request->members.size());
    for (const MemberSummary& x : request->summaries) theirs[x.name] = x;
    for (const MemberDigest& d : request->members) {
      theirs[d.alive->name] = MemberSummary{d.alive->name, d.alive->incarnation,
                                            d.state, d.incarnation};
    }
  }
  absl::flat_hash_set<absl::string_view> wanted;
  if (names != nullptr) wanted.insert(names->begin(), names->end());
  std::vector<MemberDigest> out;
  const size_t budget = config_.max_message_bytes - kPushPullOverhead;
  size_t used = 0;
  ForEachInSyncOrder([&](const Member& m) {
    const std::string& name = m.record->name;
    if (names != nullptr && !wanted.contains(name)) return;
    if (request != nullptr) {
      auto it = theirs.find(name);
      if (it != theirs.end() &&
          !NewsTo(MemberSummary{name, m.record->incarnation, m.state,
                                m.incarnation},
                  it->second)) {
        return;
      }
    }
    MemberDigest d{m.record, m.state, m.incarnation};
    const size_t size = MemberDigestEncodedSize(d);
    if (used + size > budget) return;
    used += size;
    out.push_back(std::move(d));
  });
  return out;
}

Membership::Freshness Membership::Fresh() const {
  // A record that replaced another (a refutation, above all) goes whole: a
  // member that still suspects or holds dead the older one learns it from
  // this one message, not from a fill two messages later, which under loss
  // can come after its suspicion timed out. "Lately": as long as anyone
  // can still be suspecting on the old incarnation. A member's first
  // record replaced none, and no one can be suspecting it on an older
  // one; it goes whole only while a join's news is still spreading (a
  // node that lacks it then gets it without a round trip), one suspicion
  // timeout, so that syncs after a storm of joins are not every record
  // whole for the longer while (about 50 KB a sync at 50 nodes).
  const absl::Duration timeout = SuspicionTimeout(
      config_.suspicion_mult, NumActive(), config_.probe_interval);
  return Freshness{
      .now_us = now_us_,
      .replaced_us = DurUs(config_.suspicion_max_timeout_mult * timeout),
      .first_us = DurUs(timeout)};
}

namespace {

// splitmix64's finalizer: a stable 64-bit mix (the fingerprint travels, so
// it may not depend on the process, as absl::Hash does).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t Membership::Fingerprint() const {
  // The XOR of one hash per member: independent of the order, so the
  // sender's table and the receiver's compare however each keeps them.
  uint64_t sum = 0;
  for (const Member& m : members_) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name
    for (const char c : m.record->name) {
      h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    }
    h = Mix(h ^ Mix(m.record->incarnation));
    h = Mix(h ^ Mix(m.incarnation));
    h = Mix(h ^ static_cast<uint64_t>(m.state));
    sum ^= h;
  }
  // 0 means "no fingerprint" on the wire.
  return sum == 0 ? 1 : sum;
}

void Membership::Summarize(PushPull* pp) const {
  pp->summaries.reserve(members_.size());
  const Freshness fresh = Fresh();
  const size_t budget = config_.max_message_bytes - kPushPullOverhead;
  size_t used = 0;
  ForEachInSyncOrder([&](const Member& m) {
    if (fresh(m)) {
      MemberDigest d{m.record, m.state, m.incarnation};
      const size_t size = MemberDigestEncodedSize(d);
      if (used + size > budget) return;
      used += size;
      pp->members.push_back(std::move(d));
      return;
    }
    MemberSummary x{m.record->name, m.record->incarnation, m.state,
                    m.incarnation};
    const size_t size = MemberSummaryEncodedSize(x);
    if (used + size > budget) return;
    used += size;
    pp->summaries.push_back(std::move(x));
  });
}

void Membership::SendPushPull(std::string to, std::string address, uint64_t seq,
                              bool join, bool by_fingerprint) {
  Message msg;
  PushPull pp{seq, join};
  // Between settled members the views mostly agree: a fingerprint instead
  // of a summary per member, and summaries only when they differ (the
  // reply says so). A record that changed lately must go whole, so then
  // the request is made in full.
  if (by_fingerprint && !join) {
    by_fingerprint = std::none_of(members_.begin(), members_.end(), Fresh());
  }
  // A joiner knows few members and the receiver none of them: it sends
  // their records at once rather than a round trip later.
  if (join) {
    pp.members = Records(nullptr, nullptr);
  } else if (by_fingerprint) {
    pp.fingerprint = Fingerprint();
    ++stats_.push_pulls_by_fingerprint;
  } else {
    Summarize(&pp);
  }
  msg.body = std::move(pp);
  ++stats_.push_pulls_sent;
  outbox_.push_back(
      Outbound{std::move(to), std::move(address), std::move(msg)});
}

// --- Driver calls ---

void Membership::Join(absl::Span<const std::string> seed_addresses,
                      absl::Time now) {
  const int64_t now_us = Us(now);
  for (const std::string& address : seed_addresses) {
    if (address.empty()) continue;
    const bool known =
        std::any_of(seeds_.begin(), seeds_.end(),
                    [&](const SeedState& s) { return s.address == address; });
    if (!known) seeds_.push_back(SeedState{address, ""});
    const uint64_t seq = next_seq_++;
    seed_requests_[seq] = address;
    RecordAttempt(SeedKey(address), now_us);
    SendPushPull("", address, seq, /*join=*/true);
  }
}

absl::Status Membership::Leave(absl::Time now) {
  if (left_) return absl::FailedPreconditionError("already left");
  ASSIGN_OR_RETURN(AliveRef record, SignSelf(incarnation() + 1, true));
  const int64_t now_us = Us(now);
  left_ = true;
  probe_.reset();
  now_us_ = now_us;
  Member& self = members_[0];
  SetRecord(self, record);
  self.incarnation = record->incarnation;
  SetState(0, MemberState::kLeft, now_us);
  Emit(MemberEventKind::kLeft, self, now_us);
  Broadcast(name_, std::move(record));
  return absl::OkStatus();
}

bool Membership::leave_done() const {
  return left_ && !broadcasts_.Contains(name_);
}

absl::Status Membership::UpdateMeta(NodeMeta meta, absl::Time now) {
  if (left_) return absl::FailedPreconditionError("left the mesh");
  RETURN_IF_ERROR(NormalizeMeta(&meta));
  NodeMeta old = std::move(meta_);
  meta_ = std::move(meta);
  absl::StatusOr<AliveRef> record = SignSelf(incarnation() + 1, false);
  if (!record.ok()) {
    meta_ = std::move(old);
    return record.status();
  }
  now_us_ = Us(now);
  Member& self = members_[0];
  SetRecord(self, *record);
  self.incarnation = (*record)->incarnation;
  Emit(MemberEventKind::kUpdated, self, Us(now));
  Broadcast(name_, *std::move(record));
  return absl::OkStatus();
}

std::vector<Outbound> Membership::TakeOutbox() {
  std::vector<Outbound> out;
  out.swap(outbox_);
  return out;
}

std::vector<MemberEvent> Membership::TakeEvents() {
  std::vector<MemberEvent> out;
  out.swap(events_);
  return out;
}

std::vector<MemberSnapshot> Membership::Snapshot() const {
  std::vector<MemberSnapshot> out;
  out.reserve(members_.size());
  for (const Member& m : members_) out.push_back(SnapshotOf(m));
  return out;
}

std::optional<MemberSnapshot> Membership::Find(absl::string_view name) const {
  std::optional<uint32_t> idx = IndexOf(name);
  if (!idx) return std::nullopt;
  return SnapshotOf(members_[*idx]);
}

std::optional<MemberState> Membership::StateOf(absl::string_view name) const {
  std::optional<uint32_t> idx = IndexOf(name);
  if (!idx) return std::nullopt;
  return members_[*idx].state;
}

std::vector<std::string> Membership::seeds() const {
  std::vector<std::string> out;
  for (const SeedState& s : seeds_) out.push_back(s.address);
  return out;
}

}  // namespace mycel::membership
