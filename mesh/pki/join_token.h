// Join tokens: how a new node proves it may join, and how it pins the mesh
// CA before it sends anything secret (after kubeadm's bootstrap token and
// discovery-token-ca-cert-hash).
//
// Format (one line, 143 characters, safe in shells, URLs and copy/paste):
//
//   mycel1.<id>.<secret>.<ca-sha256>
//
//   mycel1     format name and version
//   id         6 characters [a-z0-9]: public; names the token in
//              `mycel mesh token ls` and `revoke ID`
//   secret     64 lower-case hex digits: 32 random bytes; only its SHA-256
//              is stored
//   ca-sha256  64 lower-case hex digits: SHA-256 of the mesh CA
//              certificate's DER (CertificateAuthority::fingerprint())
//
// Joining: the new node parses the token, fetches the CA certificate from
// the node it joins, and proceeds only if CheckCa() accepts it; then it
// opens TLS trusting only that CA and presents id and secret with its CSR.
// The serving node looks the id up and calls CheckJoinToken().
#ifndef MYCEL_MESH_PKI_JOIN_TOKEN_H_
#define MYCEL_MESH_PKI_JOIN_TOKEN_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/pki/certificate.h"

namespace mycel::pki {

inline constexpr absl::string_view kJoinTokenVersion = "mycel1";
inline constexpr size_t kJoinTokenIdLength = 6;
inline constexpr size_t kJoinTokenSecretBytes = 32;

// OK when `id` is 6 characters of [a-z0-9] (for `token revoke ID`);
// INVALID_ARGUMENT otherwise.
absl::Status ValidateJoinTokenId(absl::string_view id);

// What the daemon stores for a token: never the secret itself.
struct StoredJoinToken {
  std::string id;
  std::string secret_hash;  // HashJoinSecret(): SHA-256, lower-case hex
  absl::Time created;
  absl::Time expires;
  int64_t uses_left = 0;  // the daemon decrements it on each accepted join
  bool revoked = false;
  bool authority = false;  // the nodes it admits may join as authorities
};

// SHA-256 of a raw secret, lower-case hex. The secret has 256 random bits,
// so an unsalted fast hash is enough: nothing can be guessed from it.
std::string HashJoinSecret(absl::string_view secret);

// A parsed or generated join token. The secret makes every instance
// sensitive: never log ToString() or secret(). Copyable value.
class JoinToken {
 public:
  // A new token for the CA with `ca_fingerprint` (64 lower-case hex).
  static absl::StatusOr<JoinToken> Generate(absl::string_view ca_fingerprint);

  // Parses the format above. Surrounding whitespace (a pasted newline) is
  // ignored. INVALID_ARGUMENT says what is wrong without echoing the
  // secret: "join token: does not start with \"mycel1.\"", "... version
  // \"mycel2\" is not supported", "... has 3 fields, expected 4 (truncated?)",
  // "... secret: 60 characters, expected 64 (truncated?)", "... secret:
  // character 7 is not lower-case hex", ...
  static absl::StatusOr<JoinToken> Parse(absl::string_view text);

  // The token a joining node presented to an authority: its id and raw
  // secret (kJoinTokenSecretBytes), for the CA `ca_fingerprint` the
  // authority holds. INVALID_ARGUMENT when the id or the secret's length is
  // wrong.
  static absl::StatusOr<JoinToken> FromPresented(
      absl::string_view id, absl::string_view secret,
      absl::string_view ca_fingerprint);

  const std::string& id() const { return id_; }
  // The raw 32 secret bytes.
  const std::string& secret() const { return secret_; }
  const std::string& ca_fingerprint() const { return ca_fingerprint_; }

  // The one-line form; what `mycel mesh token create` prints.
  std::string ToString() const;

  // The record to store for this token.
  StoredJoinToken ToStored(absl::Time created, absl::Time expires,
                           int64_t uses) const;

  // OK when `ca` is the certificate this token pins. Otherwise
  // UNAUTHENTICATED "CA certificate fingerprint X does not match the join
  // token's pin Y": the joining node must stop and send nothing.
  absl::Status CheckCa(const Certificate& ca) const;

 private:
  JoinToken(std::string id, std::string secret, std::string ca_fingerprint)
      : id_(std::move(id)),
        secret_(std::move(secret)),
        ca_fingerprint_(std::move(ca_fingerprint)) {}

  std::string id_;
  std::string secret_;
  std::string ca_fingerprint_;
};

// Decides whether `presented` may join now, given what was stored under its
// id. Checks, in this order, so that nothing about the token's state leaks
// to someone who does not know the secret:
//   1. the id matches (else INVALID_ARGUMENT: the caller looked up the
//      wrong record);
//   2. the secret's hash equals stored.secret_hash, compared in constant
//      time (CRYPTO_memcmp): UNAUTHENTICATED "join token ID: wrong secret";
//   3. not revoked: UNAUTHENTICATED "join token ID: revoked";
//   4. now < expires: UNAUTHENTICATED "join token ID: expired at T";
//   5. uses_left > 0: UNAUTHENTICATED "join token ID: used up".
// A stored hash that is not 64 hex digits is INTERNAL (a corrupt store).
// Consuming a use is the caller's job, in the same transaction.
absl::Status CheckJoinToken(const StoredJoinToken& stored,
                            const JoinToken& presented, absl::Time now);

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_JOIN_TOKEN_H_
