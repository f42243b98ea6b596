// The mesh's revocation list: certificate serials and identity names that
// servers refuse on every handshake and call.
#ifndef MYCEL_MESH_PKI_REVOCATION_LIST_H_
#define MYCEL_MESH_PKI_REVOCATION_LIST_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/pki/peer_identity.h"
#include "mesh/pki/spiffe_id.h"

namespace mycel::pki {

// The canonical form of a serial typed by a user or printed by a tool:
// hex digits, case-insensitive, optionally separated by ':' (as `openssl
// x509 -serial` and browsers print them), leading zero bytes dropped,
// returned as lower-case hex with two digits per byte. INVALID_ARGUMENT for
// anything else or more than 20 bytes (RFC 5280's limit).
absl::StatusOr<std::string> NormalizeSerial(absl::string_view serial);

// A set of revoked certificate serials and revoked identities, each with
// the time it was revoked, and a generation number.
//
//  - A serial entry revokes that one certificate.
//  - An identity entry (kind + name) revokes every certificate of that
//    identity issued at or before the entry's time, where a certificate's
//    issue time is its notBefore + kNotBeforeBackdate. So a revoked node or
//    user can be let back in by issuing it a new certificate afterwards
//    (a new join token, `user add`), while every certificate it held before
//    stays refused. The comparison is against the issuing node's clock; skew
//    between the revoking and issuing nodes shifts the boundary by as much.
//
// The generation grows by one with every change, so of two copies of one
// list the higher generation is the newer. Copies changed concurrently on
// different nodes must be merged with Merge() (a union, which never loses a
// revocation), not replaced.
//
// A copyable value; not thread-safe for mutation (share an immutable copy,
// e.g. behind a shared_ptr<const RevocationList> swapped under a mutex).
class RevocationList {
 public:
  using IdentityKey = std::pair<IdentityKind, std::string>;

  RevocationList() = default;

  uint64_t generation() const { return generation_; }
  void set_generation(uint64_t generation) { generation_ = generation; }

  // Revokes the certificate with `serial` (any form NormalizeSerial
  // accepts) at `at`. Revoking it again keeps the earliest time.
  absl::Status RevokeSerial(absl::string_view serial, absl::Time at);

  // Revokes every certificate of `kind`/`name` issued at or before `at`.
  // Revoking it again keeps the latest time (which covers more).
  absl::Status RevokeIdentity(IdentityKind kind, absl::string_view name,
                              absl::Time at);

  // When the serial / identity was revoked, or nullopt.
  std::optional<absl::Time> SerialRevokedAt(absl::string_view serial) const;
  std::optional<absl::Time> IdentityRevokedAt(IdentityKind kind,
                                              absl::string_view name) const;

  // OK unless `peer` is revoked, else UNAUTHENTICATED:
  // "revoked: serial 0a1b... at 2025-01-31T12:00:00Z" or
  // "revoked: node web-1 at 2025-01-31T12:00:00Z".
  absl::Status Check(const PeerIdentity& peer) const;

  // Adds every entry of `other` (earliest time per serial, latest per
  // identity) and takes the larger generation, plus one if the result
  // differs from both inputs.
  void Merge(const RevocationList& other);

  const std::map<std::string, absl::Time>& serials() const { return serials_; }
  const std::map<IdentityKey, absl::Time>& identities() const {
    return identities_;
  }
  bool empty() const { return serials_.empty() && identities_.empty(); }

  // The binary format, version 1 (all integers big-endian):
  //   "MYCELRVL"                  8 bytes, magic
  //   version                     u16 = 1
  //   generation                  u64
  //   serial count                u32
  //   per serial:   length u8 (1..20), serial bytes (big-endian magnitude,
  //                 no leading zero byte), revoked_at i64 (Unix seconds)
  //   identity count              u32
  //   per identity: kind u8 (1 node, 2 user), name length u8 (1..63), name
  //                 bytes, revoked_at i64 (Unix seconds)
  // Entries are sorted, with no duplicates and nothing after the last one.
  // Times are kept to the second.
  std::string Serialize() const;
  // Parses the format above; anything malformed, truncated, duplicated,
  // unsorted or followed by extra bytes is INVALID_ARGUMENT naming the byte
  // offset or entry.
  static absl::StatusOr<RevocationList> Parse(absl::string_view data);

  friend bool operator==(const RevocationList& a, const RevocationList& b) {
    return a.generation_ == b.generation_ && a.serials_ == b.serials_ &&
           a.identities_ == b.identities_;
  }

 private:
  uint64_t generation_ = 0;
  std::map<std::string, absl::Time> serials_;  // key: NormalizeSerial form
  std::map<IdentityKey, absl::Time> identities_;
};

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_REVOCATION_LIST_H_
