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

// The table of `kind`; all lists are empty for kNone.
const ProfileTable& ProfileTableFor(SeccompProfileKind kind);

// Every name in every profile table (with repeats): the vocabulary that
// decides which syscall numbers are "known" (see ProfileTable).
std::vector<const char*> AllTableNames();

}  // namespace mycel::seccomp_internal

#endif  // MYCEL_RUNTIME_SECCOMP_INTERNAL_SYSCALL_TABLES_H_
