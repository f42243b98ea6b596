#include "runtime/spawn/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/spawn/cell_init.h"
#include "runtime/spawn/internal/child_setup.h"
#include "runtime/spawn/internal/clone_vm.h"
#include "runtime/status.h"
#include "runtime/syscalls.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

using spawn_internal::ChildPlan;
using spawn_internal::Report;
using spawn_internal::Step;

constexpr int kAllNamespaces = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS |
                               CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUSER |
                               CLONE_NEWCGROUP;

absl::string_view NamespaceName(int flag) {
  for (const auto& ns : spawn_internal::kNamespaceOrder) {
    if (ns.flag == flag) return ns.name;
  }
  return "?";
}

// "pid,mnt" for CLONE_NEWPID|CLONE_NEWNS.
std::string NamespaceList(int flags) {
  std::vector<absl::string_view> names;
  for (const auto& ns : spawn_internal::kNamespaceOrder) {
    if ((flags & ns.flag) != 0) names.push_back(ns.name);
  }
  return absl::StrJoin(names, ",");
}

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status Validate(const SpawnRequest& r) {
  if (!r.cell_init) {
    if (r.argv.empty()) return Invalid("argv", "empty");
    if (r.argv[0].empty() || r.argv[0][0] != '/') {
      return Invalid("argv[0]",
                     absl::StrCat("\"", r.argv[0],
                                  "\" is not an absolute path "
                                  "(resolve it with ResolveCommand)"));
    }
  }
  if ((r.new_namespaces & ~kAllNamespaces) != 0) {
    return Invalid("new_namespaces",
                   absl::StrFormat("unsupported flags %#x",
                                   r.new_namespaces & ~kAllNamespaces));
  }
  if ((r.join_namespaces & ~kAllNamespaces) != 0) {
    return Invalid("join_namespaces",
                   absl::StrFormat("unsupported flags %#x",
                                   r.join_namespaces & ~kAllNamespaces));
  }
  if (r.join_namespaces != 0 && r.join_pidfd < 0) {
    return Invalid("join_pidfd", "required by join_namespaces");
  }
  if ((r.join_namespaces & r.new_namespaces) != 0) {
    return Invalid("join_namespaces",
                   "a namespace cannot be both new and joined");
  }
  const bool new_mnt = (r.new_namespaces & CLONE_NEWNS) != 0;
  if (!r.rootfs.empty() && !new_mnt) {
    return Invalid("rootfs", "requires CLONE_NEWNS in new_namespaces");
  }
  if (!r.rootfs.empty() && r.rootfs[0] != '/') {
    return Invalid("rootfs", "must be an absolute path");
  }
  if (r.readonly_rootfs && !new_mnt) {
    return Invalid("readonly_rootfs", "requires CLONE_NEWNS in new_namespaces");
  }
  if (r.mount_proc && !new_mnt) {
    return Invalid("mount_proc", "requires CLONE_NEWNS in new_namespaces");
  }
  if (r.slave_mounts && !new_mnt) {
    return Invalid("slave_mounts", "requires CLONE_NEWNS in new_namespaces");
  }
  if ((!r.readonly_paths.empty() || !r.masked_paths.empty()) && !new_mnt) {
    return Invalid("readonly_paths", "requires CLONE_NEWNS in new_namespaces");
  }
  for (const auto* list : {&r.readonly_paths, &r.masked_paths}) {
    for (const std::string& p : *list) {
      if (p.empty() || p[0] != '/') {
        return Invalid(
            list == &r.readonly_paths ? "readonly_paths" : "masked_paths",
            absl::StrCat("\"", p, "\" is not an absolute path"));
      }
    }
  }
  if (r.join_mount_ns_fd >= 0 &&
      ((r.new_namespaces | r.join_namespaces) & CLONE_NEWNS) != 0) {
    return Invalid("join_mount_ns_fd",
                   "a mount namespace is already new or joined");
  }
  if (!r.hostname.empty()) {
    if ((r.new_namespaces & CLONE_NEWUTS) == 0) {
      return Invalid("hostname", "requires CLONE_NEWUTS in new_namespaces");
    }
    if (r.hostname.size() > HOST_NAME_MAX) {
      return Invalid("hostname", "longer than 64 bytes");
    }
  }
  if (r.loopback_up && (r.new_namespaces & CLONE_NEWNET) == 0) {
    return Invalid("loopback_up", "requires CLONE_NEWNET in new_namespaces");
  }
  if ((!r.uid_map.empty() || !r.gid_map.empty()) &&
      (r.new_namespaces & CLONE_NEWUSER) == 0) {
    return Invalid("uid_map", "requires CLONE_NEWUSER in new_namespaces");
  }
  // setresuid/setresgid/setgroups read (id_t)-1 as "leave unchanged": a
  // child asked for it would keep the daemon's root ids.
  constexpr uint32_t kUnchanged = static_cast<uint32_t>(-1);
  if (r.uid.has_value() && *r.uid == kUnchanged) {
    return Invalid("uid", "(uid_t)-1 is not an id");
  }
  if (r.gid.has_value() && *r.gid == kUnchanged) {
    return Invalid("gid", "(gid_t)-1 is not an id");
  }
  for (gid_t g : r.supplementary_groups) {
    if (g == kUnchanged) {
      return Invalid("supplementary_groups", "(gid_t)-1 is not an id");
    }
  }
  for (int fd : {r.stdin_fd, r.stdout_fd, r.stderr_fd}) {
    if (fd < -1) return Invalid("stdio", absl::StrCat("bad fd ", fd));
  }
  for (size_t i = 0; i < r.pre_exec.size(); ++i) {
    if (r.pre_exec[i].fn == nullptr || r.pre_exec[i].name == nullptr) {
      return Invalid(absl::StrCat("pre_exec[", i, "]"), "name and fn required");
    }
  }
  return absl::OkStatus();
}

