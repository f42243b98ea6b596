#include "mesh/pki/revocation_list.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/internal/openssl.h"
#include "runtime/status.h"

namespace mycel::pki {
namespace {

constexpr absl::string_view kMagic = "MYCELRVL";
constexpr uint16_t kVersion = 1;
constexpr size_t kMaxSerialBytes = 20;
constexpr uint8_t kWireNode = 1;
constexpr uint8_t kWireUser = 2;

absl::Time ToSeconds(absl::Time t) {
  return absl::FromUnixSeconds(absl::ToUnixSeconds(t));
}

void PutUint(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}

// Reads big-endian integers and byte strings, tracking the offset for
// error messages.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}

  absl::StatusOr<uint64_t> Uint(int bytes, absl::string_view what) {
    if (remaining() < static_cast<size_t>(bytes)) return Truncated(what);
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v = (v << 8) | static_cast<unsigned char>(data_[offset_ + i]);
    }
    offset_ += static_cast<size_t>(bytes);
    return v;
  }

  absl::StatusOr<absl::string_view> Bytes(size_t n, absl::string_view what) {
    if (remaining() < n) return Truncated(what);
    absl::string_view out = data_.substr(offset_, n);
    offset_ += n;
    return out;
  }

  size_t offset() const { return offset_; }
  size_t remaining() const { return data_.size() - offset_; }

 private:
  absl::Status Truncated(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("revocation list: truncated at byte ", offset_,
                     " (reading ", what, ")"));
  }

  absl::string_view data_;
  size_t offset_ = 0;
};

absl::Status ListError(absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("revocation list: ", reason));
}

}  // namespace

absl::StatusOr<std::string> NormalizeSerial(absl::string_view serial) {
  std::string hex;
  hex.reserve(serial.size());
  for (char c : serial) {
    if (c != ':') hex.push_back(c);
  }
  if (hex.empty()) return absl::InvalidArgumentError("serial: empty");
  if (hex.size() % 2 != 0) hex.insert(hex.begin(), '0');
  absl::StatusOr<std::string> bytes = internal::Unhex(hex, "serial");
  if (!bytes.ok()) return bytes.status();
  size_t first = bytes->find_first_not_of('\0');
  if (first == std::string::npos) return std::string("00");
  bytes->erase(0, first);
  if (bytes->size() > kMaxSerialBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("serial: longer than ", kMaxSerialBytes, " bytes"));
  }
  return internal::Hex(*bytes);
}

absl::Status RevocationList::RevokeSerial(absl::string_view serial,
                                          absl::Time at) {
  ASSIGN_OR_RETURN(std::string key, NormalizeSerial(serial));
  at = ToSeconds(at);
  auto [it, inserted] = serials_.emplace(std::move(key), at);
  if (inserted) {
    ++generation_;
  } else if (at < it->second) {
    it->second = at;
    ++generation_;
  }
  return absl::OkStatus();
}

absl::Status RevocationList::RevokeIdentity(IdentityKind kind,
                                            absl::string_view name,
                                            absl::Time at) {
  RETURN_IF_ERROR(ValidateIdentityName(name));
  at = ToSeconds(at);
  auto [it, inserted] =
      identities_.emplace(IdentityKey(kind, std::string(name)), at);
  if (inserted) {
    ++generation_;
  } else if (at > it->second) {
    it->second = at;
    ++generation_;
  }
  return absl::OkStatus();
}

std::optional<absl::Time> RevocationList::SerialRevokedAt(
    absl::string_view serial) const {
  absl::StatusOr<std::string> key = NormalizeSerial(serial);
  if (!key.ok()) return std::nullopt;
  auto it = serials_.find(*key);
  if (it == serials_.end()) return std::nullopt;
  return it->second;
}

std::optional<absl::Time> RevocationList::IdentityRevokedAt(
    IdentityKind kind, absl::string_view name) const {
  auto it = identities_.find(IdentityKey(kind, std::string(name)));
  if (it == identities_.end()) return std::nullopt;
  return it->second;
}

absl::Status RevocationList::Check(const PeerIdentity& peer) const {
  if (std::optional<absl::Time> at = SerialRevokedAt(peer.serial)) {
    return absl::UnauthenticatedError(absl::StrCat(
        "revoked: serial ", peer.serial, " at ", internal::TimeString(*at)));
  }
  if (std::optional<absl::Time> at = IdentityRevokedAt(peer.kind, peer.name)) {
    absl::Time issued = peer.not_before + kNotBeforeBackdate;
    if (issued <= *at) {
      return absl::UnauthenticatedError(absl::StrCat(
          "revoked: ", IdentityKindName(peer.kind), " ", peer.name, " at ",
          internal::TimeString(*at), " (certificate issued ",
          internal::TimeString(issued), ")"));
    }
  }
  return absl::OkStatus();
}

void RevocationList::Merge(const RevocationList& other) {
  RevocationList merged = *this;
  for (const auto& [serial, at] : other.serials_) {
    auto [it, inserted] = merged.serials_.emplace(serial, at);
    if (!inserted) it->second = std::min(it->second, at);
  }
  for (const auto& [key, at] : other.identities_) {
    auto [it, inserted] = merged.identities_.emplace(key, at);
    if (!inserted) it->second = std::max(it->second, at);
  }
  bool differs_from_this =
      merged.serials_ != serials_ || merged.identities_ != identities_;
  bool differs_from_other = merged.serials_ != other.serials_ ||
                            merged.identities_ != other.identities_;
  merged.generation_ = std::max(generation_, other.generation_) +
                       (differs_from_this && differs_from_other ? 1 : 0);
  *this = std::move(merged);
}

