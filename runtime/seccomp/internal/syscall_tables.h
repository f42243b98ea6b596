// The syscall tables behind mycel's seccomp profiles: which syscalls each
// profile allows, which it allows only for some argument values, and which
// it denies. The tables hold names, not numbers; CompileSeccomp resolves them
// for each architecture with libseccomp. A name this libseccomp cannot
// resolve (a syscall newer than its tables) is skipped, so the syscall falls
// to the profile's "newer than the profile" action, ENOSYS.
#ifndef MYCEL_RUNTIME_SECCOMP_INTERNAL_SYSCALL_TABLES_H_
#define MYCEL_RUNTIME_SECCOMP_INTERNAL_SYSCALL_TABLES_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "runtime/seccomp/seccomp_profile.h"

namespace mycel::seccomp_internal {

// A syscall that is allowed only when one of its arguments passes a test;
// every other call of it fails with EPERM.
struct ConditionalSyscall {
  enum class Match {
    kAnyOf,     // args[arg] equals one of `values`
    kNoBitsOf,  // (args[arg] & v) == 0 for one of `values` (masks)
  };
  const char* name;
  unsigned int arg;
  Match match;
  absl::Span<const uint64_t> values;
};

// One profile. A syscall that appears in none of the lists but that
// libseccomp can name, with a number no higher than the highest number of
// any name in any profile (see HighestKnownSyscall), is denied with EPERM
// like the `deny` list; `deny` exists so that the dangerous ones are spelled
// out (for docs and tests) and always count as known.
struct ProfileTable {
  absl::Span<const char* const> allow;
  absl::Span<const ConditionalSyscall> conditional;
  // Fail with ENOSYS even though they are known, so that libc falls back to
  // an older syscall that the profile can inspect (clone3 → clone).
  absl::Span<const char* const> enosys;
  absl::Span<const char* const> deny;
};

// One way a syscall can act on another process that it names by pid, for
// cells that share the host's pid namespace (SeccompOptions::protected_pids
// and deny_broadcast_signals). A call is denied with EPERM when every check
// of a rule holds. Checks compare the low 32 bits of an argument only: pids,
// commands and `which` selectors are C ints, which the kernel reads from the
// low half of a 64-bit register whatever the high half holds.
struct TargetCheck {
  enum class Kind {
    kNone,            // no check (the second check of a one-check rule)
    kValue,           // the argument is `value`
    kProtectedPid,    // the argument is one of the protected pids
    kProtectedGroup,  // the argument is minus one of them: a process group
    kBroadcast,       // the argument is -1: kill(-1, sig)
  };
  Kind kind = Kind::kNone;
  unsigned int arg = 0;
  uint32_t value = 0;  // kValue only
};

struct TargetRule {
  const char* name;
  TargetCheck check;
  TargetCheck and_check;  // kNone: the rule has one check
};

// The rules above, for every syscall that any profile allows and that acts
// on another process by pid. They apply only where the profile allows the
// syscall outright; a syscall that a profile allows for some argument values
// only (strict's ioctl) keeps its own allow-list, which the tests check
// denies these calls too. A rule whose checks are all kValue is a route the
// filter cannot inspect (the target sits behind a pointer, or is every
// process of a user): it applies whenever there are protected pids.
absl::Span<const TargetRule> TargetRules();

// Syscalls that reach a process through a descriptor the filter cannot look
// into (pidfd_send_signal takes a pidfd or an open /proc/<pid> directory):
// with protected pids they fail with ENOSYS, so that programs fall back to
// kill(2), whose pid the filter checks.
absl::Span<const char* const> TargetEnosys();

// The table of `kind`; all lists are empty for kNone.
const ProfileTable& ProfileTableFor(SeccompProfileKind kind);

// Every name in every profile table (with repeats): the vocabulary that
// decides which syscall numbers are "known" (see ProfileTable).
std::vector<const char*> AllTableNames();

}  // namespace mycel::seccomp_internal

#endif  // MYCEL_RUNTIME_SECCOMP_INTERNAL_SYSCALL_TABLES_H_