// What the failed step was, with the request's values: the child only sends
// numbers.
std::string DescribeStep(const SpawnRequest& r, const Report& report) {
  const size_t index = static_cast<size_t>(report.index);
  switch (static_cast<Step>(report.step)) {
    case Step::kUserNsSync:
      return "wait for uid/gid maps";
    case Step::kSetns:
      return absl::StrCat("setns(", NamespaceName(report.index), ")");
    case Step::kCgroupProcs:
      if (index >= r.cgroup_procs_fds.size()) {
        return absl::StrCat("write cgroup.procs of cgroup fd ",
                            r.cgroup_dir_fd);
      }
      if (r.cgroup_procs_fds.size() > 1) {
        return absl::StrCat("write cgroup.procs[", index, "]");
      }
      return "write cgroup.procs";
    case Step::kUnshareCgroup:
      return "unshare(cgroup)";
    case Step::kMountPrivate:
      return "mount(/, MS_REC|MS_PRIVATE)";
    case Step::kBindRootfs:
      return absl::StrCat("mount(", r.rootfs, ", MS_BIND|MS_REC)");
    case Step::kMountProc:
      return absl::StrCat("mount(proc, ", r.rootfs, "/proc)");
    case Step::kEnterRootfs:
      return absl::StrCat("chdir(", r.rootfs, ")");
    case Step::kPivotRoot:
      return absl::StrCat("pivot_root(", r.rootfs, ")");
    case Step::kDetachOldRoot:
      return "umount2(old root, MNT_DETACH)";
    case Step::kEnterNewRoot:
      return "chdir(/ of the new root)";
    case Step::kRemountReadonly:
      return "remount / read-only";
    case Step::kReadonlyPath:
      return absl::StrCat(
          "make ",
          index < r.readonly_paths.size() ? r.readonly_paths[index] : "?",
          " read-only");
    case Step::kMaskPath:
      return absl::StrCat(
          "mask ", index < r.masked_paths.size() ? r.masked_paths[index] : "?");
    case Step::kJoinMountNs:
      return absl::StrCat("setns(mount namespace fd ", r.join_mount_ns_fd, ")");
    case Step::kSethostname:
      return absl::StrCat("sethostname(", r.hostname, ")");
    case Step::kLoopback:
      return "bring up lo";
    case Step::kSetsid:
      return "setsid";
    case Step::kOomScoreAdj:
      return absl::StrCat("write /proc/self/oom_score_adj (",
                          r.oom_score_adj.value_or(0), ")");
    case Step::kRlimit:
      return absl::StrCat("setrlimit(RLIMIT_NOFILE, ",
                          r.open_file_limit.value_or(0), ")");
    case Step::kStdio: {
      static constexpr const char* kNames[] = {"stdin", "stdout", "stderr"};
      const int fds[] = {r.stdin_fd, r.stdout_fd, r.stderr_fd};
      if (index > 2) break;
      return absl::StrCat(
          "dup2(",
          fds[index] < 0 ? "/dev/null" : absl::StrCat("fd ", fds[index]), ", ",
          kNames[index], ")");
    }
    case Step::kSetgroups:
      return absl::StrCat("setgroups(",
                          absl::StrJoin(r.supplementary_groups, ","), ")");
    case Step::kSetresgid:
      return absl::StrCat("setresgid(", r.gid.value_or(0), ")");
    case Step::kSetresuid:
      return absl::StrCat("setresuid(", r.uid.value_or(0), ")");
    case Step::kChdir:
      return absl::StrCat("chdir(", r.cwd.empty() ? "/" : r.cwd, ")");
    case Step::kPreExec:
      if (index < r.pre_exec.size()) return r.pre_exec[index].name;
      break;
    case Step::kCloseFds:
      return "close_range";
    case Step::kSetName:
      return "prctl(PR_SET_NAME)";
    case Step::kExecve:
      return absl::StrCat("execve(", r.argv.empty() ? "" : r.argv[0], ")");
  }
  return absl::StrCat("child step ", report.step, "[", report.index, "]");
}

