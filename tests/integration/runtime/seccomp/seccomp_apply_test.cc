// Integration tests for seccomp profiles: each test forks, loads a filter in
// the child with ApplySeccompInChild, and then execs real programs or makes
// raw syscalls whose errno the child reports back. Needs root (mount and
// namespace probes); the binary is skipped otherwise.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timex.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/seccomp/internal/filter_builder.h"
#include "runtime/seccomp/seccomp_profile.h"
#include "tests/integration/runtime/seccomp/child_runner.h"
#include "tests/testing/process.h"
#include "tests/testing/requires.h"

namespace mycel {
namespace {

using testing::ChildResult;
using testing::Exec;
using testing::ParseReport;
using testing::Report;
using testing::ReportErrno;
using testing::RunInChild;

constexpr long kX32Bit = 0x40000000;
// Exit codes of a child that could not get to its test.
constexpr int kApplyFailed = 100;
constexpr int kSetupFailed = 99;

MYCEL_TEST_REQUIRES(testing::Root("mount and namespace probes"));
// Root without CAP_SYS_ADMIN (a container) cannot make namespaces, and the
// probes here compare the filter's answer with the kernel's.
MYCEL_TEST_REQUIRES(testing::CanUnshare(CLONE_NEWUTS | CLONE_NEWNS));

SeccompProgram Compile(SeccompProfileKind kind,
                       std::vector<std::string> extra_deny = {}) {
  auto program = CompileSeccomp({kind, std::move(extra_deny)});
  REQUIRE_MESSAGE(program.ok(), program.status().ToString());
  return std::move(*program);
}

// In the child: loads `program`, or reports why not.
bool Apply(const SeccompProgram& program) {
  int rc = ApplySeccompInChild(program);
  if (rc != 0) Report("apply", rc);
  return rc == 0;
}

// Runs argv under `program` in a child.
ChildResult ExecUnder(const SeccompProgram& program,
                      std::initializer_list<const char*> argv) {
  return RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    return Exec(argv);
  });
}

std::string Errno(int e) { return absl::StrCat(e); }

void* ThreadBody(void*) { return nullptr; }

TEST_CASE("default: ordinary programs run") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);

  ChildResult r = ExecUnder(program, {"/bin/true"});
  CHECK_MESSAGE(r.exit_code == 0, r.out);

  r = ExecUnder(program, {"/bin/ls", "/"});
  CHECK_MESSAGE(r.exit_code == 0, r.out);
  CHECK_MESSAGE(absl::StrContains(absl::StrCat("\n", r.out), "\netc\n"), r.out);

  r = ExecUnder(program, {"/bin/sh", "-c", "echo hi"});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "hi\n");

  // The shell forks (clone) for a pipeline.
  r = ExecUnder(program, {"/bin/sh", "-c", "echo a | cat; echo $?"});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "a\n0\n");
}

TEST_CASE("default: unshare and mount fail with EPERM") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  testing::TempDir dir;

  ChildResult r = ExecUnder(program, {"/usr/bin/unshare", "-U", "true"});
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(absl::StrContains(r.out, "Operation not permitted"), r.out);

  r = RunInChild([&] {
    // A private mount namespace first: if the filter let mount through, the
    // tmpfs would land there and not on the host.
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return kSetupFailed;
    }
    if (!Apply(program)) return kApplyFailed;
    ReportErrno("unshare", unshare(CLONE_NEWUTS));
    ReportErrno("mount",
                mount("none", dir.path().c_str(), "tmpfs", 0, nullptr));
    ReportErrno("umount2", umount2(dir.path().c_str(), MNT_DETACH));
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  CHECK(report["unshare"] == Errno(EPERM));
  CHECK(report["mount"] == Errno(EPERM));
  CHECK(report["umount2"] == Errno(EPERM));
}

