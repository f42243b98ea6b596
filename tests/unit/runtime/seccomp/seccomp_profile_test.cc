// Unit tests for seccomp profiles: parsing, option checks, and the decisions
// of the compiled filters, found by running the BPF in an interpreter (no
// filter is loaded into this process).
#include "runtime/seccomp/seccomp_profile.h"

#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/sockios.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/seccomp/internal/filter_builder.h"
#include "runtime/seccomp/internal/syscall_tables.h"
#include "tests/unit/runtime/seccomp/bpf_interpreter.h"

namespace mycel {
namespace {

using testing::DescribeAction;
using testing::RunSeccompFilter;
using testing::SyscallData;

const std::string kAllow = "ALLOW";
const std::string kEperm = absl::StrCat("ERRNO(", EPERM, ")");
const std::string kEnosys = absl::StrCat("ERRNO(", ENOSYS, ")");

// The decision checks are written for x86_64, with its x32 and i386 ABIs;
// on another architecture they are not built.
#if defined(__x86_64__)
constexpr int kX32Bit = 0x40000000;

// x32 numbers on a kernel without x32: the filter leaves the ABI out and
// answers ENOSYS, as the kernel would; with x32 they meet the native rules.
std::string X32(const std::string& with_x32) {
  return seccomp_internal::KernelHasX32() ? with_x32 : kEnosys;
}
#endif  // defined(__x86_64__)

SeccompProgram Compile(SeccompProfileKind kind,
                       std::vector<std::string> extra_deny = {}) {
  auto program = CompileSeccomp({kind, std::move(extra_deny)});
  REQUIRE_MESSAGE(program.ok(), program.status().ToString());
  return std::move(*program);
}

// What `program` does with syscall `nr` of `audit_arch`.
std::string Decide(const SeccompProgram& program, uint32_t audit_arch, int nr,
                   std::initializer_list<uint64_t> args = {}) {
  auto ret = RunSeccompFilter(program.instructions(),
                              SyscallData(audit_arch, nr, args));
  if (!ret.ok()) return ret.status().ToString();
  return DescribeAction(*ret);
}

// The number of `name` on `scmp_arch`; fails the test if there is none.
int Nr(uint32_t scmp_arch, const char* name) {
  int nr = seccomp_syscall_resolve_name_arch(scmp_arch, name);
  REQUIRE_MESSAGE(nr >= 0, name, " has no number on arch ", scmp_arch);
  return nr;
}

int Native(const char* name) { return Nr(seccomp_arch_native(), name); }

TEST_CASE("profile names parse, and an unknown one is named in the error") {
  CHECK(*ParseSeccompProfile("default") == SeccompProfileKind::kDefault);
  CHECK(*ParseSeccompProfile("strict") == SeccompProfileKind::kStrict);
  CHECK(*ParseSeccompProfile("none") == SeccompProfileKind::kNone);
  for (auto kind : {SeccompProfileKind::kDefault, SeccompProfileKind::kStrict,
                    SeccompProfileKind::kNone}) {
    CHECK(*ParseSeccompProfile(SeccompProfileName(kind)) == kind);
  }
  auto bad = ParseSeccompProfile("Default");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.status().message() ==
        "seccomp: unknown profile \"Default\" (want default|strict|none)");
}

TEST_CASE("an unknown extra_deny syscall is rejected with the field name") {
  for (const std::string& name :
       {std::string("nosuchcall"), std::string(""), std::string("mkdir\0x", 7),
        std::string("MKDIR")}) {
    auto program = CompileSeccomp({SeccompProfileKind::kNone, {"read", name}});
    REQUIRE_FALSE(program.ok());
    CHECK(program.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(program.status().message() ==
          absl::StrCat("seccomp_deny: unknown syscall \"", name, "\""));
  }
}

TEST_CASE("profile none without extra rules has nothing to load") {
  SeccompProgram program = Compile(SeccompProfileKind::kNone);
  CHECK(program.empty());
  CHECK(program.size() == 0);
}

TEST_CASE("a program owns its instructions and survives moves") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  REQUIRE_FALSE(program.empty());
  CHECK(program.prog()->len == program.size());
  CHECK(program.prog()->filter == program.instructions().data());
  SeccompProgram moved(std::move(program));
  CHECK(program.empty());  // NOLINT(bugprone-use-after-move): by contract
  CHECK(moved.prog()->len == moved.size());
  CHECK(moved.prog()->filter == moved.instructions().data());
  SeccompProgram assigned;
  assigned = std::move(moved);
  CHECK(assigned.prog()->filter == assigned.instructions().data());
  CHECK(Decide(assigned, AUDIT_ARCH_X86_64, Native("mount")) == kEperm);
}

TEST_CASE("the profile tables are consistent") {
  namespace si = seccomp_internal;
  // Names newer than the libseccomp on Debian 12 (2.5.4): listed so that the
  // profiles pick them up with a newer libseccomp; until then they fall to
  // ENOSYS. Any other unresolvable name is a typo.
  const std::set<std::string> newer = {"mseal",
                                       "statmount",
                                       "listmount",
                                       "getxattrat",
                                       "setxattrat",
                                       "listxattrat",
                                       "removexattrat",
                                       "open_tree_attr",
                                       "lsm_get_self_attr",
                                       "lsm_set_self_attr",
                                       "lsm_list_modules"};
  std::vector<uint32_t> arches = si::FilterArches();
  for (const char* name : si::AllTableNames()) {
    bool resolves = false;
    for (uint32_t arch : arches) {
      resolves |= seccomp_syscall_resolve_name_arch(arch, name) >= 0;
    }
    CHECK_MESSAGE((resolves || newer.count(name) == 1), std::string(name));
  }
  for (auto kind :
       {SeccompProfileKind::kDefault, SeccompProfileKind::kStrict}) {
    const si::ProfileTable& table = si::ProfileTableFor(kind);
    std::set<std::string> seen;
    auto add = [&](const char* name) {
      CHECK_MESSAGE(seen.insert(name).second,
                    "listed twice: ", std::string(name));
    };
    for (const char* n : table.allow) add(n);
    for (const char* n : table.deny) add(n);
    for (const char* n : table.enosys) add(n);
    for (const auto& c : table.conditional) add(c.name);
  }
  // The brief's list of what default must deny.
  std::vector<std::string> denied =
      SeccompProfileDeniedSyscalls(SeccompProfileKind::kDefault);
  for (const char* name : {"mount",
                           "umount2",
                           "unshare",
                           "setns",
                           "pivot_root",
                           "kexec_load",
                           "kexec_file_load",
                           "init_module",
                           "finit_module",
                           "delete_module",
                           "bpf",
                           "perf_event_open",
                           "ptrace",
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
                           "io_uring_setup"}) {
    CHECK_MESSAGE(std::count(denied.begin(), denied.end(), name) == 1,
                  std::string(name));
  }
  std::vector<std::string> allowed =
      SeccompProfileSyscalls(SeccompProfileKind::kDefault);
  CHECK(std::count(allowed.begin(), allowed.end(), "read") == 1);
  CHECK(std::count(allowed.begin(), allowed.end(), "clone") == 1);
  CHECK(std::count(allowed.begin(), allowed.end(), "chroot") == 1);
  CHECK(std::count(allowed.begin(), allowed.end(), "mount") == 0);
  CHECK(SeccompProfileSyscalls(SeccompProfileKind::kNone).empty());
}

#if defined(__x86_64__)
TEST_CASE("default: every listed syscall gets its listed action") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  uint32_t native = seccomp_arch_native();
  uint32_t audit = AUDIT_ARCH_X86_64;
  const auto& table =
      seccomp_internal::ProfileTableFor(SeccompProfileKind::kDefault);
  for (const char* name : table.allow) {
    int nr = seccomp_syscall_resolve_name_arch(native, name);
    if (nr < 0) continue;  // another ABI's, or newer than libseccomp
    CHECK_MESSAGE(Decide(program, audit, nr) == kAllow, std::string(name));
  }
  for (const char* name : table.deny) {
    int nr = seccomp_syscall_resolve_name_arch(native, name);
    if (nr < 0) continue;
    CHECK_MESSAGE(Decide(program, audit, nr) == kEperm, std::string(name));
  }
  // Known to libseccomp, in the profile's range, listed nowhere: EPERM.
  CHECK(Decide(program, audit, Native("uselib")) == kEperm);
  CHECK(Decide(program, audit, Native("tuxcall")) == kEperm);
}

