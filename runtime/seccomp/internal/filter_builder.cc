#include "runtime/seccomp/internal/filter_builder.h"

#include <errno.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/seccomp/internal/range_dispatch.h"
#include "runtime/seccomp/internal/syscall_tables.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel::seccomp_internal {
namespace {

// The x32 ABI shares AUDIT_ARCH_X86_64 and marks its syscall numbers with
// this bit (__X32_SYSCALL_BIT).
constexpr int kX32SyscallBit = 0x40000000;

struct FilterDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using FilterPtr = std::unique_ptr<void, FilterDeleter>;

// libseccomp returns -errno.
absl::Status LibseccompError(absl::string_view call, int rc) {
  return PosixError(call, -rc);
}

// What the filter does with one syscall.
struct Decision {
  enum class Kind { kAllow, kDeny, kEnosys, kConditional, kAllowUnless };
  Kind kind = Kind::kDeny;
  const ConditionalSyscall* conditional = nullptr;  // kConditional only
  // kAllowUnless only: EPERM when all comparisons of any one entry hold.
  std::vector<std::vector<scmp_arg_cmp>> deny_when;
};

// Every syscall name libseccomp knows, on any of the filter's arches, with a
// number no higher than that arch's HighestKnownSyscall.
std::set<std::string> KnownSyscallNames(const std::vector<uint32_t>& arches) {
  std::set<std::string> known;
  for (uint32_t arch : arches) {
    int first = arch == SCMP_ARCH_X32 ? kX32SyscallBit : 0;
    int last = HighestKnownSyscall(arch);
    for (int nr = first; nr <= last; ++nr) {
      char* name = seccomp_syscall_resolve_num_arch(arch, nr);
      if (name == nullptr) continue;  // a hole in the table
      known.insert(name);
      free(name);  // allocated by libseccomp with malloc
    }
  }
  return known;
}

// The values `check` stands for under `options` (none: the rule is off).
std::vector<uint32_t> CheckValues(const TargetCheck& check,
                                  const SeccompOptions& options) {
  std::vector<uint32_t> values;
  switch (check.kind) {
    case TargetCheck::Kind::kNone:
      break;
    case TargetCheck::Kind::kValue:
      values.push_back(check.value);
      break;
    case TargetCheck::Kind::kProtectedPid:
    case TargetCheck::Kind::kProtectedGroup:
      for (pid_t pid : options.protected_pids) {
        uint32_t v = static_cast<uint32_t>(pid);
        values.push_back(
            check.kind == TargetCheck::Kind::kProtectedPid ? v : 0 - v);
      }
      break;
    case TargetCheck::Kind::kBroadcast:
      if (options.deny_broadcast_signals) values.push_back(UINT32_MAX);
      break;
  }
  return values;
}

// The low 32 bits of args[arg] are `value`: the kernel reads a C int from
// the low half of the register, whatever the high half holds (glibc
// sign-extends, a raw syscall need not).
scmp_arg_cmp Low32Is(unsigned int arg, uint32_t value) {
  return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, 0xffffffffu, value};
}

// Turns the syscalls that TargetRules() names, and that `decisions` allows
// outright, into kAllowUnless with the rules' comparisons for `options`; and
// those of TargetEnosys() into kEnosys, when there are protected pids.
void DecideTargets(const SeccompOptions& options,
                   std::map<std::string, Decision>* decisions) {
  const bool protect = !options.protected_pids.empty();
  if (!protect && !options.deny_broadcast_signals) return;
  std::map<std::string, std::set<std::vector<std::pair<unsigned, uint32_t>>>>
      deny;
  for (const TargetRule& rule : TargetRules()) {
    auto it = decisions->find(rule.name);
    if (it == decisions->end() || it->second.kind != Decision::Kind::kAllow) {
      continue;
    }
    // A rule that names no pid (a route the filter cannot inspect) guards
    // the protected pids; without any it is off.
    bool names_pid = false;
    for (const TargetCheck* c : {&rule.check, &rule.and_check}) {
      names_pid |= c->kind != TargetCheck::Kind::kValue &&
                   c->kind != TargetCheck::Kind::kNone;
    }
    if (!names_pid && !protect) continue;
    std::vector<uint32_t> firsts = CheckValues(rule.check, options);
    std::vector<uint32_t> seconds = CheckValues(rule.and_check, options);
    for (uint32_t first : firsts) {
      if (rule.and_check.kind == TargetCheck::Kind::kNone) {
        deny[rule.name].insert({{rule.check.arg, first}});
        continue;
      }
      for (uint32_t second : seconds) {
        deny[rule.name].insert(
            {{rule.check.arg, first}, {rule.and_check.arg, second}});
      }
    }
  }
  for (const auto& [name, conjunctions] : deny) {
    Decision& d = (*decisions)[name];
    d.kind = Decision::Kind::kAllowUnless;
    for (const auto& conjunction : conjunctions) {
      std::vector<scmp_arg_cmp> cmps;
      for (const auto& [arg, value] : conjunction) {
        cmps.push_back(Low32Is(arg, value));
      }
      d.deny_when.push_back(std::move(cmps));
    }
  }
  if (!protect) return;
  for (const char* name : TargetEnosys()) {
    auto it = decisions->find(name);
    if (it != decisions->end() && it->second.kind == Decision::Kind::kAllow) {
      it->second = {Decision::Kind::kEnosys};
    }
  }
}