// Each dangerous syscall of the default profile, called with arguments that
// would be harmless if the filter let it through.
TEST_CASE("default: dangerous syscalls fail with EPERM") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  ChildResult r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    struct timex tx = {};
    struct timespec ts = {};
    ReportErrno("setns", syscall(SYS_setns, -1, 0));
    ReportErrno("pivot_root", syscall(SYS_pivot_root, "/nonexistent-mycel-a",
                                      "/nonexistent-mycel-b"));
    ReportErrno("kexec_load", syscall(SYS_kexec_load, 0, 0, nullptr, 0));
    ReportErrno("kexec_file_load",
                syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
    ReportErrno("init_module", syscall(SYS_init_module, nullptr, 0, ""));
    ReportErrno("finit_module", syscall(SYS_finit_module, -1, "", 0));
    ReportErrno("delete_module",
                syscall(SYS_delete_module, "mycel_nonexistent", O_NONBLOCK));
    ReportErrno("bpf", syscall(SYS_bpf, -1, nullptr, 0));
    ReportErrno("perf_event_open",
                syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0));
    ReportErrno("ptrace", syscall(SYS_ptrace, 2 /* PEEKDATA */, 0, 0, 0));
    ReportErrno("process_vm_readv",
                syscall(SYS_process_vm_readv, 0, nullptr, 0, nullptr, 0, 0));
    ReportErrno("keyctl", syscall(SYS_keyctl, -1, 0, 0, 0, 0));
    ReportErrno("add_key",
                syscall(SYS_add_key, nullptr, nullptr, nullptr, 0, 0));
    ReportErrno("request_key",
                syscall(SYS_request_key, nullptr, nullptr, nullptr, 0));
    ReportErrno("reboot", syscall(SYS_reboot, 0, 0, 0, nullptr));
    ReportErrno("swapon", syscall(SYS_swapon, "/nonexistent-mycel", 0));
    ReportErrno("swapoff", syscall(SYS_swapoff, "/nonexistent-mycel"));
    ReportErrno("syslog",
                syscall(SYS_syslog, 10 /* SIZE_BUFFER */, nullptr, 0));
    ReportErrno("acct", syscall(SYS_acct, "/nonexistent-mycel/acct"));
    ReportErrno("settimeofday", syscall(SYS_settimeofday, nullptr, nullptr));
    ReportErrno("clock_settime",
                syscall(SYS_clock_settime, CLOCK_MONOTONIC, &ts));
    ReportErrno("clock_adjtime",
                syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
    ReportErrno("adjtimex", syscall(SYS_adjtimex, &tx));
    ReportErrno("open_by_handle_at",
                syscall(SYS_open_by_handle_at, -1, nullptr, 0));
    ReportErrno("name_to_handle_at", syscall(SYS_name_to_handle_at, AT_FDCWD,
                                             "/", nullptr, nullptr, 0));
    ReportErrno("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC));
    ReportErrno("quotactl", syscall(SYS_quotactl, 0, nullptr, 0, nullptr));
    ReportErrno("lookup_dcookie", syscall(SYS_lookup_dcookie, 0, nullptr, 0));
    ReportErrno("iopl", syscall(SYS_iopl, 0));
    ReportErrno("ioperm", syscall(SYS_ioperm, 0, 0, 0));
    ReportErrno("io_uring_setup", syscall(SYS_io_uring_setup, 0, nullptr));
    ReportErrno("personality(ADDR_NO_RANDOMIZE)",
                syscall(SYS_personality, ADDR_NO_RANDOMIZE));
    ReportErrno("socket(AF_VSOCK)", socket(AF_VSOCK, SOCK_STREAM, 0));
    ReportErrno("socket(AF_ALG)", socket(AF_ALG, SOCK_SEQPACKET, 0));
    // Allowed neighbours, to show the filter is not denying everything.
    ReportErrno("chroot(/)", syscall(SYS_chroot, "/"));
    ReportErrno("socket(AF_UNIX)", socket(AF_UNIX, SOCK_STREAM, 0));
    ReportErrno("personality(query)", syscall(SYS_personality, 0xffffffffUL));
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  for (const char* name : {"setns",
                           "pivot_root",
                           "kexec_load",
                           "kexec_file_load",
                           "init_module",
                           "finit_module",
                           "delete_module",
                           "bpf",
                           "perf_event_open",
                           "ptrace",
                           "process_vm_readv",
                           "keyctl",
                           "add_key",
                           "request_key",
                           "reboot",
                           "swapon",
                           "swapoff",
                           "syslog",
                           "acct",
                           "settimeofday",
                           "clock_settime",
                           "clock_adjtime",
                           "adjtimex",
                           "open_by_handle_at",
                           "name_to_handle_at",
                           "userfaultfd",
                           "quotactl",
                           "lookup_dcookie",
                           "iopl",
                           "ioperm",
                           "io_uring_setup",
                           "personality(ADDR_NO_RANDOMIZE)",
                           "socket(AF_VSOCK)",
                           "socket(AF_ALG)"}) {
    CHECK_MESSAGE(report[name] == Errno(EPERM), std::string(name), " gave ",
                  report[name]);
  }
  CHECK(report["chroot(/)"] == "0");
  CHECK(report["socket(AF_UNIX)"] == "0");
  CHECK(report["personality(query)"] == "0");
}

TEST_CASE("default and strict: unknown and newer syscalls fail with ENOSYS") {
  int highest = seccomp_internal::HighestKnownSyscall(seccomp_arch_native());
  for (auto kind :
       {SeccompProfileKind::kDefault, SeccompProfileKind::kStrict}) {
    CAPTURE(SeccompProfileName(kind));
    SeccompProgram program = Compile(kind);
    ChildResult r = RunInChild([&] {
      if (!Apply(program)) return kApplyFailed;
      ReportErrno("1000", syscall(1000));
      ReportErrno("highest+1", syscall(highest + 1, 0, 0, 0, 0, 0));
      ReportErrno("clone3", syscall(SYS_clone3, nullptr, 0));
      return 0;
    });
    REQUIRE_MESSAGE(r.exit_code == 0, r.out);
    auto report = ParseReport(r.out);
    CHECK(report["1000"] == Errno(ENOSYS));
    CHECK(report["highest+1"] == Errno(ENOSYS));
    CHECK(report["clone3"] == Errno(ENOSYS));
  }
  // Without a filter the kernel checks clone3's arguments instead.
  ChildResult control = RunInChild([] {
    ReportErrno("clone3", syscall(SYS_clone3, nullptr, 0));
    return 0;
  });
  CHECK(ParseReport(control.out)["clone3"] == Errno(EINVAL));
}

TEST_CASE(
    "default: threads and fork work through the clone3 → clone fallback") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  ChildResult r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    pthread_t thread;
    int rc = pthread_create(&thread, nullptr, ThreadBody, nullptr);
    Report("pthread_create", rc);
    if (rc == 0) Report("pthread_join", pthread_join(thread, nullptr));
    pid_t pid = fork();
    if (pid == 0) _exit(7);
    int status = 0;
    waitpid(pid, &status, 0);
    Report("fork_exit",
           pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  CHECK(report["pthread_create"] == "0");
  CHECK(report["pthread_join"] == "0");
  CHECK(report["fork_exit"] == "7");
}

// x32 and i386 are x86_64's other ABIs; other architectures have neither.
#if defined(__x86_64__)
TEST_CASE("x32 syscall numbers cannot bypass the filter") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  ChildResult r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    ReportErrno("unshare", syscall(SYS_unshare | kX32Bit, CLONE_NEWUTS));
    ReportErrno("mount", syscall(SYS_mount | kX32Bit, "none", "/nonexistent",
                                 "tmpfs", 0, nullptr));
    long pid = syscall(SYS_getpid | kX32Bit);
    Report("getpid_errno", pid == -1 ? errno : 0);
    Report("getpid_ok", pid == getpid());
    ReportErrno("1000", syscall(1000 | kX32Bit));
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  // Denied syscalls: EPERM from the filter, as for the native ABI; on a
  // kernel without x32 the filter leaves the ABI out and answers ENOSYS.
  const bool x32 = seccomp_internal::KernelHasX32();
  CHECK(report["unshare"] == Errno(x32 ? EPERM : ENOSYS));
  CHECK(report["mount"] == Errno(x32 ? EPERM : ENOSYS));
  CHECK(report["1000"] == Errno(ENOSYS));
  // Allowed ones reach the kernel: ENOSYS without CONFIG_X86_X32_ABI.
  CHECK(
      (report["getpid_ok"] == "1" || report["getpid_errno"] == Errno(ENOSYS)));
}