TEST_CASE("default: syscalls newer than the profile fail with ENOSYS") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  int highest = seccomp_internal::HighestKnownSyscall(SCMP_ARCH_X86_64);
  MESSAGE("highest known x86_64 syscall: ", highest);
  REQUIRE(highest >= Native("clone3"));
  CHECK(Decide(program, AUDIT_ARCH_X86_64, highest) != kEnosys);
  CHECK(Decide(program, AUDIT_ARCH_X86_64, highest + 1) == kEnosys);
  CHECK(Decide(program, AUDIT_ARCH_X86_64, 1000) == kEnosys);
  CHECK(Decide(program, AUDIT_ARCH_X86_64, -1) == kEnosys);
  // clone3 is known but answers ENOSYS, so that glibc falls back to clone.
  CHECK(Decide(program, AUDIT_ARCH_X86_64, Native("clone3")) == kEnosys);
}

TEST_CASE("default: clone may not create namespaces") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  int clone = Native("clone");
  // fork() and pthread_create's flags.
  CHECK(Decide(program, AUDIT_ARCH_X86_64, clone, {SIGCHLD}) == kAllow);
  uint64_t thread = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND |
                    CLONE_THREAD | CLONE_SYSVSEM | CLONE_SETTLS |
                    CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
  CHECK(Decide(program, AUDIT_ARCH_X86_64, clone, {thread}) == kAllow);
  for (uint64_t flag : {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
                        CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP}) {
    CHECK_MESSAGE(
        Decide(program, AUDIT_ARCH_X86_64, clone, {flag | SIGCHLD}) == kEperm,
        "flag 0x", absl::Hex(flag));
    // The same rule holds for the other ABIs.
    CHECK(Decide(program, AUDIT_ARCH_I386, Nr(SCMP_ARCH_X86, "clone"),
                 {flag | SIGCHLD}) == kEperm);
    CHECK(Decide(program, AUDIT_ARCH_X86_64, Nr(SCMP_ARCH_X32, "clone"),
                 {flag | SIGCHLD}) == X32(kEperm));
  }
  CHECK(Decide(program, AUDIT_ARCH_I386, Nr(SCMP_ARCH_X86, "clone"),
               {SIGCHLD}) == kAllow);
}

