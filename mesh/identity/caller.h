// Who makes a call to myceld: the local admin socket, a node of the mesh, a
// user of the mesh with a role, or nobody known.
#ifndef MYCEL_MESH_IDENTITY_CALLER_H_
#define MYCEL_MESH_IDENTITY_CALLER_H_

#include <string>

#include "mesh/pki/role.h"

namespace mycel::identity {

enum class CallerKind {
  kNone,   // no verified identity (TCP without a client certificate)
  kLocal,  // the local unix socket: an administrator of this host
  kNode,   // a myceld of the mesh (role kNode)
  kUser,   // a user of the mesh (role kAdmin or kViewer)
};

// A plain value. For kNode and kUser, `name` and `role` come from a
// certificate that PeerVerifier accepted on this call; for kLocal and kNone
// they are empty and kNode.
struct Caller {
  CallerKind kind = CallerKind::kNone;
  std::string name;
  pki::Role role = pki::Role::kNode;
  std::string serial;  // the certificate's, lower-case hex

  static Caller Local() { return {CallerKind::kLocal, "", pki::Role::kAdmin}; }

  // May change state: the local socket or an admin user.
  bool is_admin() const {
    return kind == CallerKind::kLocal ||
           (kind == CallerKind::kUser && role == pki::Role::kAdmin);
  }

  // For messages and logs: "the local socket", "node b", "user alice
  // (viewer)", "an unauthenticated caller".
  std::string Describe() const;
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_CALLER_H_
