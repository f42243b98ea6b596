// Process resource limits the daemon adjusts for itself.
#ifndef MYCEL_RUNTIME_RESOURCE_LIMITS_H_
#define MYCEL_RUNTIME_RESOURCE_LIMITS_H_

#include <sys/resource.h>

#include "absl/status/statusor.h"

namespace mycel {

struct OpenFileLimit {
  rlim_t soft_before = 0;  // what the daemon was started with
  rlim_t soft = 0;         // now
  rlim_t hard = 0;
};

// The limits on open files now (getrlimit(RLIMIT_NOFILE)); `soft_before`
// equals `soft`. RLIM_INFINITY when unlimited.
absl::StatusOr<OpenFileLimit> GetOpenFileLimit();

// Raises the soft limit on open files to the hard limit, as systemd's
// services are advised to do: every client connection, log stream and
// spawn takes descriptors, and the traditional soft limit of 1024 is
// reached long before memory is. The processes the daemon starts get
// `soft_before` back (see SpawnRequest::open_file_limit), since programs
// that use select(2) break above 1024.
absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit();

// Sets the nice value of process `pid` (setpriority(PRIO_PROCESS)).
absl::Status SetNice(pid_t pid, int nice);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_RESOURCE_LIMITS_H_