// Blocks every signal in the calling thread while alive. Around clone3 this
// keeps the daemon's handlers from running in the child before it has reset
// its signal dispositions (the child inherits the mask and clears it just
// before exec).
class ScopedBlockSignals final {
 public:
  ScopedBlockSignals() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  ~ScopedBlockSignals() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  ScopedBlockSignals(const ScopedBlockSignals&) = delete;
  ScopedBlockSignals& operator=(const ScopedBlockSignals&) = delete;

 private:
  sigset_t saved_;
};

// The stack of children that share the daemon's memory (CLONE_VM). A thread
// spawns one child at a time and is suspended until the child execs or
// exits (CLONE_VFORK), so each thread reuses its own.
class ChildStack final {
 public:
  // Generous: the child runs a few system calls, but a pre_exec step may be
  // any async-signal-safe function.
  static constexpr size_t kStackBytes = size_t{256} << 10;
  static constexpr size_t kGuardBytes = size_t{4} << 10;
  static constexpr size_t kTotal = kGuardBytes + kStackBytes;

  ChildStack() = default;
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  ~ChildStack() {
    if (base_ != nullptr) munmap(base_, kTotal);
  }

  // Maps it on first use, with a guard page below.
  absl::Status Ensure() {
    if (base_ != nullptr) return absl::OkStatus();
    void* base =
        mmap(nullptr, kTotal, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return PosixError("mmap(child stack)", errno);
    if (mprotect(base, kGuardBytes, PROT_NONE) != 0) {
      int error = errno;
      munmap(base, kTotal);
      return PosixError("mprotect(child stack guard)", error);
    }
    base_ = static_cast<char*>(base);
    return absl::OkStatus();
  }
  // Stacks grow down: the highest address.
  void* top() const { return base_ + kTotal; }
  // The usable part, above the guard page.
  void* bottom() const { return base_ + kGuardBytes; }

 private:
  char* base_ = nullptr;
};

// Set when a thread could not move back into one of the daemon's own
// namespaces after a spawn (pid, for its children) or InNamespaceOf (uts,
// ipc, net): the processes it spawned would be born in a cell's namespace,
// so it spawns nothing more.
thread_local bool thread_stuck = false;

// The daemon's own namespace of type `nstype` (pid, uts, ipc or net). All
// four are opened once, at the first call.
absl::StatusOr<int> OwnNamespaceFd(int nstype) {
  struct Own {
    int nstype;
    int fd;
    int error;
  };
  static const std::array<Own, 4> owns = [] {
    std::array<Own, 4> a = {Own{CLONE_NEWPID}, Own{CLONE_NEWUTS},
                            Own{CLONE_NEWIPC}, Own{CLONE_NEWNET}};
    for (Own& own : a) {
      std::string path =
          absl::StrCat("/proc/self/ns/", NamespaceName(own.nstype));
      own.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      own.error = own.fd < 0 ? errno : 0;
    }
    return a;
  }();
  for (const Own& own : owns) {
    if (own.nstype != nstype) continue;
    if (own.fd < 0) {
      return PosixError(
          absl::StrCat("open /proc/self/ns/", NamespaceName(nstype)),
          own.error);
    }
    return own.fd;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("nstype: %#x is not pid, uts, ipc or net", nstype));
}

// Moves the calling thread into a namespace of another process and, when
// destroyed (or on Leave), back into the daemon's own; only this thread is
// affected. For CLONE_NEWPID that changes the namespace of the children the
// thread creates afterwards, not its own: to start a process inside a
// cell's pid namespace, the spawning thread enters it for its one clone and
// leaves it at once, so that the process is born there, as a direct child
// of the daemon, without an intermediate process that joins and clones
// again. While inside, the thread must create no other process or thread,
// which Spawn guarantees.
class ThreadInNamespace final {
 public:
  explicit ThreadInNamespace(int nstype) : nstype_(nstype) {}
  ThreadInNamespace(const ThreadInNamespace&) = delete;
  ThreadInNamespace& operator=(const ThreadInNamespace&) = delete;
  ~ThreadInNamespace() { Leave(); }