TEST_CASE("default: personality only with the default personas") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  int nr = Native("personality");
  for (uint64_t ok :
       {uint64_t{0}, uint64_t{PER_LINUX32}, uint64_t{UNAME26},
        uint64_t{PER_LINUX32 | 0x0020000}, uint64_t{0xffffffff}}) {
    CHECK_MESSAGE(Decide(program, AUDIT_ARCH_X86_64, nr, {ok}) == kAllow,
                  "persona 0x", absl::Hex(ok));
  }
  for (uint64_t bad : {uint64_t{ADDR_NO_RANDOMIZE}, uint64_t{READ_IMPLIES_EXEC},
                       uint64_t{PER_BSD}, uint64_t{1}, uint64_t{0xfffffffe},
                       uint64_t{0x100000000}}) {
    CHECK_MESSAGE(Decide(program, AUDIT_ARCH_X86_64, nr, {bad}) == kEperm,
                  "persona 0x", absl::Hex(bad));
  }
}

TEST_CASE("default: socket address families follow Docker") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  int nr = Native("socket");
  for (uint64_t ok : {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET}) {
    CHECK_MESSAGE(
        Decide(program, AUDIT_ARCH_X86_64, nr, {ok, SOCK_STREAM}) == kAllow,
        "family ", ok);
  }
  for (uint64_t bad : {uint64_t{AF_ALG}, uint64_t{AF_VSOCK}, uint64_t{AF_CAIF},
                       uint64_t{AF_MAX}, uint64_t{1000}}) {
    CHECK_MESSAGE(
        Decide(program, AUDIT_ARCH_X86_64, nr, {bad, SOCK_STREAM}) == kEperm,
        "family ", bad);
  }
}

TEST_CASE("default: x32 and i386 syscalls meet the same rules") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  // x32: AUDIT_ARCH_X86_64 with the x32 bit in the number.
  CHECK(Decide(program, AUDIT_ARCH_X86_64, Native("mount") | kX32Bit) ==
        X32(kEperm));
  CHECK(Decide(program, AUDIT_ARCH_X86_64, Native("unshare") | kX32Bit) ==
        X32(kEperm));
  CHECK(Decide(program, AUDIT_ARCH_X86_64, Native("getpid") | kX32Bit) ==
        X32(kAllow));
  CHECK(Decide(program, AUDIT_ARCH_X86_64, Nr(SCMP_ARCH_X32, "execve")) ==
        X32(kAllow));
  CHECK(Decide(program, AUDIT_ARCH_X86_64, 1000 | kX32Bit) == kEnosys);
  // i386, e.g. int 0x80 from a 64-bit process.
  CHECK(Decide(program, AUDIT_ARCH_I386, Nr(SCMP_ARCH_X86, "mount")) == kEperm);
  CHECK(Decide(program, AUDIT_ARCH_I386, Nr(SCMP_ARCH_X86, "unshare")) ==
        kEperm);
  CHECK(Decide(program, AUDIT_ARCH_I386, Nr(SCMP_ARCH_X86, "getpid")) ==
        kAllow);
  CHECK(Decide(program, AUDIT_ARCH_I386, Nr(SCMP_ARCH_X86, "socketcall")) ==
        kAllow);
  CHECK(Decide(program, AUDIT_ARCH_I386, 1000) == kEnosys);
  // Any other architecture ends the process (or, where the bad-arch action
  // answers x32 numbers, gets their ENOSYS).
  CHECK(Decide(program, AUDIT_ARCH_AARCH64, 0) == X32("KILL_PROCESS"));
}

TEST_CASE("strict: a small allow-list, EPERM for the rest, ENOSYS for newer") {
  SeccompProgram program = Compile(SeccompProfileKind::kStrict);
  for (const char* ok : {"read", "write", "openat", "close", "execve",
                         "exit_group", "mmap", "rt_sigaction", "newfstatat"}) {
    CHECK_MESSAGE(Decide(program, AUDIT_ARCH_X86_64, Native(ok)) == kAllow,
                  std::string(ok));
  }
  for (const char* bad : {"socket", "mkdir", "clone", "fork", "unlink", "kill",
                          "mount", "ptrace", "capset", "prctl"}) {
    CHECK_MESSAGE(Decide(program, AUDIT_ARCH_X86_64, Native(bad)) == kEperm,
                  std::string(bad));
  }
  int ioctl = Native("ioctl");
  CHECK(Decide(program, AUDIT_ARCH_X86_64, ioctl, {1, TCGETS}) == kAllow);
  CHECK(Decide(program, AUDIT_ARCH_X86_64, ioctl, {1, TIOCGWINSZ}) == kAllow);
  CHECK(Decide(program, AUDIT_ARCH_X86_64, ioctl, {1, TIOCSTI}) == kEperm);
  CHECK(Decide(program, AUDIT_ARCH_X86_64, Native("clone3")) == kEnosys);
  CHECK(Decide(program, AUDIT_ARCH_X86_64, 1000) == kEnosys);
  CHECK(Decide(program, AUDIT_ARCH_X86_64, Native("mkdir") | kX32Bit) ==
        X32(kEperm));
}

