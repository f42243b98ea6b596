#include "runtime/seccomp/seccomp_profile.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/seccomp/internal/filter_builder.h"
#include "runtime/seccomp/internal/syscall_tables.h"
#include "runtime/status.h"

namespace mycel {
namespace {

// Compiled programs by options (seccomp_internal::CacheKey). A cell start
// compiles its profile every time; the set of distinct options on a node is
// small (three profiles times the extra_deny lists of its workloads, times
// two for cells with and without a pid namespace: the protected pids, PID 1
// and the daemon's, do not change while the daemon lives), so entries are never
// evicted, but the cache stops growing at kMaxEntries so that a stream of
// unusual lists cannot grow it without bound (those are compiled each time).
class ProgramCache final {
 public:
  static constexpr size_t kMaxEntries = 64;

  // The cached program for `key`, or what `build` returns (cached if OK).
  // Builds are serialised: libseccomp keeps some process-wide state, and
  // cells that start together with the same options then compile once, not
  // once each.
  absl::StatusOr<std::vector<struct sock_filter>> GetOrBuild(
      const std::string& key,
      absl::FunctionRef<absl::StatusOr<std::vector<struct sock_filter>>()>
          build) ABSL_LOCKS_EXCLUDED(build_mu_, mu_) {
    if (auto hit = Lookup(key)) return *std::move(hit);
    // A background compile (PrecompileSeccomp) may hold the build lock at
    // the lowest priority; whoever waits for it gives it back the priority
    // it had, so that a busy machine cannot starve this caller through it.
    waiters_.fetch_add(1);
    if (const pid_t bg = background_builder_.load(); bg != 0) {
      setpriority(PRIO_PROCESS, static_cast<id_t>(bg), background_nice_.load());
    }
    absl::MutexLock build_lock(&build_mu_);
    waiters_.fetch_sub(1);
    return GetOrBuildLocked(key, build);
  }

  // Background builds run at normal priority from now on (the one in
  // progress raised, as a waiter would).
  void Hurry() {
    hurry_.store(true);
    if (const pid_t bg = background_builder_.load(); bg != 0) {
      setpriority(PRIO_PROCESS, static_cast<id_t>(bg), background_nice_.load());
    }
  }

  // GetOrBuild on a thread that runs at the lowest priority (nice 19)
  // unless another caller waits for its build.
  absl::Status BuildInBackground(
      const std::string& key,
      absl::FunctionRef<absl::StatusOr<std::vector<struct sock_filter>>()>
          build) ABSL_LOCKS_EXCLUDED(build_mu_, mu_) {
    const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
    errno = 0;
    int before = getpriority(PRIO_PROCESS, tid);
    if (errno != 0) before = 0;
    // Announce, lower, then look for waiters: a caller that starts waiting
    // after the look finds this thread announced and raises it (GetOrBuild),
    // so no waiter is ever left behind a thread at nice 19.
    background_nice_.store(before);
    background_builder_.store(static_cast<pid_t>(tid));
    setpriority(PRIO_PROCESS, tid, 19);
    if (waiters_.load() > 0 || hurry_.load()) {
      setpriority(PRIO_PROCESS, tid, before);
    }
    absl::Status s;
    {
      absl::MutexLock build_lock(&build_mu_);
      s = GetOrBuildLocked(key, build).status();
    }
    background_builder_.store(0);
    setpriority(PRIO_PROCESS, tid, before);
    return s;
  }

 private:
  std::optional<std::vector<struct sock_filter>> Lookup(const std::string& key)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  absl::StatusOr<std::vector<struct sock_filter>> GetOrBuildLocked(
      const std::string& key,
      absl::FunctionRef<absl::StatusOr<std::vector<struct sock_filter>>()>
          build) ABSL_EXCLUSIVE_LOCKS_REQUIRED(build_mu_)
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (auto hit = Lookup(key)) return *std::move(hit);
    absl::StatusOr<std::vector<struct sock_filter>> built = build();
    if (built.ok()) {
      absl::MutexLock lock(&mu_);
      if (entries_.size() < kMaxEntries) entries_.emplace(key, *built);
    }
    return built;
  }

  // The thread id of a PrecompileSeccomp call in progress, or 0, and the
  // nice value it had before; how many GetOrBuild calls wait for the build
  // lock.
  std::atomic<pid_t> background_builder_{0};
  std::atomic<int> background_nice_{0};
  std::atomic<int> waiters_{0};
  std::atomic<bool> hurry_{false};