  // Enters the namespace of the process `pidfd`.
  absl::Status Enter(int pidfd) {
    ASSIGN_OR_RETURN(own_, OwnNamespaceFd(nstype_));
    if (sys::Setns(pidfd, nstype_) != 0) {
      return PosixError(absl::StrCat("setns(", NamespaceName(nstype_), ")"),
                        errno);
    }
    inside_ = true;
    return absl::OkStatus();
  }

  // Back to the daemon's own namespace; idempotent.
  void Leave() {
    if (!inside_) return;
    inside_ = false;
    if (sys::Setns(own_, nstype_) != 0) {
      thread_stuck = true;
      log::Error(absl::StrCat("spawn: cannot leave a cell's ",
                              NamespaceName(nstype_), " namespace"),
                 {{"error", PosixError("setns", errno)}});
    }
  }

 private:
  const int nstype_;
  int own_ = -1;
  bool inside_ = false;
};

// The signals the child must reset to SIG_DFL, from /proc/self/status, as
// a mask with bit sig-1: the ignored ones (SigIgn), and the handled ones
// (SigCgt) unless clone3's CLONE_CLEAR_SIGHAND resets those in the kernel
// (`handlers_cleared`); all of them when the file cannot be read, so that
// the child resets every signal rather than miss one.
uint64_t SignalsToReset(bool handlers_cleared) {
  constexpr uint64_t kAll = ~uint64_t{0};
  absl::StatusOr<std::string> status = ReadFile("/proc/self/status");
  if (!status.ok()) return kAll;
  uint64_t mask = 0;
  std::vector<absl::string_view> keys = {"SigIgn:"};
  if (!handlers_cleared) keys.push_back("SigCgt:");
  for (absl::string_view key : keys) {
    uint64_t bits = 0;
    bool found = false;
    for (absl::string_view line : absl::StrSplit(*status, '\n')) {
      if (!absl::ConsumePrefix(&line, key)) continue;
      found = absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &bits);
      break;
    }
    if (!found) return kAll;
    mask |= bits;
  }
  return mask;
}

// The running binary, opened once, for the cell init to exec (see
// cell_init.h). O_PATH: it is never read, only exec'ed.
absl::StatusOr<int> SelfExeFd() {
  static const int fd = open("/proc/self/exe", O_PATH | O_CLOEXEC);
  static const int error = fd < 0 ? errno : 0;
  if (fd < 0) return PosixError("open /proc/self/exe", error);
  return fd;
}

// Reaps a child that has exited or is about to; returns how it ended.
absl::StatusOr<siginfo_t> Reap(int pidfd) {
  for (;;) {
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    if (waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED) == 0) {
      return info;
    }
    if (errno != EINTR) return PosixError("waitid(spawned child)", errno);
  }
}

// For a child that will not be handed out: no process is left behind.
void KillAndReap(const UniqueFd& pidfd) {
  if (!pidfd) return;
  sys::PidfdSendSignal(pidfd.get(), SIGKILL, nullptr, 0);
  (void)Reap(pidfd.get());
}