std::string RevocationList::Serialize() const {
  std::string out(kMagic);
  PutUint(&out, kVersion, 2);
  PutUint(&out, generation_, 8);
  PutUint(&out, serials_.size(), 4);
  for (const auto& [serial, at] : serials_) {
    // Keys are NormalizeSerial output, so this cannot fail.
    std::string bytes = *internal::Unhex(serial, "serial");
    out.push_back(static_cast<char>(bytes.size()));
    out += bytes;
    PutUint(&out, static_cast<uint64_t>(absl::ToUnixSeconds(at)), 8);
  }
  PutUint(&out, identities_.size(), 4);
  for (const auto& [key, at] : identities_) {
    out.push_back(static_cast<char>(
        key.first == IdentityKind::kNode ? kWireNode : kWireUser));
    out.push_back(static_cast<char>(key.second.size()));
    out += key.second;
    PutUint(&out, static_cast<uint64_t>(absl::ToUnixSeconds(at)), 8);
  }
  return out;
}

absl::StatusOr<RevocationList> RevocationList::Parse(absl::string_view data) {
  Reader in(data);
  ASSIGN_OR_RETURN(absl::string_view magic, in.Bytes(kMagic.size(), "magic"));
  if (magic != kMagic) return ListError("bad magic (not a revocation list)");
  ASSIGN_OR_RETURN(uint64_t version, in.Uint(2, "version"));
  if (version != kVersion) {
    return ListError(absl::StrCat("unsupported version ", version,
                                  " (this build reads ", kVersion, ")"));
  }
  RevocationList list;
  ASSIGN_OR_RETURN(list.generation_, in.Uint(8, "generation"));

  ASSIGN_OR_RETURN(uint64_t serial_count, in.Uint(4, "serial count"));
  // Each entry takes at least 10 bytes: refuse counts the data cannot hold
  // before looping on them.
  if (serial_count > in.remaining() / 10) {
    return ListError(
        absl::StrCat("serial count ", serial_count, " exceeds the data"));
  }
  const std::string* previous_serial = nullptr;
  for (uint64_t i = 0; i < serial_count; ++i) {
    std::string what = absl::StrCat("serial entry ", i);
    ASSIGN_OR_RETURN(uint64_t len, in.Uint(1, what));
    if (len == 0 || len > kMaxSerialBytes) {
      return ListError(
          absl::StrCat(what, ": length ", len, " not in 1..", kMaxSerialBytes));
    }
    ASSIGN_OR_RETURN(absl::string_view bytes, in.Bytes(len, what));
    if (bytes[0] == '\0' && len > 1) {
      return ListError(absl::StrCat(what, ": leading zero byte"));
    }
    ASSIGN_OR_RETURN(uint64_t at, in.Uint(8, what));
    std::string serial = internal::Hex(bytes);
    if (previous_serial != nullptr && serial <= *previous_serial) {
      return ListError(absl::StrCat(what, ": not sorted or duplicate"));
    }
    auto it = list.serials_
                  .emplace(std::move(serial),
                           absl::FromUnixSeconds(static_cast<int64_t>(at)))
                  .first;
    previous_serial = &it->first;
  }

  ASSIGN_OR_RETURN(uint64_t identity_count, in.Uint(4, "identity count"));
  if (identity_count > in.remaining() / 11) {
    return ListError(
        absl::StrCat("identity count ", identity_count, " exceeds the data"));
  }
  const IdentityKey* previous_identity = nullptr;
  for (uint64_t i = 0; i < identity_count; ++i) {
    std::string what = absl::StrCat("identity entry ", i);
    ASSIGN_OR_RETURN(uint64_t wire_kind, in.Uint(1, what));
    if (wire_kind != kWireNode && wire_kind != kWireUser) {
      return ListError(absl::StrCat(what, ": unknown kind ", wire_kind));
    }
    ASSIGN_OR_RETURN(uint64_t len, in.Uint(1, what));
    ASSIGN_OR_RETURN(absl::string_view name, in.Bytes(len, what));
    absl::Status name_ok = ValidateIdentityName(name);
    if (!name_ok.ok()) {
      return ListError(absl::StrCat(what, ": ", name_ok.message()));
    }
    ASSIGN_OR_RETURN(uint64_t at, in.Uint(8, what));
    IdentityKey key(
        wire_kind == kWireNode ? IdentityKind::kNode : IdentityKind::kUser,
        std::string(name));
    if (previous_identity != nullptr && key <= *previous_identity) {
      return ListError(absl::StrCat(what, ": not sorted or duplicate"));
    }
    auto it = list.identities_
                  .emplace(std::move(key),
                           absl::FromUnixSeconds(static_cast<int64_t>(at)))
                  .first;
    previous_identity = &it->first;
  }
  if (in.remaining() != 0) {
    return ListError(
        absl::StrCat(in.remaining(), " unexpected bytes after the last entry"));
  }
  return list;
}

}  // namespace mycel::pki
