// Spawn: the one place where myceld creates processes.
//
// myceld is a multi-threaded gRPC daemon, so a child is created without
// glibc's fork() (no atfork handlers run) and, between clone and exec, does
// only async-signal-safe work: everything it needs (argv/envp arrays, paths,
// messages) is prepared by the parent before the clone. As posix_spawn, the
// child shares the parent's memory (clone with CLONE_VM|CLONE_VFORK, on a
// stack of the calling thread's): no page tables are copied and the daemon
// takes no copy-on-write faults afterwards, which is most of what a spawn
// cost in a fork. Creating or joining a user namespace needs a process that
// shares its memory with nobody; those children are made with a raw clone3
// without CLONE_VM. Errors in the child before exec come back over a CLOEXEC
// SOCK_SEQPACKET socketpair as {step, errno}; EOF means exec succeeded, so
// Spawn() returns only after the exec happened or failed, as posix_spawn.
#ifndef MYCEL_RUNTIME_SPAWN_SPAWN_H_
#define MYCEL_RUNTIME_SPAWN_SPAWN_H_

#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "runtime/spawn/child.h"    // IWYU pragma: export
#include "runtime/spawn/command.h"  // IWYU pragma: export

namespace mycel {

// A step run in the child after namespaces, mounts, cgroup join and uid/gid
// changes, just before exec, in order. `fn` must be async-signal-safe (no
// allocation, no locks, no libseccomp calls that allocate: build the filter
// in the parent, load it here). It returns 0 or an errno value; `name`
// prefixes the error ("capabilities", "seccomp"). `name` and `arg` must stay
// valid until Spawn returns. Steps run with every signal blocked and every
// descriptor but 0/1/2 already close-on-exec (closed for the cell init),
// so a seccomp filter loaded by a step needs to allow only rt_sigprocmask
// and execve after it (the cell init: see cell_init.h).
struct PreExecStep {
  const char* name;
  int (*fn)(const void* arg) noexcept;
  const void* arg;
  // Run before the uid/gid change instead of after it: a step that needs
  // the privileges the uid change drops (setting the capability bounding
  // set for a non-root workload, for example).
  bool before_credentials = false;
};

// What to run and the sandbox to run it in. Steps in the child, in order:
//   [oom_score_adj] → [wait for uid/gid maps] → setns (mount ns fd, then join)
//   → cgroup join (procs fds) → unshare(CLONE_NEWCGROUP) → mounts/rootfs/proc →
//   read-only and masked paths → hostname → loopback → setsid →
//   RLIMIT_NOFILE → stdio dup2 → pre_exec steps marked before_credentials →
//   setgroups/setresgid/setresuid → chdir → close inherited fds → the
//   other pre_exec steps → execve (or the cell init).
// All signals stay blocked until just before execve.
// Options that change a namespace (rootfs, mounts, hostname, loopback, maps)
// require that namespace in `new_namespaces`, so that a typo can never
// remount or rename the host; Spawn rejects them otherwise.
struct SpawnRequest {
  // argv[0] must be an absolute path (see ResolveCommand); it is also the
  // path that is executed.
  std::vector<std::string> argv;
  // "K=V"; the child gets exactly this environment.
  std::vector<std::string> env;
  // "" → "/". Applied after the rootfs pivot, so it is a path inside it.
  std::string cwd;
  // setgroups/setresgid/setresuid, in that order. Supplementary groups are
  // replaced (cleared when empty) whenever uid or gid is set. In a user
  // namespace, new or joined, the ids are those inside it and default to 0,
  // its root (in a new one: when the matching map is given), so that no
  // process keeps the caller's host ids; supplementary groups are replaced
  // too, except in a namespace that denies setgroups (see uid_map) when
  // none are asked for.
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::vector<gid_t> supplementary_groups;
  // Parent fds dup2'ed onto 0/1/2; -1 → /dev/null. Every other descriptor
  // is closed at exec, whether or not it was opened with O_CLOEXEC.
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  // CLONE_NEWPID|CLONE_NEWNS|CLONE_NEWUTS|CLONE_NEWIPC|CLONE_NEWNET|
  // CLONE_NEWUSER|CLONE_NEWCGROUP. All but CLONE_NEWCGROUP are created by
  // clone3; the cgroup namespace is unshared after the cgroup join so that
  // it is rooted at the cell's cgroup.
  int new_namespaces = 0;
  // Join the namespaces `join_namespaces` (CLONE_NEW* flags, disjoint from
  // new_namespaces) of the process `join_pidfd` (setns with a pidfd, kernel
  // >= 5.8). setns(CLONE_NEWPID) moves only the children a thread creates
  // afterwards, so the calling thread itself enters a joined pid namespace
  // for the clone and leaves it right after: the child is born there, as
  // the caller's child, and the caller reaps it.
  int join_pidfd = -1;
  int join_namespaces = 0;
  // Open cgroup.procs fds (v1: one per hierarchy); the child writes "0" to
  // each, before anything else that matters.
  std::vector<int> cgroup_procs_fds;
  // cgroup v2 directory fd: the child joins it by writing its
  // cgroup.procs, or is born in it (CLONE_INTO_CGROUP) on the clone3 path.
  // May be combined with cgroup_procs_fds for the v1 hierarchies of a
  // hybrid host.
  int cgroup_dir_fd = -1;
  // Mount namespace setup, only when CLONE_NEWNS is new: / is made private
  // (MS_REC|MS_PRIVATE); then, if `rootfs` is set, it is bound onto itself,
  // gets a fresh proc on <rootfs>/proc, becomes the root (pivot_root) and
  // the old root is detached.
  std::string rootfs;
  // Remount the (new) root read-only (MS_BIND|MS_REMOUNT|MS_RDONLY).
  bool readonly_rootfs = false;
  // With CLONE_NEWNS new: make / a slave of the caller's mounts
  // (MS_REC|MS_SLAVE) instead of private, so that mounts the host makes
  // later appear here too, and nothing made here reaches the host.
  bool slave_mounts = false;
  // With CLONE_NEWNS new, after the root and /proc are in place (paths are
  // the child's, inside the rootfs): each of `readonly_paths` becomes
  // read-only with every mount below it (bound onto itself, then
  // mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)); each of
  // `masked_paths` is covered, a directory by an empty read-only tmpfs, a
  // file by /dev/null. A path that does not exist is skipped.
  std::vector<std::string> readonly_paths;
  std::vector<std::string> masked_paths;
  // An nsfs descriptor of a mount namespace (/proc/PID/ns/mnt) the child
  // joins first, before any other namespace: a cell without a mount
  // namespace of its own gets the host's files through a confined view.
  // Not with CLONE_NEWNS in new_namespaces or join_namespaces.
  int join_mount_ns_fd = -1;
  // Without rootfs: mount a fresh proc on /proc (so that a new pid
  // namespace sees its own pids). With rootfs, proc is always mounted.
  bool mount_proc = false;
  // sethostname, only when CLONE_NEWUTS is new.
  std::string hostname;
  // Bring "lo" up, only when CLONE_NEWNET is new.
  bool loopback_up = false;
  // Only when CLONE_NEWUSER is new: written by the parent to
  // /proc/PID/{uid_map,gid_map} while the child waits. A parent with
  // CAP_SETGID (root) writes them as they are, and the namespace allows
  // setgroups; an unprivileged one must deny setgroups in it first, which it
  // does when no supplementary_groups are asked for.
  std::string uid_map, gid_map;
  // setsid(): the child leads a new session and process group, so it is not
  // hit by signals sent to the daemon's terminal or group.
  bool new_session = true;
  // When set, the soft RLIMIT_NOFILE the child gets (the hard limit is
  // kept): the daemon raises its own (RaiseOpenFileLimit), and workloads
  // get back the limit it was started with.
  std::optional<rlim_t> open_file_limit;
  // When set, the child's OOM score adjustment, written first, before any
  // namespace is joined (while it still holds the daemon's capabilities,
  // so that the floor it may lower itself to is reset too): the daemon
  // lowers its own (SetOomScoreAdj), and workloads get back the value it
  // was started with.
  std::optional<int> oom_score_adj;
  std::vector<PreExecStep> pre_exec;
  // Instead of exec'ing argv, exec the built-in cell init (see
  // cell_init.h); argv and env are ignored.
  bool cell_init = false;
};

// Starts a process as described by `request` and returns when it has
// exec'ed (or, with cell_init, when the init loop runs). On failure no
// process is left behind (the child is reaped) and the status names the
// step: "chdir(/nope): No such file or directory (ENOENT)",
// "setns(net): ...", "execve(/bin/x): ...", "<pre_exec name>: ...". Its code
// follows the errno as in PosixError. INVALID_ARGUMENT names the field of a
// malformed request. Thread-safe; blocks the calling thread until then (a
// pre_exec step or a hung cwd can make that long).
absl::StatusOr<Child> Spawn(const SpawnRequest& request);

// Runs `fn` with the calling thread in the namespace `nstype` (CLONE_NEWUTS,
// CLONE_NEWIPC or CLONE_NEWNET: those a thread of a multi-threaded process
// may join alone) of the process behind `pidfd`, then moves the thread
// back to the daemon's own. Cheaper than a thread of its own for the job
// (which costs two cross-CPU wake-ups). If moving back fails (the kernel
// fails it only for lack of memory), the thread would give the processes
// it spawns the cell's namespace, so from then on Spawn refuses to run on
// it. Returns the error of setns, or else fn's.
absl::Status InNamespaceOf(int pidfd, int nstype,
                           absl::FunctionRef<absl::Status()> fn);

// Sets the hostname in the UTS namespace of the process behind `pidfd`
// (through InNamespaceOf).
absl::Status SetHostnameOf(int pidfd, const std::string& hostname);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SPAWN_SPAWN_H_
