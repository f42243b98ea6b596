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

// This process's OOM score adjustment (/proc/self/oom_score_adj), -1000 to
// 1000.
absl::StatusOr<int> GetOomScoreAdj();

// Sets it. Lowering it needs CAP_SYS_RESOURCE (PERMISSION_DENIED without),
// and a process that has it also sets the floor that the process and its
// children may later lower themselves to without it. The daemon lowers its
// own, as kubelet and containerd do, so that a workload without a memory
// limit that drives the host out of memory is the OOM killer's choice, not
// the node's agent; workloads get the value back (SpawnRequest::
// oom_score_adj).
absl::Status SetOomScoreAdj(int value);

// Sets the nice value of process `pid` (setpriority(PRIO_PROCESS)).
absl::Status SetNice(pid_t pid, int nice);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_RESOURCE_LIMITS_H_
