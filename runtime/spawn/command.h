// Resolving a command name to the executable that execve will run.
#ifndef MYCEL_RUNTIME_SPAWN_COMMAND_H_
#define MYCEL_RUNTIME_SPAWN_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mycel {

// PATH used when `env` has none (the one execvp and systemd use for root).
inline constexpr char kDefaultPath[] =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Resolves `command` the way execvp would, against PATH from `env` ("K=V"
// entries; kDefaultPath when absent), inside `rootfs` when it is not empty
// (symlinks are resolved as if `rootfs` were "/", with openat2
// RESOLVE_IN_ROOT). Returns the absolute path as seen inside the rootfs.
//
// Called by the parent before Spawn so that a missing or non-executable
// command is a clean API error rather than a failed execve.
//   - A command containing '/' must be absolute (INVALID_ARGUMENT otherwise).
//   - Empty and relative PATH entries are skipped: a daemon's working
//     directory must never decide what runs.
//   - NOT_FOUND `command: "x" not found in PATH` when no entry has it;
//     PERMISSION_DENIED `command: /x is not executable` when the only
//     matches are not executable regular files (as execvp reports EACCES).
absl::StatusOr<std::string> ResolveCommand(const std::string& command,
                                           const std::vector<std::string>& env,
                                           const std::string& rootfs);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SPAWN_COMMAND_H_
