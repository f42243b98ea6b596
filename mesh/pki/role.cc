#include "mesh/pki/role.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace mycel::pki {

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kNode:
      return "node";
    case Role::kAdmin:
      return "admin";
    case Role::kViewer:
      return "viewer";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role role : {Role::kNode, Role::kAdmin, Role::kViewer}) {
    if (name == RoleName(role)) return role;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("role: \"", absl::CHexEscape(name),
                   "\" is not one of node, admin, viewer"));
}

absl::string_view RoleOrganization(Role role) {
  switch (role) {
    case Role::kNode:
      return "mycel:node";
    case Role::kAdmin:
      return "mycel:admin";
    case Role::kViewer:
      return "mycel:viewer";
  }
  return "mycel:unknown";
}

absl::StatusOr<Role> RoleFromOrganization(absl::string_view organization) {
  for (Role role : {Role::kNode, Role::kAdmin, Role::kViewer}) {
    if (organization == RoleOrganization(role)) return role;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("subject O: \"", absl::CHexEscape(organization),
                   "\" is not mycel:node, mycel:admin or mycel:viewer"));
}

absl::Status CheckRoleFitsKind(IdentityKind kind, Role role) {
  bool fits =
      kind == IdentityKind::kNode ? role == Role::kNode : role != Role::kNode;
  if (fits) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("role: ", RoleName(role), " cannot be held by a ",
                   IdentityKindName(kind), " identity"));
}

}  // namespace mycel::pki