// The decision for every syscall that the filter names, for `options`.
std::map<std::string, Decision> Decide(const SeccompOptions& options,
                                       const std::vector<uint32_t>& arches) {
  std::map<std::string, Decision> decisions;
  if (options.profile != SeccompProfileKind::kNone) {
    // Known but not listed: EPERM, so that only syscalls newer than the
    // profile get the default action (ENOSYS).
    for (const std::string& name : KnownSyscallNames(arches)) {
      decisions[name] = {Decision::Kind::kDeny};
    }
    const ProfileTable& table = ProfileTableFor(options.profile);
    for (const char* name : table.deny) {
      decisions[name] = {Decision::Kind::kDeny};
    }
    for (const char* name : table.allow) {
      decisions[name] = {Decision::Kind::kAllow};
    }
    for (const ConditionalSyscall& c : table.conditional) {
      decisions[c.name] = {Decision::Kind::kConditional, &c};
    }
    for (const char* name : table.enosys) {
      decisions[name] = {Decision::Kind::kEnosys};
    }
  }
  if (options.profile != SeccompProfileKind::kNone) {
    DecideTargets(options, &decisions);
  }
  for (const std::string& name : options.extra_deny) {
    decisions[name] = {Decision::Kind::kDeny};
  }
  return decisions;
}

absl::Status AddRule(void* ctx, const std::string& name, int nr,
                     uint32_t action, const std::vector<scmp_arg_cmp>& args) {
  int rc = seccomp_rule_add_array(ctx, action, nr,
                                  static_cast<unsigned int>(args.size()),
                                  args.empty() ? nullptr : args.data());
  if (rc < 0) {
    return LibseccompError(absl::StrCat("seccomp_rule_add(", name, ")"), rc);
  }
  return absl::OkStatus();
}

// Allows `c` for the argument values it lists and denies every other call
// with EPERM. libseccomp lets an unconditional rule override all conditional
// ones of the same syscall, so the "otherwise EPERM" is itself conditional:
// args[arg] >= 0 is always true, and libseccomp tests it after the more
// specific comparisons (equality and masks), which the unit tests check by
// running the filter.
absl::Status AddConditional(void* ctx, const ConditionalSyscall& c, int nr) {
  for (uint64_t value : c.values) {
    scmp_arg_cmp cmp = c.match == ConditionalSyscall::Match::kAnyOf
                           ? scmp_arg_cmp{c.arg, SCMP_CMP_EQ, value, 0}
                           : scmp_arg_cmp{c.arg, SCMP_CMP_MASKED_EQ, value, 0};
    RETURN_IF_ERROR(AddRule(ctx, c.name, nr, SCMP_ACT_ALLOW, {cmp}));
  }
  return AddRule(ctx, c.name, nr, SCMP_ACT_ERRNO(EPERM),
                 {scmp_arg_cmp{c.arg, SCMP_CMP_GE, 0, 0}});
}

// Allows `name` except where one of `deny_when`'s conjunctions holds: EPERM
// rules for those, and a catch-all allow that is itself conditional (see
// AddConditional), args[0] >= 0. libseccomp tests the arguments of a
// syscall from the highest down and, on one argument, equality and masks
// before >=, so the catch-all on argument 0 comes last whatever the rules
// look at; the unit tests check it by running the filter.
absl::Status AddAllowUnless(void* ctx, const std::string& name, int nr,
                            const Decision& decision) {
  for (const std::vector<scmp_arg_cmp>& cmps : decision.deny_when) {
    RETURN_IF_ERROR(AddRule(ctx, name, nr, SCMP_ACT_ERRNO(EPERM), cmps));
  }
  return AddRule(ctx, name, nr, SCMP_ACT_ALLOW,
                 {scmp_arg_cmp{0, SCMP_CMP_GE, 0, 0}});
}

