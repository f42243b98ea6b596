#include "mesh/identity/access_rules.h"

#include "absl/strings/str_cat.h"

namespace mycel::identity {
namespace {

constexpr AccessRule kRules[] = {
    {"/mycel.v1.Node/GetInfo", Access::kRead},
    {"/mycel.v1.Node/GetStats", Access::kRead},
    {"/mycel.v1.Node/Shutdown", Access::kWrite},
    {"/mycel.v1.Cells/Create", Access::kWrite},
    {"/mycel.v1.Cells/Delete", Access::kWrite},
    {"/mycel.v1.Cells/Get", Access::kRead},
    {"/mycel.v1.Cells/List", Access::kRead},
    {"/mycel.v1.Cells/Stats", Access::kRead},
    {"/mycel.v1.Cells/Run", Access::kWrite},
    {"/mycel.v1.Executables/Start", Access::kWrite},
    {"/mycel.v1.Executables/Stop", Access::kWrite},
    {"/mycel.v1.Executables/Signal", Access::kWrite},
    {"/mycel.v1.Executables/Get", Access::kRead},
    {"/mycel.v1.Executables/List", Access::kRead},
    {"/mycel.v1.Executables/Wait", Access::kRead},
    {"/mycel.v1.Executables/Logs", Access::kRead},
    {"/mycel.v1.Mesh/Init", Access::kWrite},
    {"/mycel.v1.Mesh/GetInfo", Access::kRead},
    {"/mycel.v1.Mesh/CreateToken", Access::kWrite},
    {"/mycel.v1.Mesh/ListTokens", Access::kRead},
    {"/mycel.v1.Mesh/RevokeToken", Access::kWrite},
    {"/mycel.v1.Mesh/AddUser", Access::kWrite},
    {"/mycel.v1.Mesh/Join", Access::kWrite},
    {"/mycel.v1.Mesh/Revoke", Access::kWrite},
    {"/mycel.v1.Mesh/ListRevocations", Access::kRead},
    {"/mycel.v1.Mesh/ListPeers", Access::kRead},
    // A joining node has no certificate yet: the CA is public, and Admit's
    // credential is the join token (failures rate-limited per source).
    {"/mycel.v1.Mesh/GetCa", Access::kAnyone},
    {"/mycel.v1.Mesh/Admit", Access::kAnyone},
    {"/mycel.v1.Mesh/Renew", Access::kPeer},
    {"/mycel.v1.Mesh/PushRevocations", Access::kPeer},
    {"/mycel.v1.State/Get", Access::kRead},
    {"/mycel.v1.State/List", Access::kRead},
    {"/mycel.v1.State/Watch", Access::kRead},
    {"/mycel.v1.State/Put", Access::kWrite},
    {"/mycel.v1.State/Delete", Access::kWrite},
    {"/mycel.v1.Query/Run", Access::kRead},
    {"/mycel.v1.MeshPeer/GetCa", Access::kAnyone},
    {"/mycel.v1.MeshPeer/Join", Access::kAnyone},
    {"/mycel.v1.MeshPeer/Renew", Access::kPeer},
    {"/mycel.v1.MeshPeer/PushRevocations", Access::kPeer},
    {"/mycel.v1.Gossip/Exchange", Access::kPeer},
    {"/mycel.v1.Gossip/Link", Access::kPeer},
    {"/mycel.v1.Replication/Exchange", Access::kPeer},
    {"/mycel.v1.Membership/ListMembers", Access::kRead},
    {"/mycel.v1.Membership/Leave", Access::kWrite},
    {"/grpc.health.v1.Health/Check", Access::kAnyIdentity},
    {"/grpc.health.v1.Health/Watch", Access::kAnyIdentity},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
     Access::kRead},
    {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
     Access::kRead},
};

// What a rule needs, for denials.
absl::string_view Needs(Access access) {
  switch (access) {
    case Access::kAnyone:
      return "nothing";
    case Access::kPeer:
      return "a node of the mesh";
    case Access::kRead:
      return "a viewer or admin user";
    case Access::kWrite:
      return "an admin user";
    case Access::kAnyIdentity:
      return "a node or user of the mesh";
  }
  return "?";
}

bool Allows(Access access, const Caller& caller) {
  switch (access) {
    case Access::kAnyone:
      return true;
    case Access::kPeer:
      return caller.kind == CallerKind::kNode;
    case Access::kRead:
      return caller.kind == CallerKind::kLocal ||
             caller.kind == CallerKind::kUser;
    case Access::kWrite:
      return caller.is_admin();
    case Access::kAnyIdentity:
      return caller.kind != CallerKind::kNone;
  }
  return false;
}

}  // namespace

absl::string_view AccessName(Access access) {
  switch (access) {
    case Access::kAnyone:
      return "anyone";
    case Access::kPeer:
      return "peer";
    case Access::kRead:
      return "read";
    case Access::kWrite:
      return "write";
    case Access::kAnyIdentity:
      return "identity";
  }
  return "?";
}

std::span<const AccessRule> BuiltinAccessRules() { return kRules; }

AccessRules::AccessRules(std::span<const AccessRule> rules) {
  for (const AccessRule& r : rules) rules_.emplace(r.method, r.access);
}

const AccessRules& AccessRules::Builtin() {
  static const AccessRules* const rules = new AccessRules(kRules);
  return *rules;
}

const Access* AccessRules::Find(absl::string_view method) const {
  auto it = rules_.find(method);
  return it == rules_.end() ? nullptr : &it->second;
}

absl::Status AccessRules::Check(absl::string_view method,
                                const Caller& caller) const {
  const Access* access = Find(method);
  if (access == nullptr) {
    if (caller.kind == CallerKind::kNone) {
      return absl::UnauthenticatedError(
          absl::StrCat(method,
                       " needs a client certificate of the mesh (rule none: "
                       "unknown methods are denied)"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat(caller.Describe(), " may not call ", method,
                     ": rule none: unknown methods are denied"));
  }
  if (Allows(*access, caller)) return absl::OkStatus();
  if (caller.kind == CallerKind::kNone) {
    return absl::UnauthenticatedError(
        absl::StrCat(method, " needs a client certificate of the mesh (rule ",
                     AccessName(*access), ": ", Needs(*access), ")"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(caller.Describe(), " may not call ", method, ": rule ",
                   AccessName(*access), " needs ", Needs(*access)));
}

}  // namespace mycel::identity
