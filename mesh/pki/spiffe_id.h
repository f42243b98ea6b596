// SPIFFE IDs of mesh identities: spiffe://MESH/node/NAME and
// spiffe://MESH/user/NAME.
#ifndef MYCEL_MESH_PKI_SPIFFE_ID_H_
#define MYCEL_MESH_PKI_SPIFFE_ID_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel::pki {

// What an identity is: a node (a myceld) or a user (a person or a tool).
enum class IdentityKind { kNode, kUser };

// "node" or "user": the path segment in a SPIFFE ID.
absl::string_view IdentityKindName(IdentityKind kind);

// A mesh name is the SPIFFE trust domain: 1 to 253 characters of
// [a-z0-9.-], not starting or ending with '.' or '-', without "..". The
// name also serves as the CA's URI name constraint, so it must be a valid
// host name. INVALID_ARGUMENT names the rule broken.
absl::Status ValidateMeshName(absl::string_view mesh);

// A node or user name: [a-z0-9][a-z0-9_.-]{0,62}. INVALID_ARGUMENT names the
// rule broken.
absl::Status ValidateIdentityName(absl::string_view name);

// The SPIFFE ID of the mesh itself (the trust domain): "spiffe://MESH".
// REQUIRES: ValidateMeshName(mesh) is OK.
std::string TrustDomainId(absl::string_view mesh);

// A validated SPIFFE ID of a node or user. A value type; every instance
// holds a valid ID.
class SpiffeId {
 public:
  // Validates `mesh` and `name`.
  static absl::StatusOr<SpiffeId> Create(IdentityKind kind,
                                         absl::string_view mesh,
                                         absl::string_view name);

  // Parses "spiffe://MESH/node/NAME" or "spiffe://MESH/user/NAME" strictly:
  // lower-case scheme, no port, user info, query, fragment, percent
  // encoding, empty or extra path segments, or trailing slash.
  // INVALID_ARGUMENT says what is wrong.
  static absl::StatusOr<SpiffeId> Parse(absl::string_view uri);

  IdentityKind kind() const { return kind_; }
  const std::string& mesh() const { return mesh_; }
  const std::string& name() const { return name_; }

  // "spiffe://MESH/KIND/NAME".
  std::string ToString() const;

  friend bool operator==(const SpiffeId& a, const SpiffeId& b) {
    return a.kind_ == b.kind_ && a.mesh_ == b.mesh_ && a.name_ == b.name_;
  }
  friend bool operator!=(const SpiffeId& a, const SpiffeId& b) {
    return !(a == b);
  }

 private:
  SpiffeId(IdentityKind kind, std::string mesh, std::string name)
      : kind_(kind), mesh_(std::move(mesh)), name_(std::move(name)) {}

  IdentityKind kind_;
  std::string mesh_;
  std::string name_;
};

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_SPIFFE_ID_H_
