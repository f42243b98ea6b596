// Landlock's scopes (Linux 6.12, Landlock ABI 6): a process that restricts
// itself with a ruleset whose `scoped` field has LANDLOCK_SCOPE_SIGNAL can
// no longer signal any process outside its Landlock domain (itself and
// the processes it starts afterwards). Cells without a pid namespace use
// it so that their workloads cannot signal the host's processes, the
// threads of myceld included, which no seccomp filter can name.
#ifndef MYCEL_RUNTIME_LANDLOCK_H_
#define MYCEL_RUNTIME_LANDLOCK_H_

#include <cstdint>

namespace mycel {

// The running kernel's Landlock ABI version (0 when Landlock is absent or
// disabled). Probed once.
int LandlockAbi();

// The first ABI with scopes.
inline constexpr int kLandlockScopesAbi = 6;

// What ApplyLandlockScopeStep restricts (the kernel's scope bits).
struct LandlockScope {
  uint64_t scoped = 0;
};
inline constexpr uint64_t kLandlockScopeSignal = uint64_t{1} << 1;

// A PreExecStep (runtime/spawn/spawn.h): creates a ruleset that handles no
// file or network access and scopes `arg` (a LandlockScope), and restricts
// the calling process with it. Async-signal-safe: three system calls.
// Returns 0 or an errno value. Needs no_new_privs or CAP_SYS_ADMIN (run it
// before the credentials change).
int ApplyLandlockScopeStep(const void* arg) noexcept;

}  // namespace mycel

#endif  // MYCEL_RUNTIME_LANDLOCK_H_
