// Who may call which method: one rule per full gRPC method name
// ("/mycel.v1.Node/GetInfo"), and the one decision every call goes
// through. A method without a rule is refused to everyone, the local
// socket included, so that a new RPC is unreachable until someone decides
// who may call it.
#ifndef MYCEL_MESH_IDENTITY_ACCESS_RULES_H_
#define MYCEL_MESH_IDENTITY_ACCESS_RULES_H_

#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mesh/identity/caller.h"

namespace mycel::identity {

enum class Access {
  kAnyone,  // also without a certificate: Mesh.Join, Mesh.GetCa
  kPeer,    // nodes of the mesh only: the peer protocol
  kRead,    // users with the viewer or admin role, and the local socket
  kWrite,   // admin users and the local socket: anything that changes state
  kAnyIdentity,  // any verified identity, node or user (health checks)
};

// "anyone", "peer", "read", "write", "identity": the rule's name in
// denials and docs.
absl::string_view AccessName(Access access);

struct AccessRule {
  absl::string_view method;  // "/package.Service/Method"
  Access access;
};

// The rules of every method myceld serves (access_rules.cc), for the
// daemon and for the test that checks every served method has one.
std::span<const AccessRule> BuiltinAccessRules();

// A rule table. Immutable after construction: thread-safe.
class AccessRules {
 public:
  explicit AccessRules(std::span<const AccessRule> rules);
  static const AccessRules& Builtin();

  // The rule of `method`, or null when it has none.
  const Access* Find(absl::string_view method) const;

  // OK when `caller` may call `method`. Otherwise:
  //   - UNAUTHENTICATED when the caller has no identity and the method
  //     needs one ("/mycel.v1.Node/GetInfo needs a client certificate of
  //     the mesh (rule read)");
  //   - PERMISSION_DENIED naming the caller, the method and the rule
  //     ("user bob (viewer) may not call /mycel.v1.Cells/Create: rule write
  //     needs an admin user"), including for a method with no rule ("rule
  //     none: unknown methods are denied").
  absl::Status Check(absl::string_view method, const Caller& caller) const;

 private:
  absl::flat_hash_map<std::string, Access> rules_;
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_ACCESS_RULES_H_
