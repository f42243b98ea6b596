#include "runtime/spawn/internal/child_setup.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <net/if.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/spawn/cell_init.h"
#include "runtime/syscalls.h"

namespace mycel::spawn_internal {
namespace {

[[noreturn]] void Fail(const ChildPlan& plan, Step step, int index,
                       int error) noexcept {
  Report report;
  report.step = static_cast<int32_t>(step);
  report.index = index;
  report.error = error;
  // If this fails the parent is gone; there is nobody left to tell.
  while (send(plan.sync_fd, &report, sizeof(report), MSG_NOSIGNAL) < 0 &&
         errno == EINTR) {
  }
  _exit(127);
}

[[noreturn]] void FailErrno(const ChildPlan& plan, Step step,
                            int index = 0) noexcept {
  Fail(plan, step, index, errno);
}

// Ignored signals (SIGPIPE in any network daemon) would stay ignored across
// exec, and the daemon's handlers must not run here: every signal stays
// blocked until just before execve, and by then those are SIG_DFL. Only
// the signals of plan.reset_signals are reset (those the parent ignores,
// and those it handles where the clone did not clear them): a system call
// is not cheap everywhere (tens of microseconds under some hypervisors), and
// a loop over all 64 signals cost more than the rest of the child's setup.
void ResetSignalDispositions(const ChildPlan& plan) noexcept {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig <= 64; ++sig) {
    if ((plan.reset_signals & (uint64_t{1} << (sig - 1))) == 0) continue;
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    // glibc refuses its internal real-time signals with EINVAL; they are
    // sent only to threads of the daemon, never to this process.
    sigaction(sig, &dfl, nullptr);
  }
}

void WaitForMaps(const ChildPlan& plan) noexcept {
  char byte = 0;
  ssize_t n;
  do {
    n = read(plan.sync_fd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n < 0) FailErrno(plan, Step::kUserNsSync);
  if (n == 0 || byte != kMapsWritten) Fail(plan, Step::kUserNsSync, 0, EPIPE);
}

void JoinNamespaces(const ChildPlan& plan) noexcept {
  // First, while the child still has the caller's privileges: joining a
  // user namespace below would drop those needed to join this one.
  if (plan.join_mount_ns_fd >= 0 &&
      sys::Setns(plan.join_mount_ns_fd, CLONE_NEWNS) != 0) {
    FailErrno(plan, Step::kJoinMountNs);
  }
  for (const auto& ns : kNamespaceOrder) {
    if ((plan.join_namespaces & ns.flag) == 0) continue;
    if (sys::Setns(plan.join_pidfd, ns.flag) != 0) {
      FailErrno(plan, Step::kSetns, ns.flag);
    }
  }
}

void JoinCgroups(const ChildPlan& plan) noexcept {
  for (size_t i = 0; i < plan.cgroup_procs_count; ++i) {
    ssize_t n;
    do {
      n = write(plan.cgroup_procs_fds[i], "0", 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) {
      Fail(plan, Step::kCgroupProcs, static_cast<int>(i), n < 0 ? errno : EIO);
    }
  }
  if (plan.unshare_cgroup && unshare(CLONE_NEWCGROUP) != 0) {
    FailErrno(plan, Step::kUnshareCgroup);
  }
}

// The kernel's struct mount_attr and mount_setattr(2) (Linux 5.12), which
// glibc 2.36 does not wrap.
struct MountAttr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};
constexpr uint64_t kMountAttrRdonly = 0x00000001;
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

// Whether `path` is the root of a mount (statx, Linux 5.8); false when the
// kernel cannot say.
bool IsMountRoot(const char* path) noexcept {
  struct statx stx;
  if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, 0, &stx) != 0) return false;
  return (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0 &&
         (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
}

// Makes `path` and every mount below it read-only. A path that is a mount's
// root (/sys) is changed in place: this namespace's mounts are its own
// copies. One that is not (/proc/sys) is first bound onto itself, so that
// only it changes and not the whole mount it is in.
int MakeReadonly(const char* path) noexcept {
  if (!IsMountRoot(path) &&
      mount(path, path, nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    return -1;
  }
  MountAttr attr = {kMountAttrRdonly, 0, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &attr,
              sizeof(attr)) == 0) {
    return 0;
  }
  if (errno != ENOSYS) return -1;
  // Before Linux 5.12: the top mount only (and statx cannot tell mount
  // roots before 5.8, so the path was bound onto itself first).
  return mount(nullptr, path, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY,
               nullptr);
}

// Covers `path`: a directory with an empty read-only tmpfs, anything else
// with /dev/null.
int Mask(const char* path) noexcept {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (S_ISDIR(st.st_mode)) {
    return mount("tmpfs", path, "tmpfs",
                 MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                 "size=4k,nr_inodes=1,mode=0500");
  }
  return mount("/dev/null", path, nullptr, MS_BIND, nullptr);
}

void ConfinePaths(const ChildPlan& plan) noexcept {
  for (size_t i = 0; i < plan.readonly_count; ++i) {
    struct stat st;
    if (stat(plan.readonly_paths[i], &st) != 0) {
      if (errno == ENOENT) continue;
      FailErrno(plan, Step::kReadonlyPath, static_cast<int>(i));
    }
    if (MakeReadonly(plan.readonly_paths[i]) != 0) {
      FailErrno(plan, Step::kReadonlyPath, static_cast<int>(i));
    }
  }
  for (size_t i = 0; i < plan.masked_count; ++i) {
    if (Mask(plan.masked_paths[i]) != 0) {
      FailErrno(plan, Step::kMaskPath, static_cast<int>(i));
    }
  }
}

constexpr unsigned long kProcFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;

void SetUpMounts(const ChildPlan& plan) noexcept {
  if (!plan.setup_mounts) return;
  // Nothing done below may propagate back to the host's mount table. A
  // slave still receives the host's new mounts.
  if (mount(nullptr, "/", nullptr,
            MS_REC | (plan.slave_mounts ? MS_SLAVE : MS_PRIVATE),
            nullptr) != 0) {
    FailErrno(plan, Step::kMountPrivate);
  }
  if (plan.rootfs != nullptr) {
    // pivot_root needs the new root to be a mount point.
    if (mount(plan.rootfs, plan.rootfs, nullptr, MS_BIND | MS_REC, nullptr) !=
        0) {
      FailErrno(plan, Step::kBindRootfs);
    }
    mkdir(plan.rootfs_proc, 0555);  // mount reports it if this mattered
    if (mount("proc", plan.rootfs_proc, "proc", kProcFlags, nullptr) != 0) {
      FailErrno(plan, Step::kMountProc);
    }
    // Before the pivot, with the paths under the rootfs: the host's
    // /dev/null, which masks files, is still a mount of this namespace.
    ConfinePaths(plan);
    // pivot_root(".", ".") stacks the old root on top of the new one, so
    // no put_old directory is needed; the detach then drops the old root.
    if (chdir(plan.rootfs) != 0) FailErrno(plan, Step::kEnterRootfs);
    if (sys::PivotRoot(".", ".") != 0) FailErrno(plan, Step::kPivotRoot);
    if (umount2(".", MNT_DETACH) != 0) FailErrno(plan, Step::kDetachOldRoot);
    if (chdir("/") != 0) FailErrno(plan, Step::kEnterNewRoot);
  } else {
    if (plan.mount_proc &&
        mount("proc", "/proc", "proc", kProcFlags, nullptr) != 0) {
      FailErrno(plan, Step::kMountProc);
    }
    ConfinePaths(plan);
  }
  if (plan.readonly_rootfs) {
    // A bind remount must repeat the flags it keeps, or the kernel refuses
    // to clear locked ones (nosuid, nodev, ...) in a user namespace.
    struct statfs fs;
    if (statfs("/", &fs) != 0) FailErrno(plan, Step::kRemountReadonly);
    unsigned long keep = static_cast<unsigned long>(fs.f_flags) &
                         (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME |
                          MS_NODIRATIME | MS_RELATIME);
    if (mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | keep,
              nullptr) != 0) {
      FailErrno(plan, Step::kRemountReadonly);
    }
  }
}

void BringUpLoopback(const ChildPlan& plan) noexcept {
  int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) FailErrno(plan, Step::kLoopback);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  memcpy(ifr.ifr_name, "lo", 3);
  if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) FailErrno(plan, Step::kLoopback);
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  if (ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) FailErrno(plan, Step::kLoopback);
  close(sock);
}

