#include "runtime/landlock.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace mycel {
namespace {

// The kernel's struct landlock_ruleset_attr as of ABI 6 (Debian 12's
// headers predate `scoped`).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
constexpr unsigned kCreateRulesetVersion = 1U << 0;

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif

}  // namespace

int LandlockAbi() {
  static const int abi = [] {
    long v =
        syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
    return v > 0 ? static_cast<int>(v) : 0;
  }();
  return abi;
}

int ApplyLandlockScopeStep(const void* arg) noexcept {
  const auto* scope = static_cast<const LandlockScope*>(arg);
  RulesetAttr attr = {0, 0, scope->scoped};
  long fd = syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
  if (fd < 0) return errno;
  long rc = syscall(SYS_landlock_restrict_self, fd, 0);
  int error = rc != 0 ? errno : 0;
  close(static_cast<int>(fd));
  return error;
}

}  // namespace mycel
