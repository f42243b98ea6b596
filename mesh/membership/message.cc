#include "mesh/membership/message.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mycel::membership {
namespace {

absl::Status CheckName(absl::string_view field, absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes ||
      name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must be 1-", kMaxNameBytes, " bytes without NUL"));
  }
  return absl::OkStatus();
}

template <typename V>
bool SortedUnique(const std::vector<std::pair<std::string, V>>& kv) {
  for (size_t i = 1; i < kv.size(); ++i) {
    if (!(kv[i - 1].first < kv[i].first)) return false;
  }
  return true;
}

absl::Status CheckMember(absl::string_view field, MemberState state) {
  switch (state) {
    case MemberState::kAlive:
    case MemberState::kSuspect:
    case MemberState::kDead:
    case MemberState::kLeft:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown state"));
}

}  // namespace

absl::string_view MemberStateName(MemberState state) {
  switch (state) {
    case MemberState::kAlive:
      return "alive";
    case MemberState::kSuspect:
      return "suspect";
    case MemberState::kDead:
      return "dead";
    case MemberState::kLeft:
      return "left";
  }
  return "unknown";
}

absl::Status NormalizeMeta(NodeMeta* meta) {
  auto by_key = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::sort(meta->labels.begin(), meta->labels.end(), by_key);
  std::sort(meta->capacity.begin(), meta->capacity.end(), by_key);
  if (!SortedUnique(meta->labels))
    return absl::InvalidArgumentError("labels: repeated key");
  if (!SortedUnique(meta->capacity))
    return absl::InvalidArgumentError("capacity: repeated key");
  return absl::OkStatus();
}

absl::Status ValidateAlive(const Alive& alive) {
  if (absl::Status s = CheckName("alive.name", alive.name); !s.ok()) return s;
  const NodeMeta& m = alive.meta;
  if (m.addresses.size() > kMaxAddresses)
    return absl::InvalidArgumentError(
        absl::StrCat("alive.addresses: more than ", kMaxAddresses));
  for (const std::string& a : m.addresses) {
    if (a.empty() || a.size() > kMaxAddressBytes)
      return absl::InvalidArgumentError("alive.addresses: bad length");
  }
  if (m.labels.size() > kMaxLabels)
    return absl::InvalidArgumentError(
        absl::StrCat("alive.labels: more than ", kMaxLabels));
  for (const auto& [k, v] : m.labels) {
    if (k.empty() || k.size() > kMaxLabelKeyBytes ||
        v.size() > kMaxLabelValueBytes)
      return absl::InvalidArgumentError("alive.labels: bad key or value");
  }
  if (m.capacity.size() > kMaxCapacityEntries)
    return absl::InvalidArgumentError(
        absl::StrCat("alive.capacity: more than ", kMaxCapacityEntries));
  for (const auto& kv : m.capacity) {
    if (kv.first.empty() || kv.first.size() > kMaxLabelKeyBytes)
      return absl::InvalidArgumentError("alive.capacity: bad key");
  }
  if (!SortedUnique(m.labels) || !SortedUnique(m.capacity))
    return absl::InvalidArgumentError(
        "alive.labels/capacity: keys not sorted and unique");
  if (alive.signature.empty() || alive.signature.size() > kMaxSignatureBytes)
    return absl::InvalidArgumentError("alive.signature: bad length");
  if (alive.certificate.empty() ||
      alive.certificate.size() > kMaxCertificateBytes)
    return absl::InvalidArgumentError("alive.certificate: bad length");
  return absl::OkStatus();
}

absl::Status ValidateMessage(const Message& message) {
  // Empty: the sender the transport authenticated.
  if (!message.from.empty()) {
    if (absl::Status s = CheckName("from", message.from); !s.ok()) return s;
  }
  if (message.updates.size() > kMaxUpdatesPerMessage)
    return absl::InvalidArgumentError(
        absl::StrCat("updates: more than ", kMaxUpdatesPerMessage));
  for (const Update& u : message.updates) {
    if (const AliveRef* a = std::get_if<AliveRef>(&u)) {
      if (*a == nullptr) return absl::InvalidArgumentError("updates: empty");
      if (absl::Status s = ValidateAlive(**a); !s.ok()) return s;
    } else if (const Suspect* s = std::get_if<Suspect>(&u)) {
      if (absl::Status st = CheckName("suspect.name", s->name); !st.ok())
        return st;
      if (absl::Status st = CheckName("suspect.from", s->from); !st.ok())
        return st;
    } else {
      const Dead& d = std::get<Dead>(u);
      if (absl::Status st = CheckName("dead.name", d.name); !st.ok()) return st;
      if (absl::Status st = CheckName("dead.from", d.from); !st.ok()) return st;
    }
  }
  if (const Ping* p = std::get_if<Ping>(&message.body)) {
    // Empty: the receiver.
    return p->target.empty() ? absl::OkStatus()
                             : CheckName("ping.target", p->target);
  }
  if (const IndirectPing* p = std::get_if<IndirectPing>(&message.body)) {
    return CheckName("indirect_ping.target", p->target);
  }
  if (const PushPull* p = std::get_if<PushPull>(&message.body)) {
    for (const MemberDigest& d : p->members) {
      if (d.alive == nullptr)
        return absl::InvalidArgumentError("push_pull.members: no record");
      if (absl::Status s = ValidateAlive(*d.alive); !s.ok()) return s;
      if (absl::Status s = CheckMember("push_pull.members.state", d.state);
          !s.ok())
        return s;
      if (d.incarnation < d.alive->incarnation)
        return absl::InvalidArgumentError(
            "push_pull.members.incarnation: older than its record");
    }
    for (const MemberSummary& m : p->summaries) {
      if (absl::Status s = CheckName("push_pull.summaries.name", m.name);
          !s.ok())
        return s;
      if (absl::Status s = CheckMember("push_pull.summaries.state", m.state);
          !s.ok())
        return s;
      if (m.incarnation < m.record_incarnation)
        return absl::InvalidArgumentError(
            "push_pull.summaries.incarnation: older than its record");
    }
    for (const std::string& w : p->want) {
      if (absl::Status s = CheckName("push_pull.want", w); !s.ok()) return s;
    }
    if (p->fill &&
        (p->reply || p->join || !p->summaries.empty() || !p->want.empty()))
      return absl::InvalidArgumentError("push_pull.fill: carries records only");
    if (!p->reply && !p->want.empty())
      return absl::InvalidArgumentError("push_pull.want: only in a reply");
  }
  return absl::OkStatus();
}

}  // namespace mycel::membership
