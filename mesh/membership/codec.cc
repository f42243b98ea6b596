#include "mesh/membership/codec.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mesh/membership/internal/wire_size.h"

namespace mycel::membership {
namespace {

using internal::BoolField;
using internal::Fixed64Field;
using internal::LenField;
using internal::StringField;
using internal::VarintField;
using internal::VarintSize;

// Field numbers, as in gossip.proto.
enum AliveField {
  kAName = 1,
  kAInc,
  kAAddr,
  kALabels,
  kACap,
  kALeaving,
  kASig,
  kACert
};
enum MessageField {
  kMFrom = 1,
  kMPing,
  kMAck,
  kMNack,
  kMIndirect,
  kMPushPull,
  kMUpdates
};

size_t AliveSize(const Alive& a) {
  size_t n = StringField(kAName, a.name) + VarintField(kAInc, a.incarnation);
  for (const std::string& addr : a.meta.addresses) {
    n += LenField(kAAddr, addr.size());
  }
  // Map entries always carry both key (1) and value (2).
  for (const auto& [k, v] : a.meta.labels) {
    n += LenField(kALabels, LenField(1, k.size()) + LenField(2, v.size()));
  }
  for (const auto& [k, v] : a.meta.capacity) {
    n += LenField(kACap, LenField(1, k.size()) + 1 +
                             VarintSize(static_cast<uint64_t>(v)));
  }
  n += BoolField(kALeaving, a.leaving) + StringField(kASig, a.signature) +
       StringField(kACert, a.certificate);
  return n;
}

size_t NoticeSize(absl::string_view name, uint64_t inc,
                  absl::string_view from) {
  return StringField(1, name) + VarintField(2, inc) + StringField(3, from);
}

size_t UpdatePayloadSize(const Update& u) {
  if (const AliveRef* a = std::get_if<AliveRef>(&u)) {
    return LenField(1, AliveSize(**a));
  }
  if (const Suspect* s = std::get_if<Suspect>(&u)) {
    return LenField(2, NoticeSize(s->name, s->incarnation, s->from));
  }
  const Dead& d = std::get<Dead>(u);
  return LenField(3, NoticeSize(d.name, d.incarnation, d.from));
}

size_t DigestPayloadSize(const MemberDigest& d) {
  return LenField(1, AliveSize(*d.alive)) +
         VarintField(2, static_cast<uint64_t>(d.state)) +
         VarintField(3, d.incarnation);
}

size_t SummaryPayloadSize(const MemberSummary& s) {
  return StringField(1, s.name) + VarintField(2, s.record_incarnation) +
         VarintField(3, static_cast<uint64_t>(s.state)) +
         VarintField(4, s.incarnation - s.record_incarnation);
}

size_t BodySize(const Body& body) {
  struct Visitor {
    size_t operator()(const std::monostate&) { return 0; }
    size_t operator()(const Ping& p) {
      return LenField(kMPing, VarintField(1, p.seq) + StringField(2, p.target));
    }
    size_t operator()(const Ack& a) {
      return LenField(kMAck, VarintField(1, a.seq));
    }
    size_t operator()(const Nack& a) {
      return LenField(kMNack, VarintField(1, a.seq));
    }
    size_t operator()(const IndirectPing& p) {
      return LenField(kMIndirect, VarintField(1, p.seq) +
                                      StringField(2, p.target) +
                                      BoolField(3, p.nack));
    }
    size_t operator()(const PushPull& p) {
      size_t n =
          VarintField(1, p.seq) + BoolField(2, p.join) + BoolField(3, p.reply);
      for (const MemberDigest& d : p.members) n += MemberDigestEncodedSize(d);
      for (const MemberSummary& m : p.summaries) {
        n += MemberSummaryEncodedSize(m);
      }
      for (const std::string& w : p.want) n += LenField(6, w.size());
      n += BoolField(7, p.fill) + Fixed64Field(8, p.fingerprint) +
           BoolField(9, p.mismatch);
      return LenField(kMPushPull, n);
    }
  };
  return std::visit(Visitor{}, body);
}

v1::MemberState StateToProto(MemberState s) {
  return static_cast<v1::MemberState>(static_cast<int>(s));
}

absl::StatusOr<MemberState> StateFromProto(v1::MemberState s) {
  switch (s) {
    case v1::MEMBER_STATE_ALIVE:
      return MemberState::kAlive;
    case v1::MEMBER_STATE_SUSPECT:
      return MemberState::kSuspect;
    case v1::MEMBER_STATE_DEAD:
      return MemberState::kDead;
    case v1::MEMBER_STATE_LEFT:
      return MemberState::kLeft;
    default:
      return absl::InvalidArgumentError("push_pull.members.state: unknown");
  }
}

// Decodes without validating; callers validate the whole message once.
Alive AliveFromProto(const v1::GossipAlive& p) {
  Alive a;
  a.name = p.name();
  a.incarnation = p.incarnation();
  a.meta.addresses.assign(p.addresses().begin(), p.addresses().end());
  for (const auto& [k, v] : p.labels()) a.meta.labels.emplace_back(k, v);
  for (const auto& [k, v] : p.capacity()) a.meta.capacity.emplace_back(k, v);
  // Map keys are unique, so this only sorts.
  (void)NormalizeMeta(&a.meta);
  a.leaving = p.leaving();
  a.signature = p.signature();
  a.certificate = p.certificate();
  return a;
}

}  // namespace

size_t UpdateEncodedSize(const Update& update) {
  return LenField(kMUpdates, UpdatePayloadSize(update));
}

size_t MemberDigestEncodedSize(const MemberDigest& digest) {
  return LenField(4, DigestPayloadSize(digest));
}

size_t MemberSummaryEncodedSize(const MemberSummary& summary) {
  return LenField(5, SummaryPayloadSize(summary));
}

size_t EncodedSize(const Message& message) {
  size_t n = StringField(kMFrom, message.from) + BodySize(message.body);
  for (const Update& u : message.updates) n += UpdateEncodedSize(u);
  return n;
}

void ToProto(const Alive& a, v1::GossipAlive* out) {
  out->set_name(a.name);
  out->set_incarnation(a.incarnation);
  for (const std::string& addr : a.meta.addresses) out->add_addresses(addr);
  for (const auto& [k, v] : a.meta.labels) (*out->mutable_labels())[k] = v;
  for (const auto& [k, v] : a.meta.capacity) (*out->mutable_capacity())[k] = v;
  out->set_leaving(a.leaving);
  out->set_signature(a.signature);
  out->set_certificate(a.certificate);
}

void ToProto(const Message& m, v1::GossipMessage* out) {
  out->set_from(m.from);
  struct Visitor {
    v1::GossipMessage* out;
    void operator()(const std::monostate&) {}
    void operator()(const Ping& p) {
      out->mutable_ping()->set_seq(p.seq);
      out->mutable_ping()->set_target(p.target);
    }
    void operator()(const Ack& a) { out->mutable_ack()->set_seq(a.seq); }
    void operator()(const Nack& a) { out->mutable_nack()->set_seq(a.seq); }
    void operator()(const IndirectPing& p) {
      v1::GossipIndirectPing* q = out->mutable_indirect_ping();
      q->set_seq(p.seq);
      q->set_target(p.target);
      q->set_nack(p.nack);
    }
    void operator()(const PushPull& p) {
      v1::GossipPushPull* q = out->mutable_push_pull();
      q->set_seq(p.seq);
      q->set_join(p.join);
      q->set_reply(p.reply);
      for (const MemberDigest& d : p.members) {
        v1::GossipMemberState* s = q->add_members();
        ToProto(*d.alive, s->mutable_alive());
        s->set_state(StateToProto(d.state));
        s->set_incarnation(d.incarnation);
      }
      for (const MemberSummary& m : p.summaries) {
        v1::GossipMemberSummary* s = q->add_summaries();
        s->set_name(m.name);
        s->set_record_incarnation(m.record_incarnation);
        s->set_state(StateToProto(m.state));
        s->set_incarnation_above_record(m.incarnation - m.record_incarnation);
      }
      for (const std::string& w : p.want) q->add_want(w);
      q->set_fill(p.fill);
      q->set_fingerprint(p.fingerprint);
      q->set_mismatch(p.mismatch);
    }
  };
  std::visit(Visitor{out}, m.body);
  for (const Update& u : m.updates) {
    v1::GossipUpdate* q = out->add_updates();
    if (const AliveRef* a = std::get_if<AliveRef>(&u)) {
      ToProto(**a, q->mutable_alive());
    } else if (const Suspect* s = std::get_if<Suspect>(&u)) {
      q->mutable_suspect()->set_name(s->name);
      q->mutable_suspect()->set_incarnation(s->incarnation);
      q->mutable_suspect()->set_from(s->from);
    } else {
      const Dead& d = std::get<Dead>(u);
      q->mutable_dead()->set_name(d.name);
      q->mutable_dead()->set_incarnation(d.incarnation);
      q->mutable_dead()->set_from(d.from);
    }
  }
}

absl::StatusOr<Alive> FromProto(const v1::GossipAlive& proto) {
  Alive a = AliveFromProto(proto);
  if (absl::Status s = ValidateAlive(a); !s.ok()) return s;
  return a;
}

absl::StatusOr<Message> FromProto(const v1::GossipMessage& p) {
  Message m;
  m.from = p.from();
  switch (p.body_case()) {
    case v1::GossipMessage::BODY_NOT_SET:
      break;
    case v1::GossipMessage::kPing:
      m.body = Ping{p.ping().seq(), p.ping().target()};
      break;
    case v1::GossipMessage::kAck:
      m.body = Ack{p.ack().seq()};
      break;
    case v1::GossipMessage::kNack:
      m.body = Nack{p.nack().seq()};
      break;
    case v1::GossipMessage::kIndirectPing:
      m.body = IndirectPing{p.indirect_ping().seq(), p.indirect_ping().target(),
                            p.indirect_ping().nack()};
      break;
    case v1::GossipMessage::kPushPull: {
      const v1::GossipPushPull& q = p.push_pull();
      PushPull pp{q.seq(), q.join(), q.reply(), {}, {}, {}, q.fill()};
      pp.members.reserve(q.members_size());
      for (const v1::GossipMemberState& s : q.members()) {
        if (!s.has_alive()) {
          return absl::InvalidArgumentError("push_pull.members.alive: missing");
        }
        absl::StatusOr<MemberState> state = StateFromProto(s.state());
        if (!state.ok()) return state.status();
        pp.members.push_back(MemberDigest{
            std::make_shared<const Alive>(AliveFromProto(s.alive())), *state,
            s.incarnation()});
      }
      pp.summaries.reserve(q.summaries_size());
      for (const v1::GossipMemberSummary& s : q.summaries()) {
        absl::StatusOr<MemberState> state = StateFromProto(s.state());
        if (!state.ok()) {
          return absl::InvalidArgumentError(
              "push_pull.summaries.state: unknown");
        }
        if (s.incarnation_above_record() >
            UINT64_MAX - s.record_incarnation()) {
          return absl::InvalidArgumentError(
              "push_pull.summaries.incarnation_above_record: overflows");
        }
        pp.summaries.push_back(MemberSummary{
            s.name(), s.record_incarnation(), *state,
            s.record_incarnation() + s.incarnation_above_record()});
      }
      pp.want.assign(q.want().begin(), q.want().end());
      pp.fingerprint = q.fingerprint();
      pp.mismatch = q.mismatch();
      m.body = std::move(pp);
      break;
    }
  }
  m.updates.reserve(p.updates_size());
  for (const v1::GossipUpdate& u : p.updates()) {
    switch (u.update_case()) {
      case v1::GossipUpdate::kAlive:
        m.updates.emplace_back(
            std::make_shared<const Alive>(AliveFromProto(u.alive())));
        break;
      case v1::GossipUpdate::kSuspect:
        m.updates.emplace_back(Suspect{
            u.suspect().name(), u.suspect().incarnation(), u.suspect().from()});
        break;
      case v1::GossipUpdate::kDead:
        m.updates.emplace_back(
            Dead{u.dead().name(), u.dead().incarnation(), u.dead().from()});
        break;
      case v1::GossipUpdate::UPDATE_NOT_SET:
        return absl::InvalidArgumentError("updates: empty update");
    }
  }
  if (absl::Status s = ValidateMessage(m); !s.ok()) return s;
  return m;
}

std::string EncodeMessage(const Message& message) {
  v1::GossipMessage proto;
  ToProto(message, &proto);
  return proto.SerializeAsString();
}

absl::StatusOr<Message> DecodeMessage(absl::string_view bytes,
                                      size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("message: ", bytes.size(),
                                                     " bytes, above the ",
                                                     max_bytes, "-byte limit"));
  }
  v1::GossipMessage proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("message: not a GossipMessage");
  }
  return FromProto(proto);
}

std::string EncodeAlive(const Alive& alive) {
  v1::GossipAlive proto;
  ToProto(alive, &proto);
  return proto.SerializeAsString();
}

absl::StatusOr<Alive> DecodeAlive(absl::string_view bytes) {
  v1::GossipAlive proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("alive: not a GossipAlive");
  }
  return FromProto(proto);
}

}  // namespace mycel::membership