absl::Status WriteProcFile(pid_t pid, absl::string_view name,
                           absl::string_view data) {
  std::string path = absl::StrCat("/proc/", pid, "/", name);
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  // The kernel takes a map in exactly one write(2).
  ssize_t n = write(fd.get(), data.data(), data.size());
  if (n < 0) return PosixError(absl::StrCat("write ", path), errno);
  if (static_cast<size_t>(n) != data.size()) {
    return absl::InternalError(absl::StrCat("write ", path, ": short write"));
  }
  return absl::OkStatus();
}

absl::Status WriteUserNamespaceMaps(pid_t pid, const SpawnRequest& r) {
  if (!r.uid_map.empty())
    RETURN_IF_ERROR(WriteProcFile(pid, "uid_map", r.uid_map));
  if (r.gid_map.empty()) return absl::OkStatus();
  // With CAP_SETGID (a root daemon) the kernel takes the map as it is, and
  // the namespace allows setgroups, which its processes need to drop the
  // daemon's supplementary groups. Without it, the kernel requires that
  // setgroups be denied first.
  absl::Status s = WriteProcFile(pid, "gid_map", r.gid_map);
  if (absl::IsPermissionDenied(s) && r.supplementary_groups.empty()) {
    RETURN_IF_ERROR(WriteProcFile(pid, "setgroups", "deny"));
    s = WriteProcFile(pid, "gid_map", r.gid_map);
  }
  return s;
}

// The first error the child reported on the sync socket, read until EOF
// (the child's end closes at its exec, or when it exits).
absl::StatusOr<std::optional<Report>> ReadReport(const UniqueFd& sock) {
  std::optional<Report> first;
  for (;;) {
    Report report;
    ssize_t n = recv(sock.get(), &report, sizeof(report), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError("recv(spawn sync socket)", errno);
    }
    if (n == 0) return first;
    if (static_cast<size_t>(n) != sizeof(report)) {
      return absl::InternalError(
          absl::StrCat("spawn sync socket: message of ", n, " bytes"));
    }
    if (!first) first = report;
  }
}

}  // namespace

absl::Status InNamespaceOf(int pidfd, int nstype,
                           absl::FunctionRef<absl::Status()> fn) {
  if (nstype != CLONE_NEWUTS && nstype != CLONE_NEWIPC &&
      nstype != CLONE_NEWNET) {
    return absl::InvalidArgumentError(
        absl::StrFormat("nstype: %#x is not uts, ipc or net", nstype));
  }
  ThreadInNamespace inside(nstype);
  RETURN_IF_ERROR(inside.Enter(pidfd));
  return fn();
}

