#include "runtime/seccomp/internal/syscall_tables.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cstdint>
#include <vector>

namespace mycel::seccomp_internal {
namespace {

using Match = ConditionalSyscall::Match;

// ---------------------------------------------------------------------------
// default: modelled on Docker's default profile (moby/profiles, seccomp/
// default_linux.go) as it stands for a container with Docker's default
// capability set: an allow-list of the syscalls ordinary programs make, for
// x86_64 and for the 32-bit x86 and x32 ABIs (hence the *32/*64/_time64
// names, which only exist there). Where this list differs from Docker's, the
// comment next to the entry in kDefaultDeny says why.
// ---------------------------------------------------------------------------
constexpr const char* kDefaultAllow[] = {
    // Processes, threads and identity. clone and personality are in
    // kDefaultConditional; clone3 in kEnosys.
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "fork",
    "vfork",
    "wait4",
    "waitid",
    "waitpid",
    "kill",
    "tkill",
    "tgkill",
    "getpid",
    "getppid",
    "gettid",
    "getpgid",
    "getpgrp",
    "setpgid",
    "getsid",
    "setsid",
    "getuid",
    "getuid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getegid",
    "getegid32",
    "getresuid",
    "getresuid32",
    "getresgid",
    "getresgid32",
    "getgroups",
    "getgroups32",
    "setuid",
    "setuid32",
    "setgid",
    "setgid32",
    "setreuid",
    "setreuid32",
    "setregid",
    "setregid32",
    "setresuid",
    "setresuid32",
    "setresgid",
    "setresgid32",
    "setfsuid",
    "setfsuid32",
    "setfsgid",
    "setfsgid32",
    "setgroups",
    "setgroups32",
    "capget",
    "capset",
    "prctl",
    "arch_prctl",
    "set_tid_address",
    "set_robust_list",
    "get_robust_list",
    "rseq",
    "restart_syscall",
    "pidfd_open",
    "pidfd_send_signal",
    "process_mrelease",
    "seccomp",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "uname",
    "sysinfo",
    "getrlimit",
    "ugetrlimit",
    "setrlimit",
    "prlimit64",
    "getrusage",
    "times",
    "umask",
    "getpriority",
    "setpriority",
    "sched_yield",
    "sched_getaffinity",
    "sched_setaffinity",
    "sched_getattr",
    "sched_setattr",
    "sched_getparam",
    "sched_setparam",
    "sched_getscheduler",
    "sched_setscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "ioprio_get",
    "ioprio_set",
    "getcpu",
    "membarrier",
    // Chroot needs CAP_SYS_CHROOT, which Docker's default set (and ours)
    // grants; the kernel still checks it.
    "chroot",

    // Signals, timers and sleeping.
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "sigprocmask",
    "sigreturn",
    "pause",
    "alarm",
    "getitimer",
    "setitimer",
    "nanosleep",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_getres",
    "clock_getres_time64",
    "gettimeofday",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",

    // Memory.
    "brk",
    "mmap",
    "mmap2",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    "mincore",
    "mlock",
    "mlock2",
    "mlockall",
    "munlock",
    "munlockall",
    "msync",
    "remap_file_pages",
    "memfd_create",
    "memfd_secret",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "map_shadow_stack",
    "mseal",
    "get_thread_area",
    "set_thread_area",
    "modify_ldt",

    // Synchronisation.
    "futex",
    "futex_time64",
    "futex_waitv",
    "futex_wake",
    "futex_wait",
    "futex_requeue",

    // Files and descriptors.
    "open",
    "openat",
    "openat2",
    "creat",
    "close",
    "close_range",
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "preadv",
    "preadv2",
    "pwritev",
    "pwritev2",
    "lseek",
    "_llseek",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "fcntl64",
    "flock",
    "ioctl",
    "fsync",
    "fdatasync",
    "sync",
    "syncfs",
    "sync_file_range",
    "fallocate",
    "ftruncate",
    "ftruncate64",
    "truncate",
    "truncate64",
    "fadvise64",
    "fadvise64_64",
    "readahead",
    "sendfile",
    "sendfile64",
    "splice",
    "tee",
    "vmsplice",
    "copy_file_range",
    "cachestat",
    "stat",
    "stat64",
    "lstat",
    "lstat64",
    "fstat",
    "fstat64",
    "newfstatat",
    "fstatat64",
    "statx",
    "statfs",
    "statfs64",
    "fstatfs",
    "fstatfs64",
    "statmount",
    "listmount",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
    "getcwd",
    "chdir",
    "fchdir",
    "getdents",
    "getdents64",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "rmdir",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "unlink",
    "unlinkat",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "chown32",
    "fchown",
    "fchown32",
    "fchownat",
    "lchown",
    "lchown32",
    "utime",
    "utimes",
    "utimensat",
    "utimensat_time64",
    "futimesat",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "getxattrat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "setxattrat",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "listxattrat",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "removexattrat",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "inotify_rm_watch",
    "fanotify_mark",

    // Polling and event descriptors.
    "poll",
    "ppoll",
    "ppoll_time64",
    "select",
    "_newselect",
    "pselect6",
    "pselect6_time64",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "eventfd",
    "eventfd2",
    "pipe",
    "pipe2",

    // Asynchronous I/O (the old aio; io_uring is denied).
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",

    // Sockets. socket(2) itself is in kDefaultConditional. socketcall is the
    // 32-bit x86 multiplexer: its arguments sit behind a pointer that seccomp
    // cannot read, so on that ABI the address-family filter does not apply
    // (as in Docker).
    "socketpair",
    "bind",
    "connect",
    "listen",
    "accept",
    "accept4",
    "getsockname",
    "getpeername",
    "getsockopt",
    "setsockopt",
    "sendto",
    "sendmsg",
    "sendmmsg",
    "recvfrom",
    "recvmsg",
    "recvmmsg",
    "recvmmsg_time64",
    "shutdown",
    "socketcall",

    // System V and POSIX IPC (ipc is the 32-bit x86 multiplexer).
    "ipc",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "mq_open",
    "mq_unlink",
    "mq_notify",
    "mq_getsetattr",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_timedreceive",
    "mq_timedreceive_time64",

    "getrandom",
};

// Namespace-creating clone flags. A process in a cell may start processes
// and threads but not new namespaces: those are the spawner's job, and an
// unprivileged user namespace in particular opens kernel attack surface that
// the capability drop would otherwise close. clone(2) only takes these in
// its flags word (arg 0 on x86); CLONE_NEWTIME needs clone3 or unshare,
// both denied.
constexpr uint64_t kCloneNamespaceFlags[] = {
    CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
    CLONE_NEWNET | CLONE_NEWCGROUP};

// personality(2): the values Docker allows. PER_LINUX, PER_LINUX32 (i386
// userland on x86_64, e.g. `linux32`), UNAME26, both, and 0xffffffff, which
// queries the current persona. Everything else (ADDR_NO_RANDOMIZE,
// READ_IMPLIES_EXEC, ...) weakens the process's own hardening.
constexpr uint64_t kPersonalities[] = {
    PER_LINUX, PER_LINUX32, UNAME26, uint64_t{PER_LINUX32} | uint64_t{UNAME26},
    0xffffffffu};

// socket(2) address families, as Docker allows them: everything the kernel
// still implements except AF_ALG (direct access to the kernel crypto API,
// a history of exploits, no use in ordinary programs) and AF_VSOCK (global
// across network namespaces on most kernels: a cell could reach any VM on
// the host by CID). Families whose code was removed from or deprecated in
// the kernel (DECnet, Econet, ATM SVC, IrDA, WAN router, ISDN, CAIF) are not
// listed either, again following Docker.
constexpr uint64_t kSocketFamilies[] = {
    AF_UNIX,      AF_INET,    AF_AX25,     AF_IPX,    AF_APPLETALK,
    AF_NETROM,    AF_BRIDGE,  AF_ATMPVC,   AF_X25,    AF_INET6,
    AF_ROSE,      AF_NETBEUI, AF_SECURITY, AF_KEY,    AF_NETLINK,
    AF_PACKET,    AF_ASH,     AF_RDS,      AF_SNA,    AF_PPPOX,
    AF_LLC,       AF_IB,      AF_MPLS,     AF_CAN,    AF_TIPC,
    AF_BLUETOOTH, AF_IUCV,    AF_RXRPC,    AF_PHONET, AF_IEEE802154,
    AF_NFC,       AF_KCM,     AF_QIPCRTR,  AF_SMC,    AF_XDP,
    AF_MCTP,
};

constexpr ConditionalSyscall kDefaultConditional[] = {
    {"clone", 0, Match::kNoBitsOf, kCloneNamespaceFlags},
    {"personality", 0, Match::kAnyOf, kPersonalities},
    {"socket", 0, Match::kAnyOf, kSocketFamilies},
};

// clone3 passes its flags in a struct that seccomp cannot read, so it cannot
// be checked for namespace flags. ENOSYS (not EPERM) makes glibc fall back to
// clone(2), which the profile can check (pthread_create, posix_spawn).
constexpr const char* kEnosys[] = {"clone3"};

// Denied with EPERM. Any known syscall missing from the allow-lists is denied
// too; these are listed because they are the ones a sandbox exists to stop.
constexpr const char* kDefaultDeny[] = {
    // Mounts and namespaces: the cell's mount table and namespaces are set
    // up by the spawner and are not the workload's to change.
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "unshare",
    "setns",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "open_tree_attr",
    "mount_setattr",
    // Kernel code, kernel state and the machine.
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "bpf",
    "perf_event_open",
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "iopl",
    "ioperm",
    "vhangup",
    "sethostname",
    "setdomainname",
    "nfsservctl",
    "_sysctl",
    "sysfs",
    "ustat",
    "uselib",
    "vm86",
    "vm86old",
    "lsm_get_self_attr",
    "lsm_set_self_attr",
    "lsm_list_modules",
    // The kernel keyring is not namespaced: keys would leak between cells.
    "keyctl",
    "add_key",
    "request_key",
    // Clocks are not namespaced (time namespaces only offset monotonic and
    // boottime). adjtimex and clock_adjtime differ from Docker, which allows
    // them because read-only calls are harmless and writes need
    // CAP_SYS_TIME; a cell has no business tuning the host clock either way.
    "settimeofday",
    "stime",
    "clock_settime",
    "clock_settime64",
    "clock_adjtime",
    "clock_adjtime64",
    "adjtimex",
    // File handles bypass the mount namespace and path permissions ("shocker"
    // container escape). name_to_handle_at differs from Docker, which allows
    // it: without open_by_handle_at a handle is useless, and it reveals inode
    // identities of files outside the cell's view.
    "open_by_handle_at",
    "name_to_handle_at",
    // Tracing and inspecting other processes. Docker allows ptrace and
    // process_vm_* on kernels >= 4.8, relying on every container having its
    // own pid namespace; a cell may share the host's, and then a root cell
    // could trace another cell's processes that run with the same
    // capabilities, escaping its own sandbox into theirs. A cell that needs a
    // debugger runs with profile "none".
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "process_madvise",
    // Memory-management attack surface (userfaultfd makes kernel races
    // reliably winnable) and NUMA policy (CAP_SYS_NICE in Docker).
    "userfaultfd",
    "mbind",
    "set_mempolicy",
    "get_mempolicy",
    "set_mempolicy_home_node",
    "move_pages",
    "migrate_pages",
    // io_uring bypasses seccomp for the operations it performs and has had
    // many privilege escalations; Docker removed it from its default too.
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    // Filesystem-wide notification needs CAP_SYS_ADMIN.
    "fanotify_init",
};

// ---------------------------------------------------------------------------
// strict: enough for a static or dynamic binary to start and to do I/O on the
// descriptors it inherits or opens: no new processes, no new sockets, no
// filesystem changes beyond writing to files, no signals to others.
// ---------------------------------------------------------------------------
constexpr const char* kStrictAllow[] = {
    // Starting up (the dynamic loader and libc initialisation) and exiting.
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "restart_syscall",
    "brk",
    "mmap",
    "mmap2",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    "arch_prctl",
    "set_tid_address",
    "set_robust_list",
    "rseq",
    "set_thread_area",
    "get_thread_area",
    "prlimit64",
    "getrlimit",
    "ugetrlimit",
    "getrandom",
    "futex",
    "futex_time64",
    "uname",
    "sysinfo",
    "sched_yield",
    "sched_getaffinity",
    // Signals on itself.
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigreturn",
    "sigprocmask",
    "sigaltstack",
    // Time.
    "clock_gettime",
    "clock_gettime64",
    "clock_getres",
    "clock_getres_time64",
    "gettimeofday",
    "time",
    "nanosleep",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    // Identity (read-only).
    "getpid",
    "getppid",
    "gettid",
    "getuid",
    "getuid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getegid",
    "getegid32",
    "getresuid",
    "getresuid32",
    "getresgid",
    "getresgid32",
    "getgroups",
    "getgroups32",
    // Files: open, read, write, inspect. ioctl is in kStrictConditional.
    "open",
    "openat",
    "close",
    "read",
    "readv",
    "pread64",
    "preadv",
    "write",
    "writev",
    "pwrite64",
    "pwritev",
    "lseek",
    "_llseek",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "fcntl64",
    "fsync",
    "fdatasync",
    "ftruncate",
    "ftruncate64",
    "fadvise64",
    "fadvise64_64",
    "sendfile",
    "sendfile64",
    "stat",
    "stat64",
    "lstat",
    "lstat64",
    "fstat",
    "fstat64",
    "newfstatat",
    "fstatat64",
    "statx",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
    "getcwd",
    "getdents",
    "getdents64",
    // Waiting on descriptors.
    "poll",
    "ppoll",
    "ppoll_time64",
    "select",
    "_newselect",
    "pselect6",
    "pselect6_time64",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    // Sockets it was given (socket activation); not socket(2) itself.
    "accept",
    "accept4",
    "recvfrom",
    "recvmsg",
    "recvmmsg",
    "sendto",
    "sendmsg",
    "sendmmsg",
    "shutdown",
    "getsockname",
    "getpeername",
    "getsockopt",
};

// ioctl(2) requests that libc and ordinary tools make on their descriptors:
// isatty (TCGETS), terminal width, bytes readable, O_NONBLOCK/FD_CLOEXEC.
constexpr uint64_t kStrictIoctls[] = {TCGETS,  TIOCGWINSZ, FIONREAD,
                                      FIONBIO, FIOCLEX,    FIONCLEX};

constexpr ConditionalSyscall kStrictConditional[] = {
    {"ioctl", 1, Match::kAnyOf, kStrictIoctls},
};

// ---------------------------------------------------------------------------
// Other processes, named by pid: what a cell that shares the host's pid
// namespace may not do to the protected pids (PID 1, myceld). See
// TargetRule and runtime/seccomp/README.md, "Cells without a pid namespace".
// ---------------------------------------------------------------------------
using Check = TargetCheck::Kind;
constexpr TargetCheck Pid(unsigned int arg) {
  return {Check::kProtectedPid, arg, 0};
}
constexpr TargetCheck Group(unsigned int arg) {
  return {Check::kProtectedGroup, arg, 0};
}
constexpr TargetCheck Broadcast(unsigned int arg) {
  return {Check::kBroadcast, arg, 0};
}
constexpr TargetCheck Is(unsigned int arg, uint32_t value) {
  return {Check::kValue, arg, value};
}

// ioprio_set's `which` (<linux/ioprio.h>, which C++ cannot include: a
// parameter there is named `class`).
constexpr uint32_t kIoprioWhoUser = 3;

constexpr TargetRule kTargetRules[] = {
    // kill(pid > 0) signals a process, kill(-pgid) a process group, and
    // kill(-1) every process the caller may signal. kill(0), the caller's
    // own group, stays allowed (a cell's processes lead their own session).
    {"kill", Pid(0)},
    {"kill", Group(0)},
    {"kill", Broadcast(0)},
    // Thread-directed signals: tkill(tid), tgkill(tgid, tid),
    // rt_tgsigqueueinfo(tgid, tid, ...). The kernel insists that tid be in
    // tgid; both are checked all the same.
    {"tkill", Pid(0)},
    {"tgkill", Pid(0)},
    {"tgkill", Pid(1)},
    {"rt_tgsigqueueinfo", Pid(0)},
    {"rt_tgsigqueueinfo", Pid(1)},
    // sigqueue(3). The kernel answers ESRCH to -1 (it is no broadcast here),
    // but the call is refused the same way kill(-1) is.
    {"rt_sigqueueinfo", Pid(0)},
    {"rt_sigqueueinfo", Broadcast(0)},
    // A pidfd would let pidfd_send_signal reach the process.
    {"pidfd_open", Pid(0)},
    // Lowering a process's limits (RLIMIT_NOFILE 0), its priority or CPU
    // share (SCHED_IDLE), its CPUs or its I/O class needs no capability when
    // the uids match: a root cell could starve root's processes.
    {"prlimit64", Pid(0)},
    {"sched_setaffinity", Pid(0)},
    {"sched_setscheduler", Pid(0)},
    {"sched_setparam", Pid(0)},
    {"sched_setattr", Pid(0)},
    // setpriority(which, who, prio) and ioprio_set(which, who, prio): `who`
    // is a pid (PRIO_PROCESS, IOPRIO_WHO_PROCESS) or a process group
    // (PRIO_PGRP, IOPRIO_WHO_PGRP), whose id is its leader's pid. PRIO_USER
    // and IOPRIO_WHO_USER reach every process of a uid, the protected ones
    // included whenever the cell runs as their user; they are denied.
    {"setpriority", Pid(1)},
    {"setpriority", Is(0, PRIO_USER)},
    {"ioprio_set", Pid(1)},
    {"ioprio_set", Is(0, kIoprioWhoUser)},
    // A descriptor's owner receives SIGIO and SIGURG, or any signal chosen
    // with F_SETSIG, SIGSTOP and SIGKILL included, when I/O is ready.
    // F_SETOWN names the owner as a pid or a -pgid; F_SETOWN_EX, FIOSETOWN
    // and SIOCSPGRP pass it behind a pointer the filter cannot read.
    {"fcntl", Is(1, F_SETOWN), Pid(2)},
    {"fcntl", Is(1, F_SETOWN), Group(2)},
    {"fcntl", Is(1, F_SETOWN_EX)},
    {"fcntl64", Is(1, F_SETOWN), Pid(2)},
    {"fcntl64", Is(1, F_SETOWN), Group(2)},
    {"fcntl64", Is(1, F_SETOWN_EX)},
    {"ioctl", Is(1, FIOSETOWN)},
    {"ioctl", Is(1, SIOCSPGRP)},
};

constexpr const char* kTargetEnosys[] = {"pidfd_send_signal"};

constexpr ProfileTable kDefaultTable = {kDefaultAllow, kDefaultConditional,
                                        kEnosys, kDefaultDeny};
// Strict spells out no deny list: everything known and not allowed is
// denied, and that includes all of kDefaultDeny.
constexpr ProfileTable kStrictTable = {
    kStrictAllow, kStrictConditional, kEnosys, {}};
// none filters nothing (extra_deny aside).
constexpr ProfileTable kNoneTable = {};

}  // namespace

const ProfileTable& ProfileTableFor(SeccompProfileKind kind) {
  switch (kind) {
    case SeccompProfileKind::kDefault:
      return kDefaultTable;
    case SeccompProfileKind::kStrict:
      return kStrictTable;
    case SeccompProfileKind::kNone:
      break;
  }
  return kNoneTable;
}

absl::Span<const TargetRule> TargetRules() { return kTargetRules; }

absl::Span<const char* const> TargetEnosys() { return kTargetEnosys; }

std::vector<const char*> AllTableNames() {
  std::vector<const char*> all;
  for (const ProfileTable* table : {&kDefaultTable, &kStrictTable}) {
    all.insert(all.end(), table->allow.begin(), table->allow.end());
    all.insert(all.end(), table->enosys.begin(), table->enosys.end());
    all.insert(all.end(), table->deny.begin(), table->deny.end());
    for (const ConditionalSyscall& c : table->conditional) {
      all.push_back(c.name);
    }
  }
  return all;
}

}  // namespace mycel::seccomp_internal