  // Held while compiling; never while holding mu_.
  absl::Mutex build_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  std::map<std::string, std::vector<struct sock_filter>> entries_
      ABSL_GUARDED_BY(mu_);
};

ProgramCache& Cache() {
  static ProgramCache cache;
  return cache;
}

absl::Status ValidateExtraDeny(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    // A NUL would cut the name short for libseccomp ("mkdir\0x" → mkdir).
    if (name.find('\0') != std::string::npos ||
        seccomp_syscall_resolve_name(name.c_str()) == __NR_SCMP_ERROR) {
      return absl::InvalidArgumentError(
          absl::StrCat("seccomp_deny: unknown syscall \"", name, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateProtectedPids(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    if (pid <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("seccomp: protected pid ", pid, " is not a process id"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> SortedUnique(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace

absl::StatusOr<SeccompProfileKind> ParseSeccompProfile(absl::string_view name) {
  if (name == "default") return SeccompProfileKind::kDefault;
  if (name == "strict") return SeccompProfileKind::kStrict;
  if (name == "none") return SeccompProfileKind::kNone;
  return absl::InvalidArgumentError(absl::StrCat(
      "seccomp: unknown profile \"", name, "\" (want default|strict|none)"));
}

absl::string_view SeccompProfileName(SeccompProfileKind kind) {
  switch (kind) {
    case SeccompProfileKind::kDefault:
      return "default";
    case SeccompProfileKind::kStrict:
      return "strict";
    case SeccompProfileKind::kNone:
      return "none";
  }
  return "unknown";
}

SeccompProgram::SeccompProgram(std::vector<struct sock_filter> instructions)
    : instructions_(std::move(instructions)) {
  Point();
}

SeccompProgram::SeccompProgram(SeccompProgram&& other) noexcept
    : instructions_(std::move(other.instructions_)) {
  other.instructions_.clear();
  other.Point();
  Point();
}

SeccompProgram& SeccompProgram::operator=(SeccompProgram&& other) noexcept {
  if (this != &other) {
    instructions_ = std::move(other.instructions_);
    other.instructions_.clear();
    other.Point();
    Point();
  }
  return *this;
}

void SeccompProgram::Point() {
  fprog_.len = static_cast<unsigned short>(instructions_.size());
  fprog_.filter = instructions_.empty() ? nullptr : instructions_.data();
}

absl::StatusOr<SeccompProgram> CompileSeccomp(const SeccompOptions& options) {
  RETURN_IF_ERROR(ValidateExtraDeny(options.extra_deny));
  RETURN_IF_ERROR(ValidateProtectedPids(options.protected_pids));
  auto instructions = Cache().GetOrBuild(
      seccomp_internal::CacheKey(options),
      [&] { return seccomp_internal::BuildSeccompFilter(options); });
  if (!instructions.ok()) {
    return Annotate(
        instructions.status(),
        absl::StrCat("seccomp profile ", SeccompProfileName(options.profile)));
  }
  return SeccompProgram(std::move(*instructions));
}

void HurrySeccompPrecompiles() { Cache().Hurry(); }

absl::Status PrecompileSeccomp(const SeccompOptions& options) {
  RETURN_IF_ERROR(ValidateExtraDeny(options.extra_deny));
  RETURN_IF_ERROR(ValidateProtectedPids(options.protected_pids));
  return Annotate(
      Cache().BuildInBackground(
          seccomp_internal::CacheKey(options),
          [&] { return seccomp_internal::BuildSeccompFilter(options); }),
      absl::StrCat("seccomp profile ", SeccompProfileName(options.profile)));
}

std::vector<std::string> SeccompProfileSyscalls(SeccompProfileKind kind) {
  const seccomp_internal::ProfileTable& table =
      seccomp_internal::ProfileTableFor(kind);
  std::vector<std::string> names(table.allow.begin(), table.allow.end());
  for (const seccomp_internal::ConditionalSyscall& c : table.conditional) {
    names.push_back(c.name);
  }
  return SortedUnique(std::move(names));
}

std::vector<std::string> SeccompProfileDeniedSyscalls(SeccompProfileKind kind) {
  const seccomp_internal::ProfileTable& table =
      seccomp_internal::ProfileTableFor(kind);
  return SortedUnique(
      std::vector<std::string>(table.deny.begin(), table.deny.end()));
}

int ApplySeccompInChild(const SeccompProgram& program) noexcept {
  // Raw syscalls: glibc has no seccomp() wrapper, and prctl's is variadic.
  if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) {
    return errno;
  }
  if (program.empty()) return 0;
  // No SECCOMP_FILTER_FLAG_TSYNC: the child has a single thread.
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0UL, program.prog()) != 0) {
    return errno;
  }
  return 0;
}

int ApplySeccompStep(const void* program) noexcept {
  return ApplySeccompInChild(*static_cast<const SeccompProgram*>(program));
}

}  // namespace mycel