// int 0x80 from a 64-bit process: the i386 ABI.
long Int80(long nr, long arg0) {
  long ret;
  __asm__ volatile("int $0x80"
                   : "=a"(ret)
                   : "a"(nr), "b"(arg0)
                   : "memory", "r8", "r9", "r10", "r11");
  return ret;
}

TEST_CASE("i386 syscalls (int 0x80) cannot bypass the filter") {
  int i386_getpid = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86, "getpid");
  int i386_unshare =
      seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86, "unshare");
  ChildResult probe =
      RunInChild([&] { return Int80(i386_getpid, 0) == getpid() ? 0 : 1; });
  if (probe.exit_code != 0) {
    // A kernel without IA32 emulation (or with it off) does not run int
    // 0x80 at all: the process gets SIGSEGV, so there is no i386 way past
    // the filter to try. The unit tests cover the i386 rules.
    CHECK(probe.signal == SIGSEGV);
    return;
  }
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  ChildResult r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    Report("unshare", -Int80(i386_unshare, CLONE_NEWUTS));
    Report("getpid_ok", Int80(i386_getpid, 0) == getpid());
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  CHECK(report["unshare"] == Errno(EPERM));
  CHECK(report["getpid_ok"] == "1");
}
#endif  // defined(__x86_64__)