TEST_CASE("extra_deny adds EPERM rules on top of any profile") {
  SeccompProgram none = Compile(SeccompProfileKind::kNone, {"mkdir"});
  REQUIRE_FALSE(none.empty());
  CHECK(Decide(none, AUDIT_ARCH_X86_64, Native("mkdir")) == kEperm);
  CHECK(Decide(none, AUDIT_ARCH_X86_64, Native("mkdirat")) == kAllow);
  CHECK(Decide(none, AUDIT_ARCH_X86_64, Native("mount")) == kAllow);
  CHECK(Decide(none, AUDIT_ARCH_X86_64, 1000) == kAllow);
  CHECK(Decide(none, AUDIT_ARCH_X86_64, Native("mkdir") | kX32Bit) ==
        X32(kEperm));
  CHECK(Decide(none, AUDIT_ARCH_I386, Nr(SCMP_ARCH_X86, "mkdir")) == kEperm);

  // Over allowed and conditional syscalls of default.
  SeccompProgram def =
      Compile(SeccompProfileKind::kDefault, {"socket", "getpid", "clone3"});
  CHECK(Decide(def, AUDIT_ARCH_X86_64, Native("socket"), {AF_INET}) == kEperm);
  CHECK(Decide(def, AUDIT_ARCH_X86_64, Native("getpid")) == kEperm);
  CHECK(Decide(def, AUDIT_ARCH_X86_64, Native("clone3")) == kEperm);
  CHECK(Decide(def, AUDIT_ARCH_X86_64, Native("getppid")) == kAllow);

  // Over i386's socketcall, which default allows outright.
  SeccompProgram socketcall =
      Compile(SeccompProfileKind::kDefault, {"socketcall"});
  CHECK(Decide(socketcall, AUDIT_ARCH_I386, Nr(SCMP_ARCH_X86, "socketcall"),
               {1}) == kEperm);
  CHECK(Decide(socketcall, AUDIT_ARCH_X86_64, Native("socket"), {AF_INET}) ==
        kAllow);
}

#endif  // defined(__x86_64__)

TEST_CASE("compiles are cached by profile and set of names") {
  SeccompProgram a = Compile(SeccompProfileKind::kDefault, {"mkdir", "rmdir"});
  SeccompProgram b =
      Compile(SeccompProfileKind::kDefault, {"rmdir", "mkdir", "mkdir"});
  auto fresh = seccomp_internal::BuildSeccompFilter(
      {SeccompProfileKind::kDefault, {"mkdir", "rmdir"}});
  REQUIRE(fresh.ok());
  auto same = [](const std::vector<struct sock_filter>& x,
                 const std::vector<struct sock_filter>& y) {
    return x.size() == y.size() &&
           std::equal(x.begin(), x.end(), y.begin(),
                      [](const sock_filter& p, const sock_filter& q) {
                        return p.code == q.code && p.jt == q.jt &&
                               p.jf == q.jf && p.k == q.k;
                      });
  };
  CHECK(same(a.instructions(), b.instructions()));
  CHECK(same(a.instructions(), *fresh));
  CHECK(a.prog()->filter != b.prog()->filter);  // each owns a copy
  SeccompProgram other = Compile(SeccompProfileKind::kDefault, {"mkdir"});
  CHECK_FALSE(same(a.instructions(), other.instructions()));
}

TEST_CASE("a background precompile fills the cache and restores its nice") {
  // Options no other test compiles, so that the cache misses.
  const SeccompOptions options{SeccompProfileKind::kDefault,
                               {"acct", "swapon", "swapoff"}};
  int nice_seen = 0;
  absl::Status precompiled;
  std::thread t([&] {
    errno = 0;
    const int before = getpriority(PRIO_PROCESS, 0);
    precompiled = PrecompileSeccomp(options);
    nice_seen = getpriority(PRIO_PROCESS, 0) - before;
  });
  // A caller that needs the same program meanwhile gets it, and the same.
  auto now = CompileSeccomp(options);
  t.join();
  REQUIRE(precompiled.ok());
  REQUIRE(now.ok());
  CHECK(nice_seen == 0);  // the thread's priority is back where it was
  auto fresh = seccomp_internal::BuildSeccompFilter(options);
  REQUIRE(fresh.ok());
  auto again = CompileSeccomp(options);
  REQUIRE(again.ok());
  CHECK(again->instructions().size() == fresh->size());
  CHECK(now->instructions().size() == fresh->size());
  CHECK(std::memcmp(again->instructions().data(), fresh->data(),
                    fresh->size() * sizeof(sock_filter)) == 0);
  // Bad options are refused before any work, naming the field.
  absl::Status bad =
      PrecompileSeccomp({SeccompProfileKind::kDefault, {"no_such_call"}});
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.message()).find("seccomp_deny") != std::string::npos);
}

TEST_CASE("concurrent compiles of the same options agree") {
  constexpr int kThreads = 4;
  std::vector<std::vector<struct sock_filter>> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&results, i] {
      auto program = CompileSeccomp({SeccompProfileKind::kStrict, {"uname"}});
      if (program.ok()) results[i] = program->instructions();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    REQUIRE_FALSE(results[i].empty());
    CHECK(results[i].size() == results[0].size());
    CHECK(std::memcmp(results[i].data(), results[0].data(),
                      results[0].size() * sizeof(struct sock_filter)) == 0);
  }
}

// ---------------------------------------------------------------------------
// Cells without a pid namespace: protected pids and broadcast signals.
// ---------------------------------------------------------------------------

constexpr pid_t kDaemon = 4242;   // stands for myceld
constexpr pid_t kHelper = 70001;  // a third protected pid
constexpr pid_t kOther = 4243;    // a host process nobody protects

SeccompOptions Protecting(SeccompProfileKind kind) {
  SeccompOptions options;
  options.profile = kind;
  options.protected_pids = {1, kDaemon, kHelper};
  options.deny_broadcast_signals = true;
  return options;
}

SeccompProgram CompileOptions(const SeccompOptions& options) {
  auto program = CompileSeccomp(options);
  REQUIRE_MESSAGE(program.ok(), program.status().ToString());
  return std::move(*program);
}