absl::Status SetHostnameOf(int pidfd, const std::string& hostname) {
  return InNamespaceOf(pidfd, CLONE_NEWUTS, [&] {
    if (sethostname(hostname.data(), hostname.size()) != 0) {
      return PosixError(absl::StrCat("sethostname ", hostname), errno);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<Child> Spawn(const SpawnRequest& request) {
  RETURN_IF_ERROR(Validate(request));
  if (thread_stuck) {
    return absl::InternalError(
        "spawn: this thread could not leave a cell's namespace after an "
        "earlier call, so it spawns nothing more");
  }

  // Everything the child touches is built here, before the clone.
  std::vector<char*> argv;
  std::vector<char*> envp;
  if (request.cell_init) {
    argv = {const_cast<char*>(kCellInitArgv0), nullptr};
    envp = {nullptr};
  } else {
    argv.reserve(request.argv.size() + 1);
    for (const std::string& arg : request.argv) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    envp.reserve(request.env.size() + 1);
    for (const std::string& var : request.env) {
      envp.push_back(const_cast<char*>(var.c_str()));
    }
    envp.push_back(nullptr);
  }
  const std::string rootfs_proc = absl::StrCat(request.rootfs, "/proc");

  UniqueFd devnull;
  if (request.stdin_fd < 0 || request.stdout_fd < 0 || request.stderr_fd < 0) {
    devnull.reset(open("/dev/null", O_RDWR | O_CLOEXEC));
    if (!devnull) return PosixError("open /dev/null", errno);
  }

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return PosixError("socketpair(spawn sync socket)", errno);
  }
  UniqueFd parent_end(sv[0]);
  UniqueFd child_end(sv[1]);
  // A daemon started with 0/1/2 closed may get them here; the child's stdio
  // dup2 would then overwrite its sync socket.
  if (child_end.get() < 3) {
    UniqueFd high(fcntl(child_end.get(), F_DUPFD_CLOEXEC, 3));
    if (!high) return PosixError("dup spawn sync socket", errno);
    child_end = std::move(high);
  }

  const bool new_user = (request.new_namespaces & CLONE_NEWUSER) != 0;
  // A child that shares our memory cannot wait for us to write its maps
  // (we are suspended until it execs), and the kernel lets only a process
  // that shares its memory with nobody join a user namespace.
  const bool share_memory =
      !new_user && (request.join_namespaces & CLONE_NEWUSER) == 0;
  thread_local ChildStack stack;
  if (share_memory) RETURN_IF_ERROR(stack.Ensure());
  // A child that shares our memory is born in its cgroup v2 where CloneVm
  // works (see clone_vm.h); otherwise it joins by writing cgroup.procs, as
  // for v1, because clone(2) has no CLONE_INTO_CGROUP.
  std::vector<int> procs_fds = request.cgroup_procs_fds;
  UniqueFd v2_procs;
  auto join_v2_by_write = [&]() -> absl::Status {
    if (request.cgroup_dir_fd < 0) return absl::OkStatus();
    v2_procs.reset(
        openat(request.cgroup_dir_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!v2_procs) {
      return PosixError(absl::StrCat("open cgroup.procs of cgroup fd ",
                                     request.cgroup_dir_fd),
                        errno);
    }
    procs_fds.push_back(v2_procs.get());
    return absl::OkStatus();
  };
  if (share_memory && !spawn_internal::kHaveCloneVm) {
    RETURN_IF_ERROR(join_v2_by_write());
  }

  ChildPlan plan;
  plan.sync_fd = child_end.get();
  plan.wait_for_maps = new_user;
  plan.share_memory = share_memory;
  // Every clone3 below clears the daemon's handlers in the child
  // (CLONE_CLEAR_SIGHAND); only clone(2), the fallback, cannot.
  plan.reset_signals = SignalsToReset(/*handlers_cleared=*/!share_memory ||
                                      spawn_internal::kHaveCloneVm);
  plan.join_pidfd = request.join_pidfd;
  plan.join_namespaces = request.join_namespaces & ~CLONE_NEWPID;
  plan.cgroup_procs_fds = procs_fds.data();
  plan.cgroup_procs_count = procs_fds.size();
  plan.unshare_cgroup = (request.new_namespaces & CLONE_NEWCGROUP) != 0;
  plan.setup_mounts = (request.new_namespaces & CLONE_NEWNS) != 0;
  if (!request.rootfs.empty()) {
    plan.rootfs = request.rootfs.c_str();
    plan.rootfs_proc = rootfs_proc.c_str();
  }
  plan.mount_proc = request.mount_proc;
  plan.readonly_rootfs = request.readonly_rootfs;
  plan.slave_mounts = request.slave_mounts;
  // The child confines these before it pivots into a rootfs, so there
  // they are the rootfs's paths.
  std::vector<std::string> confined;
  for (const auto* list : {&request.readonly_paths, &request.masked_paths}) {
    for (const std::string& p : *list) confined.push_back(request.rootfs + p);
  }
  std::vector<const char*> confined_ptrs;
  for (const std::string& p : confined) confined_ptrs.push_back(p.c_str());
  plan.readonly_paths = confined_ptrs.data();
  plan.readonly_count = request.readonly_paths.size();
  plan.masked_paths = confined_ptrs.data() + request.readonly_paths.size();
  plan.masked_count = request.masked_paths.size();
  plan.join_mount_ns_fd = request.join_mount_ns_fd;
  if (!request.hostname.empty()) {
    plan.hostname = request.hostname.c_str();
    plan.hostname_len = request.hostname.size();
  }
  plan.loopback_up = request.loopback_up;
  plan.new_session = request.new_session;
  if (request.open_file_limit.has_value()) {
    // The hard limit is kept: only the daemon's raised soft limit goes back.
    rlimit current;
    if (getrlimit(RLIMIT_NOFILE, &current) != 0) {
      return PosixError("getrlimit(RLIMIT_NOFILE)", errno);
    }
    plan.set_open_file_limit = true;
    plan.open_file_limit.rlim_max = current.rlim_max;
    plan.open_file_limit.rlim_cur =
        std::min(*request.open_file_limit, current.rlim_max);
  }
  if (request.oom_score_adj.has_value()) {
    if (*request.oom_score_adj < -1000 || *request.oom_score_adj > 1000) {
      return absl::InvalidArgumentError(
          absl::StrCat("oom_score_adj: want a number from -1000 to 1000, got ",
                       *request.oom_score_adj));
    }
    const std::string text = absl::StrCat(*request.oom_score_adj, "\n");
    memcpy(plan.oom_score_adj, text.data(), text.size());
    plan.oom_score_adj_len = text.size();
  }
  const int stdio[3] = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
  for (int i = 0; i < 3; ++i) {
    plan.stdio[i] = stdio[i] >= 0 ? stdio[i] : devnull.get();
  }
  // Creating or joining a user namespace does not change the child's ids:
  // it still runs as the daemon's host uid and gids (root's, for myceld),
  // unmapped inside but still the owner of the host's files. So in a user
  // namespace the child always sets its ids, by default to the namespace's
  // root (for a new namespace: when the matching map is given), and
  // replaces its supplementary groups (clears them by default).
  const bool joins_user = (request.join_namespaces & CLONE_NEWUSER) != 0;
  plan.set_gid = request.gid.has_value() || joins_user ||
                 (new_user && !request.gid_map.empty());
  plan.gid = request.gid.value_or(0);
  plan.set_uid = request.uid.has_value() || joins_user ||
                 (new_user && !request.uid_map.empty());
  plan.uid = request.uid.value_or(0);
  plan.set_groups =
      !request.supplementary_groups.empty() || plan.set_uid || plan.set_gid;
  plan.groups = request.supplementary_groups.data();
  plan.groups_count = request.supplementary_groups.size();
  // Only an unprivileged creator's namespace denies setgroups (see
  // SpawnRequest::uid_map); there, clearing the groups is skipped.
  plan.groups_deniable =
      (new_user || joins_user) && request.supplementary_groups.empty();
  plan.cwd = request.cwd.empty() ? "/" : request.cwd.c_str();
  plan.pre_exec = request.pre_exec.data();
  plan.pre_exec_count = request.pre_exec.size();
  plan.cell_init = request.cell_init;
  if (request.cell_init) {
    ASSIGN_OR_RETURN(plan.init_exe_fd, SelfExeFd());
  } else {
    plan.path = argv[0];
  }
  plan.argv = argv.data();
  plan.envp = envp.data();

  ThreadInNamespace pid_namespace(CLONE_NEWPID);
  if (request.join_namespaces & CLONE_NEWPID) {
    RETURN_IF_ERROR(pid_namespace.Enter(request.join_pidfd));
  }
  int pidfd = -1;
  long pid = -1;
  bool used_clone3 = !share_memory;
  if (share_memory) {
    // As posix_spawn: no page tables to copy, and no copy-on-write faults
    // (each with a TLB shootdown) in the daemon afterwards. This thread is
    // suspended until the child execs or exits; the daemon's other threads
    // run on, and the child touches only its stack and the plan.
    const int flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD |
                      (request.new_namespaces & ~CLONE_NEWCGROUP);
    if constexpr (spawn_internal::kHaveCloneVm) {
      struct clone_args args;
      memset(&args, 0, sizeof(args));
      // CLONE_CLEAR_SIGHAND: no handler of the daemon's can run in a child
      // that shares its memory, and the child need not reset each one.
      args.flags = static_cast<uint64_t>(flags) | CLONE_CLEAR_SIGHAND;
      args.pidfd = reinterpret_cast<uintptr_t>(&pidfd);
      args.exit_signal = SIGCHLD;
      args.stack = reinterpret_cast<uintptr_t>(stack.bottom());
      args.stack_size = ChildStack::kStackBytes;
      if (request.cgroup_dir_fd >= 0) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = static_cast<uint64_t>(request.cgroup_dir_fd);
      }
      ScopedBlockSignals blocked;
      pid = spawn_internal::CloneVm(&args, spawn_internal::ChildMain, &plan);
      used_clone3 = pid >= 0 || errno != ENOSYS;
      if (!used_clone3) {
        // No clone3 here: a seccomp filter that hides it (Docker's default
        // profile answers ENOSYS), or a kernel before 5.3.
        absl::Status joined = join_v2_by_write();
        if (!joined.ok()) return joined;
        plan.cgroup_procs_fds = procs_fds.data();
        plan.cgroup_procs_count = procs_fds.size();
        plan.reset_signals = SignalsToReset(/*handlers_cleared=*/false);
      }
    }
    if (!used_clone3) {
      ScopedBlockSignals blocked;
      pid = clone(spawn_internal::ChildMain, stack.top(), flags | SIGCHLD,
                  &plan, &pidfd);
    }
  } else {
    struct clone_args args;
    memset(&args, 0, sizeof(args));
    // The cgroup namespace is unshared by the child after it joined its
    // cgroups, so that the namespace is rooted there.
    args.flags =
        CLONE_PIDFD | CLONE_CLEAR_SIGHAND |
        static_cast<uint64_t>(request.new_namespaces & ~CLONE_NEWCGROUP);
    args.pidfd = reinterpret_cast<uintptr_t>(&pidfd);
    args.exit_signal = SIGCHLD;
    if (request.cgroup_dir_fd >= 0) {
      args.flags |= CLONE_INTO_CGROUP;
      args.cgroup = static_cast<uint64_t>(request.cgroup_dir_fd);
    }
    ScopedBlockSignals blocked;
    pid = sys::Clone3(&args, sizeof(args));
    if (pid == 0) spawn_internal::RunChild(plan);
  }
  const int clone_errno = errno;
  pid_namespace.Leave();
  if (pid < 0) {
    std::string what = used_clone3 ? "clone3" : "clone";
    if (request.join_namespaces & CLONE_NEWPID) {
      // ENOMEM here means the namespace's init has exited.
      absl::StrAppend(&what, " into the pid namespace of fd ",
                      request.join_pidfd);
    }
    const int created = request.new_namespaces & ~CLONE_NEWCGROUP;
    if (created != 0) {
      absl::StrAppend(&what, " new namespaces ", NamespaceList(created));
    }
    if (request.cgroup_dir_fd >= 0) {
      absl::StrAppend(&what, " into cgroup fd ", request.cgroup_dir_fd);
    }
    return PosixError(what, clone_errno);
  }
  UniqueFd child_pidfd(pidfd);
  child_end.reset();  // from now on, EOF means every child copy is closed

  if (plan.wait_for_maps) {
    absl::Status maps =
        WriteUserNamespaceMaps(static_cast<pid_t>(pid), request);
    if (maps.ok() && send(parent_end.get(), &spawn_internal::kMapsWritten, 1,
                          MSG_NOSIGNAL) != 1) {
      maps = PosixError("send to spawned child", errno);
    }
    if (!maps.ok()) {
      KillAndReap(child_pidfd);
      return maps;
    }
  }

  absl::StatusOr<std::optional<Report>> report = ReadReport(parent_end);
  if (!report.ok()) {
    KillAndReap(child_pidfd);
    return report.status();
  }
  if (report->has_value()) {
    // The failed child exits right after reporting; leave no zombie.
    (void)Reap(child_pidfd.get());
    return PosixError(DescribeStep(request, **report), (*report)->error);
  }
  const pid_t child_pid = static_cast<pid_t>(pid);
  absl::StatusOr<uint64_t> start_time = ProcessStartTime(child_pid);
  // A child that has run and exited by now may also have been reaped (the
  // reaper does not hold spawns back), and its /proc entry is gone, or its
  // pid even another's. Asked after the read: while the pidfd's process
  // exists, the pid read was its. One that is gone has no start time to
  // identify it by (0: never adopted), and its exit reaches its watch.
  if (sys::PidfdSendSignal(child_pidfd.get(), 0, nullptr, 0) != 0 &&
      errno == ESRCH) {
    start_time = 0;
  }
  if (!start_time.ok()) {
    KillAndReap(child_pidfd);
    return Annotate(start_time.status(),
                    absl::StrCat("spawned pid ", child_pid));
  }
  return Child(std::move(child_pidfd), child_pid, *start_time);
}

}  // namespace mycel
