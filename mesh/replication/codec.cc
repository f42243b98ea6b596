#include "mesh/replication/codec.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mycel::replication {
namespace {

constexpr uint64_t kMaxSeq = std::numeric_limits<int64_t>::max();
// An ECDSA P-256 signature in DER is at most 72 bytes; room for others.
constexpr size_t kMaxSignatureBytes = 512;

}  // namespace

v1::ReplicationChange ToProto(const store::ObjectChange& c) {
  v1::ReplicationChange p;
  p.set_origin(c.stamp.origin);
  p.set_seq(static_cast<uint64_t>(c.stamp.seq));
  p.set_hlc(c.stamp.hlc);
  p.set_namespace_(c.ns);
  p.set_key(c.key);
  if (c.value.has_value()) {
    p.set_value(*c.value);
  } else {
    p.set_deleted(true);
  }
  p.set_signature(c.stamp.signature);
  return p;
}

v1::ReplicationChange ToProto(const store::Object& row) {
  return ToProto(store::ObjectChange{
      .stamp = row.stamp, .ns = row.ns, .key = row.key, .value = row.value});
}

absl::StatusOr<store::ObjectChange> FromProto(const v1::ReplicationChange& p) {
  if (p.seq() == 0 || p.seq() > kMaxSeq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq: ", p.seq(), " from origin ", p.origin(), " is out of range"));
  }
  if (p.hlc() > kMaxSeq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hlc: ", p.hlc(), " from origin ", p.origin(), " is out of range"));
  }
  if (p.signature().size() > kMaxSignatureBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("signature: ", p.signature().size(), " bytes from origin ",
                     p.origin(), " is over ", kMaxSignatureBytes));
  }
  if (p.deleted() && !p.value().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value: a delete (", p.origin(), ":", p.seq(), ") carries a value"));
  }
  store::ObjectChange c;
  c.stamp.origin = p.origin();
  c.stamp.seq = static_cast<int64_t>(p.seq());
  c.stamp.hlc = p.hlc();
  c.stamp.signature = p.signature();
  c.ns = p.namespace_();
  c.key = p.key();
  if (!p.deleted()) c.value = p.value();
  return c;
}

void ToProto(const store::VersionVector& v,
             google::protobuf::RepeatedPtrField<v1::ReplicationVersion>* out) {
  for (const auto& [origin, seq] : v) {
    v1::ReplicationVersion* e = out->Add();
    e->set_origin(origin);
    e->set_seq(static_cast<uint64_t>(seq));
  }
}

absl::StatusOr<store::VersionVector> FromProto(
    const google::protobuf::RepeatedPtrField<v1::ReplicationVersion>& p) {
  store::VersionVector v;
  for (const v1::ReplicationVersion& e : p) {
    if (e.origin().empty() || e.seq() > kMaxSeq) {
      return absl::InvalidArgumentError(absl::StrCat(
          "versions: entry (\"", e.origin(), "\", ", e.seq(), ") is invalid"));
    }
    v[e.origin()] = static_cast<int64_t>(e.seq());
  }
  return v;
}

}  // namespace mycel::replication