void SetUpStdio(const ChildPlan& plan) noexcept {
  // First move every source above 2, so that a source that is itself 0, 1
  // or 2 cannot be overwritten by an earlier dup2. The copies are CLOEXEC.
  int moved[3];
  for (int i = 0; i < 3; ++i) {
    moved[i] = fcntl(plan.stdio[i], F_DUPFD_CLOEXEC, 3);
    if (moved[i] < 0) FailErrno(plan, Step::kStdio, i);
  }
  for (int i = 0; i < 3; ++i) {
    if (dup2(moved[i], i) < 0) FailErrno(plan, Step::kStdio, i);
  }
}

// Whether this process's user namespace denies setgroups.
bool SetgroupsDenied() noexcept {
  int fd = open("/proc/self/setgroups", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[8];
  ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  return n >= 4 && memcmp(buf, "deny", 4) == 0;
}

void SetCredentials(const ChildPlan& plan) noexcept {
  if (plan.set_groups && sys::Setgroups(plan.groups_count, plan.groups) != 0) {
    const int error = errno;
    if (!(error == EPERM && plan.groups_deniable && SetgroupsDenied())) {
      Fail(plan, Step::kSetgroups, 0, error);
    }
  }
  if (plan.set_gid && sys::Setresgid(plan.gid, plan.gid, plan.gid) != 0) {
    FailErrno(plan, Step::kSetresgid);
  }
  if (plan.set_uid && sys::Setresuid(plan.uid, plan.uid, plan.uid) != 0) {
    FailErrno(plan, Step::kSetresuid);
  }
}

void RunPreExecSteps(const ChildPlan& plan, bool before_credentials) noexcept {
  for (size_t i = 0; i < plan.pre_exec_count; ++i) {
    const PreExecStep& step = plan.pre_exec[i];
    if (step.before_credentials != before_credentials) continue;
    int error = step.fn(step.arg);
    if (error != 0) {
      Fail(plan, Step::kPreExec, static_cast<int>(i),
           error < 0 ? -error : error);
    }
  }
}

// Marks every descriptor but 0/1/2 close-on-exec: descriptors the daemon
// opened without O_CLOEXEC must not leak into a sandbox either (the sync
// socket already is). Done before the pre-exec steps, so that a seccomp
// profile they load need not allow close_range.
void CloseInheritedFds(const ChildPlan& plan) noexcept {
  if (sys::CloseRange(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    FailErrno(plan, Step::kCloseFds);
  }
}

// The init: the running binary, recognised by its argv (see cell_init.h).
// Signals stay blocked: the init waits for them with sigtimedwait, and any
// sent before it gets there stay pending across the exec.
void ExecCellInit(const ChildPlan& plan) noexcept {
  syscall(SYS_execveat, plan.init_exe_fd, "", plan.argv, plan.envp,
          AT_EMPTY_PATH);
  FailErrno(plan, Step::kExecve);
}

[[noreturn]] void FinishChild(const ChildPlan& plan) noexcept {
  JoinCgroups(plan);
  SetUpMounts(plan);
  if (plan.hostname != nullptr &&
      sethostname(plan.hostname, plan.hostname_len) != 0) {
    FailErrno(plan, Step::kSethostname);
  }
  if (plan.loopback_up) BringUpLoopback(plan);
  if (plan.new_session && setsid() < 0) FailErrno(plan, Step::kSetsid);
  if (plan.set_open_file_limit &&
      syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, &plan.open_file_limit,
              nullptr) != 0) {
    FailErrno(plan, Step::kRlimit);
  }
  SetUpStdio(plan);
  RunPreExecSteps(plan, /*before_credentials=*/true);
  SetCredentials(plan);
  if (chdir(plan.cwd) != 0) FailErrno(plan, Step::kChdir);
  CloseInheritedFds(plan);
  RunPreExecSteps(plan, /*before_credentials=*/false);

  if (plan.cell_init) ExecCellInit(plan);
  // The parent blocked every signal around the clone; the program starts
  // with none blocked.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(plan.path, plan.argv, plan.envp);
  FailErrno(plan, Step::kExecve);
}

void SetOomScoreAdj(const ChildPlan& plan) noexcept {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) FailErrno(plan, Step::kOomScoreAdj);
  if (write(fd, plan.oom_score_adj, plan.oom_score_adj_len) !=
      static_cast<ssize_t>(plan.oom_score_adj_len)) {
    FailErrno(plan, Step::kOomScoreAdj);
  }
  close(fd);
}

}  // namespace

void RunChild(const ChildPlan& plan) noexcept {
  ResetSignalDispositions(plan);
  if (plan.oom_score_adj_len > 0) SetOomScoreAdj(plan);
  if (plan.wait_for_maps) WaitForMaps(plan);
  JoinNamespaces(plan);
  FinishChild(plan);
}

int ChildMain(void* plan) noexcept {
  RunChild(*static_cast<const ChildPlan*>(plan));
}

}  // namespace mycel::spawn_internal
