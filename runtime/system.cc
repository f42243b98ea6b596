#include "runtime/system.h"

#include <errno.h>
#include <sys/reboot.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel {

absl::Status SetHostname(const std::string& name) {
  if (sethostname(name.data(), name.size()) != 0) {
    return PosixError(absl::StrCat("sethostname ", name), errno);
  }
  return absl::OkStatus();
}

void SyncFilesystems() { sync(); }

absl::Status Reboot(int command) {
  if (reboot(command) != 0) return PosixError("reboot", errno);
  return absl::OkStatus();
}

}  // namespace mycel