// The rules that carry out `decision` for syscall `name` (number `nr`).
absl::Status AddRules(void* ctx, const std::string& name, int nr,
                      const Decision& decision, uint32_t default_action) {
  switch (decision.kind) {
    case Decision::Kind::kAllow:
      if (default_action == SCMP_ACT_ALLOW) return absl::OkStatus();
      return AddRule(ctx, name, nr, SCMP_ACT_ALLOW, {});
    case Decision::Kind::kDeny:
      return AddRule(ctx, name, nr, SCMP_ACT_ERRNO(EPERM), {});
    case Decision::Kind::kEnosys:
      // libseccomp refuses a rule whose action is the default action.
      if (default_action == SCMP_ACT_ERRNO(ENOSYS)) return absl::OkStatus();
      return AddRule(ctx, name, nr, SCMP_ACT_ERRNO(ENOSYS), {});
    case Decision::Kind::kConditional:
      return AddConditional(ctx, *decision.conditional, nr);
    case Decision::Kind::kAllowUnless:
      return AddAllowUnless(ctx, name, nr, decision);
  }
  return absl::OkStatus();
}

// seccomp_export_bpf writes to a descriptor; a memfd keeps it in memory.
absl::StatusOr<std::vector<struct sock_filter>> Export(void* ctx) {
  UniqueFd fd(memfd_create("mycel-seccomp", MFD_CLOEXEC));
  if (!fd) return PosixError("memfd_create(mycel-seccomp)", errno);
  int rc = seccomp_export_bpf(ctx, fd.get());
  if (rc < 0) return LibseccompError("seccomp_export_bpf", rc);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return PosixError("fstat(mycel-seccomp memfd)", errno);
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes == 0 || bytes % sizeof(struct sock_filter) != 0) {
    return absl::InternalError(
        absl::StrCat("seccomp_export_bpf: ", bytes,
                     " bytes is not a whole number of BPF instructions"));
  }
  std::vector<struct sock_filter> program(bytes / sizeof(struct sock_filter));
  if (program.size() > BPF_MAXINSNS) {
    return absl::InternalError(
        absl::StrCat("seccomp filter has ", program.size(),
                     " instructions; the kernel takes at most ", BPF_MAXINSNS));
  }
  auto* out = reinterpret_cast<char*>(program.data());
  size_t done = 0;
  while (done < bytes) {
    ssize_t n =
        pread(fd.get(), out + done, bytes - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError("read(mycel-seccomp memfd)", errno);
    }
    if (n == 0) {
      return absl::InternalError("seccomp_export_bpf: short memfd");
    }
    done += static_cast<size_t>(n);
  }
  return program;
}

}  // namespace

std::string CacheKey(const SeccompOptions& options) {
  std::vector<std::string> names = options.extra_deny;
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string key = absl::StrCat(SeccompProfileName(options.profile), ":",
                                 absl::StrJoin(names, ","));
  if (options.profile == SeccompProfileKind::kNone) return key;
  std::vector<pid_t> pids = options.protected_pids;
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  absl::StrAppend(&key, ":pids=", absl::StrJoin(pids, ","),
                  options.deny_broadcast_signals ? ":no-broadcast" : "");
  return key;
}

bool KernelHasX32() {
#if defined(__x86_64__)
  static const bool has_x32 = [] {
    // "Seccomp:\t0": no filter on us, so the probe cannot be killed.
    absl::StatusOr<std::string> status = ReadFile("/proc/self/status");
    if (!status.ok() || !absl::StrContains(*status, "\nSeccomp:\t0\n")) {
      return true;
    }
    return syscall(kX32SyscallBit | SYS_getpid) == getpid();
  }();
  return has_x32;
#else
  return false;
#endif
}

std::vector<uint32_t> FilterArches() {
  uint32_t native = seccomp_arch_native();
  std::vector<uint32_t> arches = {native};
  if (native == SCMP_ARCH_X86_64) {
    arches.push_back(SCMP_ARCH_X86);
    // Without x32 in the kernel its numbers never reach a syscall; left out
    // of the filter they meet the bad-arch action instead (ENOSYS, see
    // BuildSeccompFilter), which leaves a third fewer instructions to load
    // for every executable.
    if (KernelHasX32()) arches.push_back(SCMP_ARCH_X32);
  } else if (native == SCMP_ARCH_AARCH64) {
    arches.push_back(SCMP_ARCH_ARM);
  }
  return arches;
}