#if defined(__x86_64__)
// ioprio_set's `which` (<linux/ioprio.h> is not C++).
constexpr uint64_t kIoprioWhoProcess = 1;
constexpr uint64_t kIoprioWhoPgrp = 2;
constexpr uint64_t kIoprioWhoUser = 3;

constexpr pid_t kProtected[] = {1, kDaemon, kHelper};

// A negative int as glibc passes it (sign-extended to 64 bits), and as a raw
// syscall or the 32-bit ABI may (the high half zero).
uint64_t Signed(int64_t v) { return static_cast<uint64_t>(v); }
uint64_t Low32(int64_t v) { return static_cast<uint32_t>(v); }

// One ABI of the filter: its audit arch, its numbers, and what to expect of
// a decision there (x32 may be left out of the filter: ENOSYS).
struct Abi {
  std::string name;
  uint32_t audit;
  uint32_t scmp;
  bool x32;
};

std::vector<Abi> Abis() {
  return {{"x86_64", AUDIT_ARCH_X86_64, SCMP_ARCH_X86_64, false},
          {"i386", AUDIT_ARCH_I386, SCMP_ARCH_X86, false},
          {"x32", AUDIT_ARCH_X86_64, SCMP_ARCH_X32, true}};
}

// What `program` does with `name` on `abi`, or "" if the ABI has no such
// syscall.
std::string On(const SeccompProgram& program, const Abi& abi, const char* name,
               std::initializer_list<uint64_t> args) {
  int nr = seccomp_syscall_resolve_name_arch(abi.scmp, name);
  if (nr < 0) return "";
  return Decide(program, abi.audit, nr, args);
}

std::string Want(const Abi& abi, const std::string& want) {
  return abi.x32 ? X32(want) : want;
}

TEST_CASE("protected pids: signals to them, their groups or everyone: EPERM") {
  SeccompProgram program =
      CompileOptions(Protecting(SeccompProfileKind::kDefault));
  for (const Abi& abi : Abis()) {
    CAPTURE(abi.name);
    auto check = [&](const char* name, std::initializer_list<uint64_t> args,
                     const std::string& want) {
      CHECK_MESSAGE(On(program, abi, name, args) == Want(abi, want), name,
                    " arg0 0x", absl::Hex(*args.begin()));
    };
    for (pid_t p : kProtected) {
      CAPTURE(p);
      check("kill", {Low32(p), SIGSTOP}, kEperm);
      check("kill", {Signed(-p), SIGSTOP}, kEperm);
      check("kill", {Low32(-p), SIGSTOP}, kEperm);
      // The kernel reads an int: whatever the high half holds.
      check("kill", {0xdeadbeef00000000u | Low32(p), SIGKILL}, kEperm);
      check("tkill", {Low32(p), SIGSTOP}, kEperm);
      check("tgkill", {Low32(p), Low32(p), SIGSTOP}, kEperm);
      check("tgkill", {Low32(kOther), Low32(p), SIGSTOP}, kEperm);
      check("rt_sigqueueinfo", {Low32(p), SIGUSR1, 0}, kEperm);
      check("rt_tgsigqueueinfo", {Low32(p), Low32(p), SIGUSR1, 0}, kEperm);
      check("rt_tgsigqueueinfo", {Low32(kOther), Low32(p), SIGUSR1, 0}, kEperm);
      check("pidfd_open", {Low32(p), 0}, kEperm);
    }
    check("kill", {Signed(-1), SIGKILL}, kEperm);
    check("kill", {Low32(-1), SIGKILL}, kEperm);
    check("rt_sigqueueinfo", {Signed(-1), SIGUSR1, 0}, kEperm);
    // Its own group, its own processes, and the rest of the host.
    for (int64_t ok : {int64_t{0}, int64_t{kOther}, int64_t{-kOther},
                       int64_t{kDaemon - 1}, int64_t{kDaemon + 1}, int64_t{2},
                       int64_t{-2}, int64_t{-kDaemon - 1}}) {
      CAPTURE(ok);
      check("kill", {Signed(ok), SIGTERM}, kAllow);
      check("tkill", {Signed(ok), SIGTERM}, kAllow);
      check("rt_sigqueueinfo", {Signed(ok), SIGUSR1, 0}, kAllow);
    }
    check("tgkill", {Low32(kOther), Low32(kOther), SIGTERM}, kAllow);
    check("rt_tgsigqueueinfo", {Low32(kOther), Low32(kOther), SIGUSR1, 0},
          kAllow);
    check("pidfd_open", {Low32(kOther), 0}, kAllow);
    // Its target hides behind a descriptor (a pidfd, or an open /proc/<pid>
    // directory): ENOSYS, so that programs fall back to kill.
    check("pidfd_send_signal", {3, SIGTERM, 0, 0}, kEnosys);
  }
}

