// The process at the other end of a unix socket, and the cgroups it is in:
// what the daemon checks before it serves a local caller.
#ifndef MYCEL_RUNTIME_PEER_PROCESS_H_
#define MYCEL_RUNTIME_PEER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/unique_fd.h"

namespace mycel {

struct PeerProcess {
  // In the caller's pid namespace; 0 when the peer's process is outside it
  // (an ancestor or unrelated namespace), which the kernel cannot name.
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // The peer as it was when it connected (SO_PEERPIDFD, Linux 6.5), or
  // invalid where the kernel cannot say: then `pid` may, in a narrow race,
  // name a process that reused the number.
  UniqueFd pidfd;
};

// SO_PEERCRED of a connected unix socket: pid, uid and gid, no pidfd.
absl::StatusOr<PeerProcess> PeerCredentials(int fd);

// SO_PEERCRED and, where the kernel has it, SO_PEERPIDFD of a connected
// unix socket.
absl::StatusOr<PeerProcess> PeerOfUnixSocket(int fd);

// The cgroup paths of process `pid`, one per hierarchy, as
// /proc/PID/cgroup lists them (relative to the caller's cgroup namespace).
// NOT_FOUND when the process is gone.
absl::StatusOr<std::vector<std::string>> CgroupPathsOf(pid_t pid);

// Parses the text of /proc/PID/cgroup ("ID:CONTROLLERS:PATH" per line) into
// its paths.
std::vector<std::string> ParseCgroupPaths(absl::string_view text);

// Whether the process behind `peer` still runs: with a pidfd, exactly that
// process; without one, some process with its pid.
bool PeerAlive(const PeerProcess& peer);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_PEER_PROCESS_H_
