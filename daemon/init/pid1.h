// PID-1 duties: what myceld does when it is the first process of a machine
// (or of a container), and the last things it does before the machine
// powers off.
#ifndef MYCEL_DAEMON_INIT_PID1_H_
#define MYCEL_DAEMON_INIT_PID1_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mycel/v1/config.pb.h"
#include "mycel/v1/node.pb.h"

namespace mycel {

enum class InitRole {
  kNone,       // an ordinary daemon under another init
  kMachine,    // PID 1 of the initial pid namespace: the machine's init
  kContainer,  // PID 1 of a child pid namespace, or --pid1 when not PID 1
};

absl::string_view InitRoleName(InitRole role);

// PID 1 of the initial pid namespace (whose /proc/self/ns/pid inode is
// fixed by the kernel) is a machine's init; PID 1 elsewhere is a
// container's. `forced` (--pid1) makes a non-PID-1 process a container
// init, never a machine's: it must not power off the host.
InitRole DetectInitRole(bool forced);

// Brings a machine up: pseudo filesystems, hostname, loopback and the
// configured interfaces, kernel modules, /etc/machine-id. Problems that
// leave the system usable are appended to `warnings`; an error means the
// system cannot work (for example /proc could not be mounted).
// REQUIRES: `config` has its defaults (ParseDaemonFlags applies them).
absl::Status SetUpMachine(const mycel::v1::DaemonConfig& config,
                          std::vector<std::string>* warnings);

// Writes /etc/machine-id (32 hex digits and a newline) under `root` when it
// is missing or empty. Returns the id in force.
absl::StatusOr<std::string> EnsureMachineId(const std::string& root);

// The end of a machine's life, after workloads are stopped and the store is
// checkpointed: TERM then KILL every remaining process, sync, unmount
// (or remount read-only) every filesystem, and reboot(2) with the command
// that `mode` asks for. Never returns: if reboot(2) fails it logs and keeps
// reaping forever, since PID 1 exiting panics the kernel.
[[noreturn]] void FinishMachineShutdown(mycel::v1::ShutdownMode mode);

}  // namespace mycel

#endif  // MYCEL_DAEMON_INIT_PID1_H_
