#include "runtime/peer_process.h"

#include <errno.h>
#include <signal.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/fs.h"
#include "runtime/status.h"
#include "runtime/syscalls.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace mycel {

absl::StatusOr<PeerProcess> PeerCredentials(int fd) {
  ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return PosixError("getsockopt(SO_PEERCRED)", errno);
  }
  PeerProcess peer;
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  return peer;
}

absl::StatusOr<PeerProcess> PeerOfUnixSocket(int fd) {
  ASSIGN_OR_RETURN(PeerProcess peer, PeerCredentials(fd));
  int pidfd = -1;
  socklen_t pidfd_len = sizeof(pidfd);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pidfd_len) == 0 &&
      pidfd >= 0) {
    peer.pidfd.reset(pidfd);
  }
  return peer;
}

std::vector<std::string> ParseCgroupPaths(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    // The path is everything after the second ':' (it may contain ':').
    size_t first = line.find(':');
    if (first == absl::string_view::npos) continue;
    size_t second = line.find(':', first + 1);
    if (second == absl::string_view::npos) continue;
    out.emplace_back(line.substr(second + 1));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CgroupPathsOf(pid_t pid) {
  ASSIGN_OR_RETURN(std::string text,
                   ReadFile(absl::StrCat("/proc/", pid, "/cgroup")));
  return ParseCgroupPaths(text);
}

bool PeerAlive(const PeerProcess& peer) {
  if (peer.pidfd)
    return sys::PidfdSendSignal(peer.pidfd.get(), 0, nullptr, 0) == 0;
  return peer.pid > 0 && (kill(peer.pid, 0) == 0 || errno == EPERM);
}

}  // namespace mycel
