// Calls on the whole system that PID 1 makes: the hostname, flushing the
// filesystems, and the final reboot.
#ifndef MYCEL_RUNTIME_SYSTEM_H_
#define MYCEL_RUNTIME_SYSTEM_H_

#include <string>

#include "absl/status/status.h"

namespace mycel {

// sethostname(2) (of the caller's UTS namespace).
absl::Status SetHostname(const std::string& name);

// sync(2): writes every filesystem's dirty data out.
void SyncFilesystems();

// reboot(2) with `command` (RB_AUTOBOOT, RB_HALT_SYSTEM, RB_POWER_OFF).
// Returns only when the kernel refused.
absl::Status Reboot(int command);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SYSTEM_H_
