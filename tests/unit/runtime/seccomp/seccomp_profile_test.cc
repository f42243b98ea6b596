// Unit tests for seccomp profiles: parsing, option checks, and the decisions
// of the compiled filters, found by running the BPF in an interpreter (no
// filter is loaded into this process).
#include "runtime/seccomp/seccomp_profile.h"

#include <doctest/doctest.h>
#include <errno.h>
#include <linux/audit.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/socket.h>

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

constexpr int kX32Bit = 0x40000000;
const std::string kAllow = "ALLOW";
const std::string kEperm = absl::StrCat("ERRNO(", EPERM, ")");
const std::string kEnosys = absl::StrCat("ERRNO(", ENOSYS, ")");

// x32 numbers on a kernel without x32: the filter leaves the ABI out and
// answers ENOSYS, as the kernel would; with x32 they meet the native rules.
std::string X32(const std::string& with_x32) {
  return seccomp_internal::KernelHasX32() ? with_x32 : kEnosys;
}

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

bool IsX86_64() { return seccomp_arch_native() == SCMP_ARCH_X86_64; }

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

TEST_CASE("default: every listed syscall gets its listed action") {
  SeccompProgram program = Compile(SeccompProfileKind::kDefault);
  uint32_t native = seccomp_arch_native();
  uint32_t audit = IsX86_64() ? AUDIT_ARCH_X86_64 : 0;
  if (audit == 0) {
    MESSAGE("decision checks are written for x86_64; skipped");
    return;
  }
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
  if (!IsX86_64()) return;
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
  if (!IsX86_64()) return;
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
  if (!IsX86_64()) return;
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
  if (!IsX86_64()) return;
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
  if (!IsX86_64()) return;
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
  if (!IsX86_64()) return;
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
  if (!IsX86_64()) return;
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
}

}  // namespace
}  // namespace mycel
