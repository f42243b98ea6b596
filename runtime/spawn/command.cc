#include "runtime/spawn/command.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "runtime/status.h"
#include "runtime/syscalls.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

enum class Probe { kExecutable, kNotExecutable, kMissing };

// Looks at the absolute `path`, inside the directory `root_fd` when it is
// valid (resolving every component as if it were "/"), else on the host.
absl::StatusOr<Probe> ProbeExecutable(const UniqueFd& root_fd,
                                      const std::string& rootfs,
                                      const std::string& path) {
  UniqueFd fd;
  if (root_fd) {
    struct open_how how = {};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT;
    fd.reset(sys::Openat2(root_fd.get(), path.c_str(), &how, sizeof(how)));
  } else {
    fd.reset(open(path.c_str(), O_PATH | O_CLOEXEC));
  }
  std::string where = rootfs.empty() ? path : absl::StrCat(rootfs, ":", path);
  if (!fd) {
    switch (errno) {
      case ENOENT:
      case ENOTDIR:
        return Probe::kMissing;
      case EACCES:  // a directory on the way cannot be searched
        return Probe::kNotExecutable;
      default:
        return PosixError(absl::StrCat("open ", where), errno);
    }
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return PosixError(absl::StrCat("stat ", where), errno);
  }
  if (!S_ISREG(st.st_mode)) return Probe::kNotExecutable;
  // AT_EACCESS: the effective ids are what execve checks. This also honours
  // noexec mounts, as execve does.
  if (faccessat(fd.get(), "", X_OK, AT_EMPTY_PATH | AT_EACCESS) != 0) {
    if (errno == EACCES) return Probe::kNotExecutable;
    return PosixError(absl::StrCat("access ", where), errno);
  }
  return Probe::kExecutable;
}

std::string InRootfs(const std::string& rootfs) {
  return rootfs.empty() ? "" : absl::StrCat(" in rootfs ", rootfs);
}

absl::Status NotExecutable(const std::string& path, const std::string& rootfs) {
  return absl::PermissionDeniedError(
      absl::StrCat("command: ", path, " is not executable", InRootfs(rootfs)));
}

absl::string_view PathFromEnv(const std::vector<std::string>& env) {
  for (const std::string& entry : env) {
    if (absl::StartsWith(entry, "PATH=")) {
      return absl::string_view(entry).substr(5);
    }
  }
  return kDefaultPath;
}

}  // namespace

absl::StatusOr<std::string> ResolveCommand(const std::string& command,
                                           const std::vector<std::string>& env,
                                           const std::string& rootfs) {
  if (command.empty()) return absl::InvalidArgumentError("command: empty");
  UniqueFd root_fd;
  if (!rootfs.empty()) {
    root_fd.reset(open(rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root_fd)
      return PosixError(absl::StrCat("open rootfs ", rootfs), errno);
  }

  if (absl::StrContains(command, '/')) {
    if (command[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "command: \"", command, "\" must be absolute or a bare name"));
    }
    ASSIGN_OR_RETURN(Probe probe, ProbeExecutable(root_fd, rootfs, command));
    switch (probe) {
      case Probe::kExecutable:
        return command;
      case Probe::kNotExecutable:
        return NotExecutable(command, rootfs);
      case Probe::kMissing:
        return absl::NotFoundError(
            absl::StrCat("command: ", command, " not found", InRootfs(rootfs)));
    }
  }

  std::string first_not_executable;
  for (absl::string_view dir : absl::StrSplit(PathFromEnv(env), ':')) {
    if (dir.empty() || dir[0] != '/') continue;
    while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
    std::string candidate = dir == "/" ? absl::StrCat("/", command)
                                       : absl::StrCat(dir, "/", command);
    ASSIGN_OR_RETURN(Probe probe, ProbeExecutable(root_fd, rootfs, candidate));
    if (probe == Probe::kExecutable) return candidate;
    if (probe == Probe::kNotExecutable && first_not_executable.empty()) {
      first_not_executable = std::move(candidate);
    }
  }
  // execvp reports EACCES when it found the name but could not run it.
  if (!first_not_executable.empty()) {
    return NotExecutable(first_not_executable, rootfs);
  }
  return absl::NotFoundError(absl::StrCat(
      "command: \"", command, "\" not found in PATH", InRootfs(rootfs)));
}

}  // namespace mycel
