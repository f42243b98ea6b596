// The identity a mesh leaf certificate names.
#ifndef MYCEL_MESH_PKI_PEER_IDENTITY_H_
#define MYCEL_MESH_PKI_PEER_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/role.h"
#include "mesh/pki/spiffe_id.h"

namespace mycel::pki {

// Who a leaf certificate says its holder is. A plain value.
struct PeerIdentity {
  IdentityKind kind = IdentityKind::kNode;
  std::string mesh;
  std::string name;
  Role role = Role::kNode;
  std::string serial;  // lower-case hex, as in Certificate::serial()
  absl::Time not_before;
  absl::Time not_after;
  std::string spiffe_id;    // "spiffe://MESH/KIND/NAME"
  std::string fingerprint;  // SHA-256 of the DER, lower-case hex
};

// Reads the identity from a leaf certificate WITHOUT deciding whether to
// trust it (PeerVerifier::Verify does that). Requires exactly one
// subjectAltName holding exactly one URI, a SPIFFE ID of a node or user;
// a subject of exactly one O (the role, see role.h) and one CN equal to the
// SPIFFE ID's name; and a role that fits the kind. INVALID_ARGUMENT naming
// the rule broken otherwise ("certificate: URI SAN missing").
absl::StatusOr<PeerIdentity> ParsePeerIdentity(const Certificate& cert);
absl::StatusOr<PeerIdentity> ParsePeerIdentity(absl::string_view pem_or_der);

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_PEER_IDENTITY_H_
