#include "mesh/identity/caller.h"

#include "absl/strings/str_cat.h"

namespace mycel::identity {

std::string Caller::Describe() const {
  switch (kind) {
    case CallerKind::kLocal:
      return "the local socket";
    case CallerKind::kNode:
      return absl::StrCat("node ", name);
    case CallerKind::kUser:
      return absl::StrCat("user ", name, " (", pki::RoleName(role), ")");
    case CallerKind::kNone:
      break;
  }
  return "an unauthenticated caller";
}

}  // namespace mycel::identity