TEST_CASE("protected pids: limits, priorities, schedulers, CPUs: EPERM") {
  SeccompProgram program =
      CompileOptions(Protecting(SeccompProfileKind::kDefault));
  for (const Abi& abi : Abis()) {
    CAPTURE(abi.name);
    auto check = [&](const char* name, std::initializer_list<uint64_t> args,
                     const std::string& want) {
      std::string got = On(program, abi, name, args);
      if (got.empty()) return;  // not on this ABI
      CHECK_MESSAGE(got == Want(abi, want), name);
    };
    for (pid_t p : kProtected) {
      CAPTURE(p);
      for (const char* name :
           {"prlimit64", "sched_setaffinity", "sched_setscheduler",
            "sched_setparam", "sched_setattr"}) {
        check(name, {Low32(p), 0, 0, 0}, kEperm);
      }
      check("setpriority", {PRIO_PROCESS, Low32(p), 19}, kEperm);
      check("setpriority", {PRIO_PGRP, Low32(p), 19}, kEperm);
      check("ioprio_set", {kIoprioWhoProcess, Low32(p), 0}, kEperm);
      check("ioprio_set", {kIoprioWhoPgrp, Low32(p), 0}, kEperm);
    }
    for (const char* name :
         {"prlimit64", "sched_setaffinity", "sched_setscheduler",
          "sched_setparam", "sched_setattr"}) {
      check(name, {0, 0, 0, 0}, kAllow);
      check(name, {Low32(kOther), 0, 0, 0}, kAllow);
    }
    check("setpriority", {PRIO_PROCESS, 0, 19}, kAllow);
    check("setpriority", {PRIO_PGRP, 0, 19}, kAllow);
    check("setpriority", {PRIO_PROCESS, Low32(kOther), 19}, kAllow);
    check("ioprio_set", {kIoprioWhoProcess, 0, 0}, kAllow);
    check("ioprio_set", {kIoprioWhoPgrp, Low32(kOther), 0}, kAllow);
    // Every process of a user, the protected ones among them when the cell
    // runs as their user.
    check("setpriority", {PRIO_USER, 0, 19}, kEperm);
    check("setpriority", {PRIO_USER, 1000, 19}, kEperm);
    check("ioprio_set", {kIoprioWhoUser, 0, 0}, kEperm);
    // Reading stays allowed.
    check("getpriority", {PRIO_PROCESS, 1}, kAllow);
    check("sched_getaffinity", {1, 0, 0}, kAllow);
    check("ioprio_get", {kIoprioWhoProcess, 1}, kAllow);
  }
}

TEST_CASE("protected pids: a descriptor's owner cannot be one of them") {
  SeccompProgram program =
      CompileOptions(Protecting(SeccompProfileKind::kDefault));
  for (const Abi& abi : Abis()) {
    CAPTURE(abi.name);
    auto check = [&](const char* name, std::initializer_list<uint64_t> args,
                     const std::string& want) {
      std::string got = On(program, abi, name, args);
      if (got.empty()) return;  // fcntl64 is i386's only
      CHECK_MESSAGE(got == Want(abi, want), name, " cmd 0x",
                    absl::Hex(*(args.begin() + 1)), " arg 0x",
                    absl::Hex(*(args.begin() + 2)));
    };
    for (const char* fcntl : {"fcntl", "fcntl64"}) {
      for (pid_t p : kProtected) {
        check(fcntl, {3, F_SETOWN, Low32(p)}, kEperm);
        check(fcntl, {3, F_SETOWN, Signed(-p)}, kEperm);
        check(fcntl, {3, F_SETOWN, Low32(-p)}, kEperm);
        // The same values under other commands are not pids.
        check(fcntl, {3, F_SETFD, Low32(p)}, kAllow);
        check(fcntl, {3, F_SETFL, Low32(p)}, kAllow);
        check(fcntl, {3, F_DUPFD_CLOEXEC, Low32(p)}, kAllow);
      }
      check(fcntl, {3, F_SETOWN, Low32(kOther)}, kAllow);
      check(fcntl, {3, F_SETOWN, Signed(-kOther)}, kAllow);
      check(fcntl, {3, F_SETOWN, 0}, kAllow);
      check(fcntl, {3, F_GETOWN, 0}, kAllow);
      check(fcntl, {3, F_GETOWN_EX, 0x1000}, kAllow);
      check(fcntl, {3, F_SETSIG, SIGSTOP}, kAllow);
      // The owner behind a pointer: never.
      check(fcntl, {3, F_SETOWN_EX, 0x1000}, kEperm);
    }
    check("ioctl", {3, FIOSETOWN, 0x1000}, kEperm);
    check("ioctl", {3, SIOCSPGRP, 0x1000}, kEperm);
    check("ioctl", {3, TCGETS, 0x1000}, kAllow);
    check("ioctl", {3, FIOASYNC, 0x1000}, kAllow);
    check("ioctl", {3, FIOGETOWN, 0x1000}, kAllow);
  }
}

TEST_CASE("protected pids: every other decision is the profile's") {
  namespace si = seccomp_internal;
  for (auto kind :
       {SeccompProfileKind::kDefault, SeccompProfileKind::kStrict}) {
    CAPTURE(SeccompProfileName(kind));
    SeccompProgram plain = Compile(kind);
    SeccompProgram guarded = CompileOptions(Protecting(kind));
    CHECK(guarded.size() > plain.size());
    for (const Abi& abi : Abis()) {
      CAPTURE(abi.name);
      std::set<int> changed;
      for (const si::TargetRule& rule : si::TargetRules()) {
        changed.insert(seccomp_syscall_resolve_name_arch(abi.scmp, rule.name));
      }
      int first = abi.x32 ? kX32Bit : 0;
      int last = std::max(si::HighestKnownSyscall(abi.scmp), first + 600);
      int pidfd_send_signal =
          seccomp_syscall_resolve_name_arch(abi.scmp, "pidfd_send_signal");
      for (int nr = first; nr <= last + 8; ++nr) {
        CAPTURE(nr);
        // With arguments of zeros (kill(0), setpriority(PRIO_PROCESS, 0):
        // the caller itself) only pidfd_send_signal changes.
        std::string want = Decide(plain, abi.audit, nr);
        if (nr == pidfd_send_signal && kind == SeccompProfileKind::kDefault) {
          want = Want(abi, kEnosys);
        }
        CHECK(Decide(guarded, abi.audit, nr) == want);
        if (changed.count(nr) != 0 || nr == pidfd_send_signal) continue;
        // Other syscalls do not look at the arguments for these rules.
        for (uint64_t v : {Low32(kDaemon), Signed(-kDaemon), Signed(-1),
                           uint64_t{F_SETOWN}, uint64_t{1}}) {
          CHECK(Decide(guarded, abi.audit, nr, {v, v, v, v, v, v}) ==
                Decide(plain, abi.audit, nr, {v, v, v, v, v, v}));
        }
      }
    }
  }
}