TEST_CASE("strict: a dynamic binary runs; sockets and mkdir fail with EPERM") {
  SeccompProgram program = Compile(SeccompProfileKind::kStrict);
  testing::TempDir dir;

  ChildResult r = ExecUnder(program, {"/bin/true"});
  CHECK_MESSAGE(r.exit_code == 0, r.out);

  std::string file = dir.Sub("data");
  {
    int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "strict\n", 7) == 7);
    close(fd);
  }
  r = ExecUnder(program, {"/bin/cat", file.c_str()});
  CHECK_MESSAGE(r.exit_code == 0, r.out);
  CHECK(r.out == "strict\n");

  std::string sub = dir.Sub("sub");
  r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    ReportErrno("socket", socket(AF_UNIX, SOCK_STREAM, 0));
    ReportErrno("mkdir", mkdir(sub.c_str(), 0755));
    ReportErrno("fork", fork());
    ReportErrno("getpid", getpid());
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  CHECK(report["socket"] == Errno(EPERM));
  CHECK(report["mkdir"] == Errno(EPERM));
  CHECK(report["fork"] == Errno(EPERM));
  CHECK(report["getpid"] == "0");
  struct stat st;
  CHECK(stat(sub.c_str(), &st) != 0);

  r = ExecUnder(program, {"/bin/mkdir", sub.c_str()});
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(absl::StrContains(r.out, "Operation not permitted"), r.out);
}

std::string StatusField(const std::string& status, const std::string& key) {
  size_t at = status.find("\n" + key + ":");
  if (at == std::string::npos) return "";
  size_t start = status.find_first_not_of(" \t", at + key.size() + 2);
  size_t end = status.find('\n', start);
  return status.substr(start, end - start);
}

