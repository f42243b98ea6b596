// Roles carried in mesh certificates.
//
// A certificate's role is its subject Organization (O) attribute, as
// Kubernetes does for groups (O=system:masters) and Talos for its roles
// (O=os:admin): "mycel:node" for nodes, "mycel:admin" and "mycel:viewer" for
// users. The O attribute is signed by the CA like the SAN, needs no custom
// extension (so every TLS stack and `openssl x509 -text` shows it), and a
// certificate carries exactly one.
#ifndef MYCEL_MESH_PKI_ROLE_H_
#define MYCEL_MESH_PKI_ROLE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesh/pki/spiffe_id.h"

namespace mycel::pki {

enum class Role {
  kNode,    // a myceld; only node identities hold it
  kAdmin,   // a user who may change anything
  kViewer,  // a user who may only read
};

// "node", "admin" or "viewer".
absl::string_view RoleName(Role role);

// Parses "node", "admin" or "viewer" (as typed on the command line).
absl::StatusOr<Role> ParseRole(absl::string_view name);

// The subject Organization that carries `role`: "mycel:node", ...
absl::string_view RoleOrganization(Role role);

// The role for a subject Organization; INVALID_ARGUMENT for anything else.
absl::StatusOr<Role> RoleFromOrganization(absl::string_view organization);

// OK when `role` may be held by an identity of `kind`: nodes hold kNode,
// users hold kAdmin or kViewer. INVALID_ARGUMENT otherwise.
absl::Status CheckRoleFitsKind(IdentityKind kind, Role role);

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_ROLE_H_