TEST_CASE("protected pids under strict: what it allows of them is guarded") {
  SeccompProgram program =
      CompileOptions(Protecting(SeccompProfileKind::kStrict));
  const Abi native = Abis()[0];
  CHECK(On(program, native, "prlimit64", {Low32(kDaemon), RLIMIT_NOFILE}) ==
        kEperm);
  CHECK(On(program, native, "prlimit64", {0, RLIMIT_NOFILE}) == kAllow);
  CHECK(On(program, native, "fcntl", {3, F_SETOWN, Low32(kDaemon)}) == kEperm);
  CHECK(On(program, native, "fcntl", {3, F_SETOWN_EX, 0x1000}) == kEperm);
  CHECK(On(program, native, "fcntl", {3, F_SETFD, 1}) == kAllow);
  // Denied anyway, with or without protected pids.
  CHECK(On(program, native, "kill", {0, SIGTERM}) == kEperm);
  CHECK(On(program, native, "ioctl", {3, FIOSETOWN, 0x1000}) == kEperm);
  CHECK(On(program, native, "ioctl", {3, TCGETS, 0x1000}) == kAllow);
  CHECK(On(program, native, "pidfd_send_signal", {3, SIGTERM}) == kEperm);
}

// Whatever a profile allows outright or for some arguments, each route of
// TargetRules() to a protected pid ends in a refusal, in default and strict.
TEST_CASE("protected pids: every route in the table is refused") {
  namespace si = seccomp_internal;
  using Kind = si::TargetCheck::Kind;
  for (auto kind :
       {SeccompProfileKind::kDefault, SeccompProfileKind::kStrict}) {
    CAPTURE(SeccompProfileName(kind));
    SeccompProgram program = CompileOptions(Protecting(kind));
    for (const Abi& abi : Abis()) {
      CAPTURE(abi.name);
      for (const si::TargetRule& rule : si::TargetRules()) {
        CAPTURE(rule.name);
        int nr = seccomp_syscall_resolve_name_arch(abi.scmp, rule.name);
        if (nr < 0) continue;
        uint64_t args[6] = {};
        for (const si::TargetCheck* c : {&rule.check, &rule.and_check}) {
          switch (c->kind) {
            case Kind::kNone:
              break;
            case Kind::kValue:
              args[c->arg] = c->value;
              break;
            case Kind::kProtectedPid:
              args[c->arg] = Low32(kDaemon);
              break;
            case Kind::kProtectedGroup:
              args[c->arg] = Signed(-kDaemon);
              break;
            case Kind::kBroadcast:
              args[c->arg] = Signed(-1);
              break;
          }
        }
        std::string got = Decide(program, abi.audit, nr,
                                 {args[0], args[1], args[2], args[3]});
        CHECK(got == Want(abi, kEperm));
      }
      for (const char* name : si::TargetEnosys()) {
        std::string got = On(program, abi, name, {3, SIGKILL});
        CHECK(got != kAllow);
      }
    }
  }
}

TEST_CASE("broadcast and protected pids are separate options") {
  const Abi native = Abis()[0];
  SeccompOptions broadcast;
  broadcast.deny_broadcast_signals = true;
  SeccompProgram b = CompileOptions(broadcast);
  CHECK(On(b, native, "kill", {Signed(-1), SIGKILL}) == kEperm);
  CHECK(On(b, native, "kill", {1, SIGTERM}) == kAllow);
  CHECK(On(b, native, "kill", {Signed(-kDaemon), SIGTERM}) == kAllow);
  // The routes the filter cannot inspect matter only to protected pids.
  CHECK(On(b, native, "pidfd_send_signal", {3, SIGKILL}) == kAllow);
  CHECK(On(b, native, "setpriority", {PRIO_USER, 0, 19}) == kAllow);
  CHECK(On(b, native, "fcntl", {3, F_SETOWN_EX, 0x1000}) == kAllow);

  SeccompOptions pids;
  pids.protected_pids = {kDaemon};
  SeccompProgram p = CompileOptions(pids);
  CHECK(On(p, native, "kill", {Signed(-1), SIGKILL}) == kAllow);
  CHECK(On(p, native, "kill", {Low32(kDaemon), SIGKILL}) == kEperm);
  CHECK(On(p, native, "kill", {1, SIGTERM}) == kAllow);
  CHECK(On(p, native, "pidfd_send_signal", {3, SIGKILL}) == kEnosys);
}