TEST_CASE("no_new_privs is set under every profile; none loads no filter") {
  for (const auto& want : {std::pair{SeccompProfileKind::kNone, "0"},
                           std::pair{SeccompProfileKind::kDefault, "2"},
                           std::pair{SeccompProfileKind::kStrict, "2"}}) {
    SeccompProfileKind kind = want.first;
    const char* seccomp_mode = want.second;
    CAPTURE(SeccompProfileName(kind));
    SeccompProgram program = Compile(kind);
    ChildResult r = ExecUnder(program, {"/bin/cat", "/proc/self/status"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.out);
    CHECK(StatusField(r.out, "NoNewPrivs") == "1");
    CHECK(StatusField(r.out, "Seccomp") == seccomp_mode);
  }
}

TEST_CASE("none: unshare works for root") {
  // The control: root may unshare here (see the requirement above).
  ChildResult control = RunInChild([] { return unshare(CLONE_NEWUTS); });
  REQUIRE(control.exit_code == 0);
  SeccompProgram program = Compile(SeccompProfileKind::kNone);
  ChildResult r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    ReportErrno("unshare", unshare(CLONE_NEWUTS));
    ReportErrno("setns", syscall(SYS_setns, -1, 0));
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  CHECK(report["unshare"] == "0");
  CHECK(report["setns"] == Errno(EBADF));  // the kernel's answer, not EPERM
}

TEST_CASE("extra_deny mkdir on none: mkdir fails with EPERM, the rest works") {
  SeccompProgram program = Compile(SeccompProfileKind::kNone, {"mkdir"});
  testing::TempDir dir;
  std::string a = dir.Sub("a"), b = dir.Sub("b"), c = dir.Sub("c");
  ChildResult r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    ReportErrno("mkdir", syscall(SYS_mkdir, a.c_str(), 0755));
    ReportErrno("mkdirat", mkdirat(AT_FDCWD, b.c_str(), 0755));
    ReportErrno("x32_mkdir", syscall(SYS_mkdir | kX32Bit, a.c_str(), 0755));
    ReportErrno("unshare", unshare(CLONE_NEWUTS));
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  CHECK(report["mkdir"] == Errno(EPERM));
  CHECK(report["mkdirat"] == "0");
  CHECK(report["x32_mkdir"] ==
        Errno(seccomp_internal::KernelHasX32() ? EPERM : ENOSYS));
  CHECK(report["unshare"] == "0");
  struct stat st;
  CHECK(stat(a.c_str(), &st) != 0);
  CHECK(stat(b.c_str(), &st) == 0);

  r = ExecUnder(program, {"/bin/mkdir", c.c_str()});
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(absl::StrContains(r.out, "Operation not permitted"), r.out);
  r = ExecUnder(program, {"/bin/sh", "-c", "echo ok"});
  CHECK(r.out == "ok\n");
}

// ---------------------------------------------------------------------------
// Cells without a pid namespace: protected pids.
// ---------------------------------------------------------------------------

// A process to protect, standing for myceld: it leads its own process group
// and sleeps until it is killed (and reaped) on destruction.
class Bystander {
 public:
  Bystander() {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      for (;;) pause();
    }
    // Both sides set the group, so it is set whoever runs first.
    if (pid_ > 0) setpgid(pid_, pid_);
  }
  ~Bystander() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  Bystander(const Bystander&) = delete;
  Bystander& operator=(const Bystander&) = delete;

  pid_t pid() const { return pid_; }

  // The state letter of /proc/<pid>/stat: 'S' sleeping, 'T' stopped, ...
  char State() const {
    absl::StatusOr<std::string> read =
        ReadFile(absl::StrCat("/proc/", pid_, "/stat"));
    if (!read.ok()) return '?';
    const std::string& stat = *read;
    size_t paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size()
               ? '?'
               : stat[paren + 2];
  }

  // Whether it is stopped, or stops within `ms` milliseconds.
  bool StopsWithin(int ms) const {
    for (int waited = 0; waited <= ms; waited += 10) {
      if (State() == 'T') return true;
      usleep(10 * 1000);
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
};

SeccompProgram Protecting(SeccompProfileKind kind, pid_t pid) {
  SeccompOptions options;
  options.profile = kind;
  options.protected_pids = {1, pid};
  options.deny_broadcast_signals = true;
  auto program = CompileSeccomp(options);
  REQUIRE_MESSAGE(program.ok(), program.status().ToString());
  return std::move(*program);
}

// In a child: the calls that touch `victim`, each reported by name.
void TouchProtected(pid_t victim) {
  ReportErrno("kill(1)", kill(1, 0));
  ReportErrno("kill(victim)", kill(victim, 0));
  ReportErrno("kill(-victim)", kill(-victim, 0));
  ReportErrno("kill(-1)", kill(-1, 0));
  ReportErrno("tkill", syscall(SYS_tkill, victim, 0));
  ReportErrno("tgkill", syscall(SYS_tgkill, victim, victim, 0));
  siginfo_t info = {};
  info.si_code = SI_QUEUE;
  info.si_pid = getpid();
  info.si_uid = getuid();
  ReportErrno("rt_sigqueueinfo",
              syscall(SYS_rt_sigqueueinfo, victim, 0, &info));
  long pidfd = syscall(SYS_pidfd_open, victim, 0);
  ReportErrno("pidfd_open", pidfd);
  if (pidfd >= 0) close(static_cast<int>(pidfd));
  // A /proc/<pid> directory is a pidfd too, for pidfd_send_signal.
  std::string proc = absl::StrCat("/proc/", victim);
  int dir = open(proc.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ReportErrno("pidfd_send_signal",
              syscall(SYS_pidfd_send_signal, dir, 0, nullptr, 0));
  if (dir >= 0) close(dir);
  struct rlimit old;
  ReportErrno("prlimit64",
              syscall(SYS_prlimit64, victim, RLIMIT_NOFILE, nullptr, &old));
  ReportErrno("setpriority(PRIO_PROCESS)",
              setpriority(PRIO_PROCESS, static_cast<id_t>(victim),
                          getpriority(PRIO_PROCESS, 0)));
  ReportErrno("setpriority(PRIO_PGRP)",
              setpriority(PRIO_PGRP, static_cast<id_t>(victim),
                          getpriority(PRIO_PROCESS, 0)));
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  bool have_cpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0;
  ReportErrno("sched_setaffinity",
              have_cpus ? sched_setaffinity(victim, sizeof(cpus), &cpus) : -2);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) == 0) {
    ReportErrno("F_SETOWN", fcntl(fds[0], F_SETOWN, victim));
    ReportErrno("F_SETOWN(-pgid)", fcntl(fds[0], F_SETOWN, -victim));
    struct f_owner_ex owner = {F_OWNER_PID, victim};
    ReportErrno("F_SETOWN_EX", fcntl(fds[0], F_SETOWN_EX, &owner));
    ReportErrno("F_SETOWN(self)", fcntl(fds[0], F_SETOWN, getpid()));
    close(fds[0]);
    close(fds[1]);
  }
  // What stays allowed: its own group, itself, the rest of the host.
  ReportErrno("kill(0)", kill(0, 0));
  ReportErrno("kill(self)", kill(getpid(), 0));
  ReportErrno("kill(parent)", kill(getppid(), 0));
  ReportErrno("setpriority(self)",
              setpriority(PRIO_PROCESS, 0, getpriority(PRIO_PROCESS, 0)));
}

TEST_CASE("protected pids: a cell cannot signal or change PID 1 or myceld") {
  Bystander victim;
  REQUIRE(victim.pid() > 0);
  pid_t pid = victim.pid();

  // Without the filter, root may do all of it.
  ChildResult control = RunInChild([&] {
    TouchProtected(pid);
    return 0;
  });
  REQUIRE_MESSAGE(control.exit_code == 0, control.out);
  auto free = ParseReport(control.out);
  for (const char* name :
       {"kill(1)", "kill(victim)", "kill(-victim)", "kill(-1)", "tkill",
        "tgkill", "rt_sigqueueinfo", "pidfd_open", "pidfd_send_signal",
        "prlimit64", "setpriority(PRIO_PROCESS)", "setpriority(PRIO_PGRP)",
        "sched_setaffinity", "F_SETOWN", "F_SETOWN(-pgid)", "F_SETOWN_EX"}) {
    CHECK_MESSAGE(free[name] == "0", "without a filter, ", std::string(name),
                  " gave ", free[name]);
  }

  SeccompProgram program = Protecting(SeccompProfileKind::kDefault, pid);
  ChildResult r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    TouchProtected(pid);
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  for (const char* name :
       {"kill(1)", "kill(victim)", "kill(-victim)", "kill(-1)", "tkill",
        "tgkill", "rt_sigqueueinfo", "pidfd_open", "prlimit64",
        "setpriority(PRIO_PROCESS)", "setpriority(PRIO_PGRP)",
        "sched_setaffinity", "F_SETOWN", "F_SETOWN(-pgid)", "F_SETOWN_EX"}) {
    CHECK_MESSAGE(report[name] == Errno(EPERM), std::string(name), " gave ",
                  report[name]);
  }
  CHECK(report["pidfd_send_signal"] == Errno(ENOSYS));
  for (const char* name : {"kill(0)", "kill(self)", "kill(parent)",
                           "setpriority(self)", "F_SETOWN(self)"}) {
    CHECK_MESSAGE(report[name] == "0", std::string(name), " gave ",
                  report[name]);
  }
}

// The attack itself: SIGSTOP by every route the filter guards. Without the
// filter each one stops the bystander (checked, then undone); with it, none.
TEST_CASE("protected pids: SIGSTOP reaches a protected process by no route") {
  Bystander victim;
  REQUIRE(victim.pid() > 0);
  pid_t pid = victim.pid();
  REQUIRE(victim.State() != 'T');

  // Each route, in a child: 0 if the call went through.
  using Route = std::function<long()>;
  auto sigio = [pid] {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -2L;
    long rc = fcntl(fds[0], F_SETOWN, pid);
    if (rc == 0) rc = fcntl(fds[0], F_SETSIG, SIGSTOP);
    if (rc == 0) rc = fcntl(fds[0], F_SETFL, O_ASYNC | O_NONBLOCK);
    if (rc == 0) rc = write(fds[1], "x", 1) == 1 ? 0 : -1;
    return rc;
  };
  std::vector<std::pair<std::string, Route>> routes = {
      {"kill", [pid] { return static_cast<long>(kill(pid, SIGSTOP)); }},
      {"kill(-pgid)", [pid] { return static_cast<long>(kill(-pid, SIGSTOP)); }},
      {"tgkill", [pid] { return syscall(SYS_tgkill, pid, pid, SIGSTOP); }},
      {"pidfd_send_signal(/proc)",
       [pid] {
         std::string proc = absl::StrCat("/proc/", pid);
         int dir = open(proc.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
         return syscall(SYS_pidfd_send_signal, dir, SIGSTOP, nullptr, 0);
       }},
      {"F_SETOWN + F_SETSIG", sigio},
  };
  SeccompProgram program = Protecting(SeccompProfileKind::kDefault, pid);
  for (const auto& entry : routes) {
    const std::string& name = entry.first;
    const Route& route = entry.second;
    CAPTURE(name);
    ChildResult free = RunInChild([&] { return route() == 0 ? 0 : 1; });
    CHECK_MESSAGE(free.exit_code == 0, free.out);
    CHECK(victim.StopsWithin(1000));
    kill(pid, SIGCONT);
    for (int i = 0; i < 100 && victim.State() == 'T'; ++i) usleep(10 * 1000);
    REQUIRE(victim.State() != 'T');

    ChildResult r = RunInChild([&] {
      if (!Apply(program)) return kApplyFailed;
      return route() == 0 ? 0 : 1;
    });
    CHECK_MESSAGE(r.exit_code == 1, r.out);
    CHECK_FALSE(victim.StopsWithin(200));
  }
}

TEST_CASE("protected pids under strict: prlimit64 on them fails") {
  Bystander victim;
  REQUIRE(victim.pid() > 0);
  pid_t pid = victim.pid();
  SeccompProgram program = Protecting(SeccompProfileKind::kStrict, pid);
  ChildResult r = RunInChild([&] {
    if (!Apply(program)) return kApplyFailed;
    struct rlimit zero = {0, 0}, old;
    ReportErrno("victim",
                syscall(SYS_prlimit64, pid, RLIMIT_NOFILE, &zero, nullptr));
    ReportErrno("self",
                syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, nullptr, &old));
    return 0;
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  auto report = ParseReport(r.out);
  CHECK(report["victim"] == Errno(EPERM));
  CHECK(report["self"] == "0");
  struct rlimit limit;
  REQUIRE(prlimit(pid, RLIMIT_NOFILE, nullptr, &limit) == 0);
  CHECK(limit.rlim_cur > 0);
}

TEST_CASE("protected pids: programs run; the shell cannot signal PID 1") {
  SeccompProgram program = Protecting(SeccompProfileKind::kDefault, getpid());
  ChildResult r = ExecUnder(
      program, {"/bin/sh", "-c", "kill -0 1; echo $?; kill -0 $$; echo $?"});
  CHECK(r.exit_code == 0);
  CHECK_MESSAGE(absl::StrContains(r.out, "kill: Operation not permitted"),
                r.out);
  CHECK_MESSAGE(absl::EndsWith(r.out, "\n1\n0\n"), r.out);
  r = ExecUnder(program, {"/bin/sh", "-c", "echo a | cat"});
  CHECK(r.out == "a\n");
}

// Not a timed test (nothing asserts a duration): what each executable pays
// to load the default filter, with and without protected pids. The two are
// loaded in alternation in fresh children, so that a busy machine weighs on
// both alike; medians of the seccomp(2) call alone.
TEST_CASE("load cost of the default profile, with and without protected pids") {
  SeccompProgram plain = Compile(SeccompProfileKind::kDefault);
  SeccompOptions options;
  options.protected_pids = {1, getpid(), getpid() + 1};
  options.deny_broadcast_signals = true;
  auto compiled = CompileSeccomp(options);
  REQUIRE(compiled.ok());
  SeccompProgram guarded = std::move(*compiled);
  auto load_us = [](const SeccompProgram& program) {
    ChildResult r = RunInChild([&] {
      if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
        return kSetupFailed;
      }
      struct timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      long rc =
          syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0UL, program.prog());
      clock_gettime(CLOCK_MONOTONIC, &b);
      if (rc != 0) return kApplyFailed;
      Report("ns",
             (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec));
      return 0;
    });
    REQUIRE_MESSAGE(r.exit_code == 0, r.out);
    return std::stod(ParseReport(r.out)["ns"]) / 1000;
  };
  constexpr int kRuns = 101;
  std::vector<double> a, b;
  for (int i = 0; i < kRuns; ++i) {
    a.push_back(load_us(plain));
    b.push_back(load_us(guarded));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  MESSAGE("seccomp(2) load, median of ", kRuns, ": default ", plain.size(),
          " instructions ", median(a),
          " us; with 3 protected pids (1, "
          "myceld and a helper) ",
          guarded.size(), " instructions ", median(b), " us");
}

TEST_CASE("a program the kernel rejects is reported as an errno") {
  // One instruction with an invalid opcode.
  SeccompProgram bad({sock_filter{0xffff, 0, 0, 0}});
  ChildResult r = RunInChild([&] { return ApplySeccompInChild(bad); });
  CHECK(r.exit_code == EINVAL);
}

}  // namespace
}  // namespace mycel
