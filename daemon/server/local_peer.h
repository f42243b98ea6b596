// Who may use the local admin socket. Its file mode (0660, root) admits
// the host's administrators; this check refuses, on every connection, a
// process that runs in one of the node's cells, even if it found a path to
// the socket (a bind mount, a descriptor passed in, a cell that shares the
// host's filesystem): a workload must never reach the admin API.
#ifndef MYCEL_DAEMON_SERVER_LOCAL_PEER_H_
#define MYCEL_DAEMON_SERVER_LOCAL_PEER_H_

#include <string>

#include "absl/status/status.h"

namespace mycel {

// OK unless the peer of the connected unix socket `fd` is a process in a
// cgroup below `cgroup_subtree` (where the node's cells live) in any
// hierarchy. A peer outside the daemon's pid namespace (pid 0) cannot be
// in one of its cells, which are all created below it. PERMISSION_DENIED
// names the process and its cgroup; a peer that exits before it is
// checked is refused too.
absl::Status AdmitLocalPeer(int fd, const std::string& cgroup_subtree);

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_LOCAL_PEER_H_
