// The code that runs in a freshly cloned child between clone and execve.
//
// Everything here is async-signal-safe: the child of a multi-threaded
// process may find any lock (malloc's, stdio's, glibc's thread list) held
// forever by a thread that does not exist in it, and a child that shares
// the parent's memory must not change anything the parent's other threads
// use. So the plan below holds only plain values and pointers into memory
// the parent prepared before the clone, and the child makes system calls
// and nothing else (writing only its own stack and errno).
#ifndef MYCEL_RUNTIME_SPAWN_INTERNAL_CHILD_SETUP_H_
#define MYCEL_RUNTIME_SPAWN_INTERNAL_CHILD_SETUP_H_

#include <sched.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "runtime/spawn/spawn.h"

namespace mycel::spawn_internal {

// Which step of the child failed. The parent turns it into a message with
// the request's values ("chdir(/nope)"), so the child never formats text.
enum class Step : int32_t {
  kUserNsSync = 1,  // waiting for the parent to write the uid/gid maps
  kSetns,           // index: the CLONE_NEW* flag
  kCgroupProcs,     // index: position in cgroup_procs_fds
  kUnshareCgroup,
  kMountPrivate,
  kBindRootfs,
  kMountProc,
  kEnterRootfs,
  kPivotRoot,
  kDetachOldRoot,
  kEnterNewRoot,
  kRemountReadonly,
  kReadonlyPath,  // index: position in readonly_paths
  kMaskPath,      // index: position in masked_paths
  kJoinMountNs,
  kSethostname,
  kLoopback,
  kSetsid,
  kRlimit,
  kStdio,  // index: 0, 1 or 2
  kSetgroups,
  kSetresgid,
  kSetresuid,
  kChdir,
  kPreExec,  // index: position in pre_exec
  kCloseFds,
  kSetName,
  kExecve,
  kOomScoreAdj,
};

// One datagram on the sync socket, child → parent: the step that failed.
struct Report {
  int32_t step = 0;
  int32_t index = 0;
  int32_t error = 0;  // errno
};

// The byte the parent sends once the uid/gid maps are written.
inline constexpr char kMapsWritten = 'M';

// Namespaces in the order they are joined: user first, because it grants
// the capabilities needed to join the others when they belong to it; mount
// last, because it changes the root and cwd under the other steps.
inline constexpr struct {
  int flag;
  const char* name;
} kNamespaceOrder[] = {
    {CLONE_NEWUSER, "user"}, {CLONE_NEWCGROUP, "cgroup"}, {CLONE_NEWIPC, "ipc"},
    {CLONE_NEWUTS, "uts"},   {CLONE_NEWNET, "net"},       {CLONE_NEWPID, "pid"},
    {CLONE_NEWNS, "mnt"},
};

// Everything the child needs, prepared by the parent. Pointers refer to the
// parent's memory (the request and local arrays), which the child sees as
// its own copy, or, with share_memory, as the same memory while the parent
// waits.
struct ChildPlan {
  int sync_fd = -1;  // child end of the socketpair (CLOEXEC)
  bool wait_for_maps = false;

  // The child shares the parent's memory (CLONE_VM|CLONE_VFORK): the
  // parent's thread is suspended until the child execs or exits.
  bool share_memory = false;

  // Signals the child resets to SIG_DFL (bit sig-1): those the parent
  // ignores, since SIG_IGN would survive execve, and those it handles
  // unless the clone already reset them (clone3's CLONE_CLEAR_SIGHAND): a
  // handler of the daemon's must never run in the child (with share_memory
  // it would run on the daemon's memory) in the moment between unblocking
  // signals and execve.
  uint64_t reset_signals = 0;

  // Joined by the child with setns, in kNamespaceOrder. Never CLONE_NEWPID:
  // the parent's thread enters a joined pid namespace for the clone, so the
  // child is born in it (setns(CLONE_NEWPID) moves only future children).
  int join_pidfd = -1;
  int join_namespaces = 0;

  const int* cgroup_procs_fds = nullptr;
  size_t cgroup_procs_count = 0;
  bool unshare_cgroup = false;

  bool setup_mounts = false;          // CLONE_NEWNS is new
  const char* rootfs = nullptr;       // nullptr: no pivot
  const char* rootfs_proc = nullptr;  // <rootfs>/proc
  bool mount_proc = false;            // on /proc, without rootfs
  bool readonly_rootfs = false;
  bool slave_mounts = false;
  const char* const* readonly_paths = nullptr;
  size_t readonly_count = 0;
  const char* const* masked_paths = nullptr;
  size_t masked_count = 0;
  // With a rootfs, these are already under it (they are applied before
  // the pivot, while the host's /dev/null, which masks files, is still a
  // mount of the child's namespace).
  int join_mount_ns_fd = -1;

  const char* hostname = nullptr;  // nullptr: unchanged
  size_t hostname_len = 0;
  bool loopback_up = false;
  bool new_session = true;
  bool set_open_file_limit = false;
  rlimit open_file_limit = {};
  // Written to /proc/self/oom_score_adj when not empty ("0\n").
  char oom_score_adj[8] = {};
  size_t oom_score_adj_len = 0;

  int stdio[3] = {-1, -1, -1};  // all valid: /dev/null substituted

  bool set_groups = false;
  const gid_t* groups = nullptr;
  size_t groups_count = 0;
  // setgroups may fail with EPERM because the user namespace denies it
  // (/proc/self/setgroups is "deny"); it is then skipped.
  bool groups_deniable = false;
  bool set_gid = false;
  gid_t gid = 0;
  bool set_uid = false;
  uid_t uid = 0;

  const char* cwd = "/";
  const PreExecStep* pre_exec = nullptr;
  size_t pre_exec_count = 0;

  // The cell init: execveat(init_exe_fd, "", argv, envp, AT_EMPTY_PATH)
  // with every signal still blocked (see cell_init.h). argv and envp are
  // then the init's.
  bool cell_init = false;
  int init_exe_fd = -1;
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
};

// Runs the steps of `plan` in the child and execs. Never returns: on failure
// it reports the step and errno on plan.sync_fd and exits with 127.
[[noreturn]] void RunChild(const ChildPlan& plan) noexcept;

// RunChild as the entry point of glibc's clone(2), for share_memory.
int ChildMain(void* plan) noexcept;

}  // namespace mycel::spawn_internal

#endif  // MYCEL_RUNTIME_SPAWN_INTERNAL_CHILD_SETUP_H_
