#include "daemon/server/local_peer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/peer_process.h"
#include "runtime/status.h"

namespace mycel {

absl::Status AdmitLocalPeer(int fd, const std::string& cgroup_subtree) {
  ASSIGN_OR_RETURN(PeerProcess peer, PeerOfUnixSocket(fd));
  if (peer.pid == 0) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> paths = CgroupPathsOf(peer.pid);
  if (!paths.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("local peer pid ", peer.pid, ": cannot read its cgroups (",
                     paths.status().message(), ")"));
  }
  const std::string cells = absl::StrCat("/", cgroup_subtree, "/");
  for (const std::string& path : *paths) {
    if (absl::StartsWith(path, cells)) {
      return absl::PermissionDeniedError(
          absl::StrCat("local peer pid ", peer.pid, " uid ", peer.uid,
                       " runs in cell cgroup ", path,
                       "; a cell may not use the admin socket"));
    }
  }
  // The pid was read at connect time; the cgroups just now. Had the
  // process exited in between, the pid might name another process.
  if (!PeerAlive(peer)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "local peer pid ", peer.pid, " exited before it could be checked"));
  }
  return absl::OkStatus();
}

}  // namespace mycel
