// Seccomp profiles for cells: compiled to a BPF program in the parent (where
// allocation and libseccomp are fine), loaded in the child between clone and
// execve with raw syscalls only.
//
// Profiles:
//   default  modelled on Docker's default profile: an allow-list of ordinary
//            syscalls; mounts, namespaces, kernel modules, BPF, keyrings,
//            clocks, ptrace, io_uring, ... fail with EPERM; clone with
//            namespace flags fails with EPERM; clone3 fails with ENOSYS so
//            libc falls back to clone.
//   strict   a small allow-list: start a (dynamic) binary and do I/O on
//            descriptors; everything else EPERM.
//   none     no filter (PR_SET_NO_NEW_PRIVS is still set).
// In default and strict, a syscall newer than the profile fails with ENOSYS,
// so that programs fall back to an older one (as with runc). "Newer" means a
// number higher than the highest-numbered syscall named in mycel's tables,
// or one that this libseccomp cannot name.
//
// Architectures: on x86_64 the filter covers the native ABI and, with the
// same lists, the 32-bit x86 and x32 ABIs (as Docker does), so a call through
// another ABI meets the same rules: a denied syscall fails with EPERM through
// int 0x80 or with the x32 bit (0x40000000) set; an allowed one reaches the
// kernel, which answers ENOSYS when that ABI is not built in. Any other
// architecture token kills the process.
#ifndef MYCEL_RUNTIME_SECCOMP_SECCOMP_PROFILE_H_
#define MYCEL_RUNTIME_SECCOMP_SECCOMP_PROFILE_H_

#include <linux/filter.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel {

enum class SeccompProfileKind { kDefault, kStrict, kNone };

// "default" | "strict" | "none"; anything else is INVALID_ARGUMENT
// `seccomp: unknown profile "x" (want default|strict|none)`.
absl::StatusOr<SeccompProfileKind> ParseSeccompProfile(absl::string_view name);
absl::string_view SeccompProfileName(SeccompProfileKind kind);

struct SeccompOptions {
  SeccompProfileKind profile = SeccompProfileKind::kDefault;
  // Syscall names the cell also denies with EPERM, on top of any profile
  // (including none and including syscalls the profile allows). Exactly the
  // named syscall is denied: "mkdir" leaves "mkdirat" alone. A name libseccomp
  // does not know is INVALID_ARGUMENT `seccomp_deny: unknown syscall "x"`.
  std::vector<std::string> extra_deny;
  // For a cell that shares the host's pid namespace: processes it may not
  // signal, renice, reschedule, pin, limit, or open a pidfd to, by pid as
  // the kernel sees them from the cell (the host's pids, without a pid
  // namespace). A process group whose id is one of them may not be
  // signalled either. Such calls fail with EPERM; pidfd_send_signal, whose
  // target the filter cannot see, fails with ENOSYS (programs fall back to
  // kill). Each pid must be > 0 (INVALID_ARGUMENT `seccomp: protected pid
  // 0 is not a process id`). Default and strict only: profile none means no
  // filter, and ignores this. Order and repeats do not matter.
  // runtime/seccomp/README.md, "Cells without a pid namespace", says what
  // this does not cover (the threads of a protected process among others).
  std::vector<pid_t> protected_pids;
  // kill(-1, sig), which signals every process the caller may signal, fails
  // with EPERM. Default and strict only (strict denies kill anyway).
  bool deny_broadcast_signals = false;
};

// A compiled classic-BPF seccomp filter. Move-only; owns its instructions.
// prog() points into this object, so it stays valid while the object lives
// and is not moved from: keep the object alive (and in place) until the child
// has exec'ed.
class SeccompProgram final {
 public:
  // An empty program: nothing to load.
  SeccompProgram() = default;
  explicit SeccompProgram(std::vector<struct sock_filter> instructions);
  SeccompProgram(SeccompProgram&& other) noexcept;
  SeccompProgram& operator=(SeccompProgram&& other) noexcept;
  SeccompProgram(const SeccompProgram&) = delete;
  SeccompProgram& operator=(const SeccompProgram&) = delete;
  ~SeccompProgram() = default;

  // Profile none with no extra_deny: there is no filter to load.
  bool empty() const { return instructions_.empty(); }
  // For seccomp(SECCOMP_SET_MODE_FILTER). REQUIRES: !empty().
  const struct sock_fprog* prog() const { return &fprog_; }
  // Number of BPF instructions.
  size_t size() const { return instructions_.size(); }
  const std::vector<struct sock_filter>& instructions() const {
    return instructions_;
  }

 private:
  void Point();

  std::vector<struct sock_filter> instructions_;
  struct sock_fprog fprog_ = {};
};

// Compiles `options` into a filter for this machine's architectures.
// INVALID_ARGUMENT names a bad extra_deny entry or protected pid; any other
// error names the libseccomp call that failed. Results are cached by options
// (the profile, the set of extra_deny names, and for default and strict the
// set of protected pids and deny_broadcast_signals): building the default
// profile from scratch takes tens of milliseconds (libseccomp, three ABIs), a
// cache hit about a microsecond (it copies the instructions). Compiles that
// miss the cache run one at a time; hits never wait for them. Thread-safe.
absl::StatusOr<SeccompProgram> CompileSeccomp(const SeccompOptions& options);

// Compiles `options` into the cache, for a later CompileSeccomp, on the
// calling thread at the lowest CPU priority (nice 19), so that it takes
// only CPU time nothing else wants; a CompileSeccomp that has to wait for
// it raises it back to normal priority (as root) until it is done. Call it
// on a thread of its own.
absl::Status PrecompileSeccomp(const SeccompOptions& options);

// From now on, PrecompileSeccomp calls (the one in progress and those to
// come) keep their thread's normal priority: for a daemon that stops and
// waits for its precompile thread, which at nice 19 on a busy machine took
// 10 s to end.
void HurrySeccompPrecompiles();

// The syscalls `kind` allows, always or for some argument values, sorted; for
// docs and `mycel` introspection. Includes names only other ABIs have
// (e.g. "chown32"). Empty for kNone, which allows everything.
std::vector<std::string> SeccompProfileSyscalls(SeccompProfileKind kind);
// The syscalls `kind` denies by name with EPERM, sorted (every other known
// syscall that it does not allow is denied too).
std::vector<std::string> SeccompProfileDeniedSyscalls(SeccompProfileKind kind);

// In the child, after fork/clone and before execve. Async-signal-safe: raw
// syscalls only, no allocation. Sets PR_SET_NO_NEW_PRIVS (always, even for an
// empty program, so that setuid binaries and file capabilities can never
// raise privileges in a cell) and then loads the filter with
// seccomp(SECCOMP_SET_MODE_FILTER). Returns 0 or an errno value.
// Call it LAST before execve: after it, only syscalls the profile allows
// work (strict allows execve, write, close and exit_group, enough to report
// an exec failure). Capabilities must be applied before it (strict denies
// capset and prctl).
int ApplySeccompInChild(const SeccompProgram& program) noexcept;

// ApplySeccompInChild shaped as a spawn PreExecStep function: `program` is a
// const SeccompProgram*.
int ApplySeccompStep(const void* program) noexcept;

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SECCOMP_SECCOMP_PROFILE_H_