int HighestKnownSyscall(uint32_t arch) {
  int highest = -1;
  for (const char* name : AllTableNames()) {
    int nr = seccomp_syscall_resolve_name_arch(arch, name);
    // Negative: not on this arch (a pseudo-syscall number) or unknown.
    if (nr >= 0) highest = std::max(highest, nr);
  }
  return highest;
}

absl::StatusOr<std::vector<struct sock_filter>> BuildSeccompFilter(
    const SeccompOptions& options) {
  ASSIGN_OR_RETURN(std::vector<struct sock_filter> program,
                   BuildLibseccompFilter(options));
  if (program.empty()) return program;
  // The same decisions in fewer instructions, proven equal, or else
  // libseccomp's program as it is.
  absl::StatusOr<std::vector<struct sock_filter>> smaller =
      CompressDispatch(program);
  if (!smaller.ok()) {
    log::Debug("seccomp program kept as libseccomp made it",
               {{"instructions", static_cast<int64_t>(program.size())},
                {"why", smaller.status()}});
    return program;
  }
  return *std::move(smaller);
}

absl::StatusOr<std::vector<struct sock_filter>> BuildLibseccompFilter(
    const SeccompOptions& options) {
  if (options.profile == SeccompProfileKind::kNone &&
      options.extra_deny.empty()) {
    return std::vector<struct sock_filter>();
  }
  // A syscall that no rule names: ENOSYS under a profile (it is newer than
  // the profile, see Decide), allowed under none.
  uint32_t default_action = options.profile == SeccompProfileKind::kNone
                                ? SCMP_ACT_ALLOW
                                : SCMP_ACT_ERRNO(ENOSYS);
  FilterPtr ctx(seccomp_init(default_action));
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");

  std::vector<uint32_t> arches = FilterArches();
  for (size_t i = 1; i < arches.size(); ++i) {
    int rc = seccomp_arch_add(ctx.get(), arches[i]);
    if (rc < 0 && rc != -EEXIST) {
      return LibseccompError(absl::StrCat("seccomp_arch_add(", arches[i], ")"),
                             rc);
    }
  }
  // An architecture the filter does not cover cannot occur on these kernels
  // except through a bug or an attack: end the process rather than let the
  // call through or guess an errno. The exception is x32 on a kernel built
  // without it, which answers ENOSYS to those numbers itself: so does the
  // filter (a program may probe for x32 that way).
  const bool x32_left_out =
      arches[0] == SCMP_ARCH_X86_64 &&
      std::find(arches.begin(), arches.end(), SCMP_ARCH_X32) == arches.end();
  int rc = seccomp_attr_set(
      ctx.get(), SCMP_FLTATR_ACT_BADARCH,
      x32_left_out ? SCMP_ACT_ERRNO(ENOSYS) : SCMP_ACT_KILL_PROCESS);
  if (rc < 0) return LibseccompError("seccomp_attr_set(ACT_BADARCH)", rc);
  // libseccomp's binary tree layout (SCMP_FLTATR_CTL_OPTIMIZE=2), not its
  // default linear one. Loading the program costs every executable: at
  // seccomp(2) the kernel evaluates the filter once for every syscall number
  // of every arch to build its "always allowed" cache (Linux 5.11+), which
  // is quadratic for a linear list of ~400 rules and logarithmic for a tree.
  // The export is slower (the program is compiled once per profile and
  // cached, see seccomp_profile.cc).
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2);
  if (rc < 0) return LibseccompError("seccomp_attr_set(CTL_OPTIMIZE)", rc);

  // Unconditional rules first. On x86 libseccomp turns socket(2) rules into
  // socketcall(SYS_SOCKET, ...) rules without the argument checks (they sit
  // behind a pointer there), so socket's catch-all EPERM would clash with its
  // own allow rules on socketcall; an unconditional socketcall rule added
  // before them takes precedence and absorbs them instead.
  std::map<std::string, Decision> decisions = Decide(options, arches);
  for (bool conditional : {false, true}) {
    for (const auto& [name, decision] : decisions) {
      const bool has_args = decision.kind == Decision::Kind::kConditional ||
                            decision.kind == Decision::Kind::kAllowUnless;
      if (has_args != conditional) continue;
      int nr = seccomp_syscall_resolve_name(name.c_str());
      // Only table names get here unresolved (CompileSeccomp validates
      // extra_deny): syscalls newer than this libseccomp, left to the
      // default action.
      if (nr == __NR_SCMP_ERROR) continue;
      RETURN_IF_ERROR(AddRules(ctx.get(), name, nr, decision, default_action));
    }
  }
  return Export(ctx.get());
}

}  // namespace mycel::seccomp_internal