TEST_CASE("protected pids: extra_deny still wins") {
  SeccompOptions with_deny = Protecting(SeccompProfileKind::kNone);
  with_deny.extra_deny = {"mkdir"};
  SeccompProgram deny = CompileOptions(with_deny);
  const Abi native = Abis()[0];
  CHECK(On(deny, native, "mkdir", {0}) == kEperm);
  CHECK(On(deny, native, "kill", {1, SIGTERM}) == kAllow);
  CHECK(deny.size() == Compile(SeccompProfileKind::kNone, {"mkdir"}).size());
  // extra_deny over a guarded syscall denies it outright.
  SeccompOptions kill = Protecting(SeccompProfileKind::kDefault);
  kill.extra_deny = {"kill"};
  SeccompProgram k = CompileOptions(kill);
  CHECK(On(k, native, "kill", {0, SIGTERM}) == kEperm);
  CHECK(On(k, native, "tkill", {0, SIGTERM}) == kAllow);
}

#endif  // defined(__x86_64__)

TEST_CASE("protected pids: none stays no filter") {
  SeccompProgram none = CompileOptions(Protecting(SeccompProfileKind::kNone));
  CHECK(none.empty());
}

TEST_CASE("a protected pid must be a process id") {
  for (pid_t bad : {0, -1, -4242}) {
    SeccompOptions options;
    options.protected_pids = {1, bad};
    auto program = CompileSeccomp(options);
    REQUIRE_FALSE(program.ok());
    CHECK(program.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(program.status().message() ==
          absl::StrCat("seccomp: protected pid ", bad, " is not a process id"));
  }
}

TEST_CASE("the cache key holds the protected pids and the broadcast flag") {
  using seccomp_internal::CacheKey;
  SeccompOptions a = Protecting(SeccompProfileKind::kDefault);
  SeccompOptions same = a;
  same.protected_pids = {kHelper, kDaemon, 1, kDaemon};
  CHECK(CacheKey(a) == CacheKey(same));
  SeccompOptions other_pid = a;
  other_pid.protected_pids = {1, kOther, kHelper};
  CHECK(CacheKey(a) != CacheKey(other_pid));
  SeccompOptions fewer = a;
  fewer.protected_pids = {1, kDaemon};
  CHECK(CacheKey(a) != CacheKey(fewer));
  SeccompOptions no_broadcast = a;
  no_broadcast.deny_broadcast_signals = false;
  CHECK(CacheKey(a) != CacheKey(no_broadcast));
  CHECK(CacheKey(a) != CacheKey(SeccompOptions{}));
  SeccompOptions strict = Protecting(SeccompProfileKind::kStrict);
  CHECK(CacheKey(a) != CacheKey(strict));
  // none ignores them, so they do not split its entry.
  SeccompOptions none = Protecting(SeccompProfileKind::kNone);
  CHECK(CacheKey(none) == CacheKey({SeccompProfileKind::kNone, {}}));

  // And the programs: the same options, the same program; other pids, a
  // different one.
  SeccompProgram pa = CompileOptions(a);
  SeccompProgram psame = CompileOptions(same);
  SeccompProgram pother = CompileOptions(other_pid);
  CHECK(pa.size() == psame.size());
  CHECK(std::memcmp(pa.instructions().data(), psame.instructions().data(),
                    pa.size() * sizeof(struct sock_filter)) == 0);
  CHECK((pa.size() != pother.size() ||
         std::memcmp(pa.instructions().data(), pother.instructions().data(),
                     pa.size() * sizeof(struct sock_filter)) != 0));
}

// Not a timed test (nothing asserts a duration): it reports what a cell start
// pays for its filter, compiled from scratch and from the cache.
TEST_CASE("compile cost of the default profile") {
  using Clock = std::chrono::steady_clock;
  constexpr int kRuns = 5;
  auto start = Clock::now();
  size_t size = 0;
  for (int i = 0; i < kRuns; ++i) {
    auto built = seccomp_internal::BuildSeccompFilter({});
    REQUIRE(built.ok());
    size = built->size();
  }
  auto uncached = (Clock::now() - start) / kRuns;
  REQUIRE(CompileSeccomp({}).ok());  // warm the cache
  constexpr int kCachedRuns = 1000;
  start = Clock::now();
  for (int i = 0; i < kCachedRuns; ++i) REQUIRE(CompileSeccomp({}).ok());
  auto cached = (Clock::now() - start) / kCachedRuns;
  MESSAGE("default profile: ", size, " BPF instructions; compile ",
          std::chrono::duration<double, std::micro>(uncached).count(),
          " us from scratch, ",
          std::chrono::duration<double, std::micro>(cached).count(),
          " us from the cache");
  CHECK(size <= BPF_MAXINSNS);

  // A cell without a pid namespace: PID 1, the daemon and a helper.
  SeccompOptions guarded;
  guarded.protected_pids = {1, getpid(), getpid() + 1};
  guarded.deny_broadcast_signals = true;
  start = Clock::now();
  size_t guarded_size = 0;
  for (int i = 0; i < kRuns; ++i) {
    auto built = seccomp_internal::BuildSeccompFilter(guarded);
    REQUIRE(built.ok());
    guarded_size = built->size();
  }
  auto guarded_uncached = (Clock::now() - start) / kRuns;
  auto libseccomp = seccomp_internal::BuildLibseccompFilter(guarded);
  REQUIRE(libseccomp.ok());
  MESSAGE("default profile, 3 protected pids: ", guarded_size,
          " BPF instructions (libseccomp's: ", libseccomp->size(),
          "); compile ",
          std::chrono::duration<double, std::micro>(guarded_uncached).count(),
          " us from scratch");
  CHECK(guarded_size < libseccomp->size());  // the rewrite still applies
}

}  // namespace
}  // namespace mycel
