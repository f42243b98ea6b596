// CgroupFs: the operations through which the cgroup drivers change the
// kernel's cgroup tree (mkdir, rmdir, writes to control files). Reads go
// straight to the files. The seam lets unit tests run the drivers on a
// directory that imitates cgroupfs and inject kernel errors.
#ifndef MYCEL_RUNTIME_CGROUP_CGROUP_FS_H_
#define MYCEL_RUNTIME_CGROUP_CGROUP_FS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mycel {

// Implementations must be thread-safe: drivers call them concurrently.
class CgroupFs {
 public:
  virtual ~CgroupFs() = default;

  // mkdir(path, 0755). ALREADY_EXISTS (from EEXIST) when it exists.
  virtual absl::Status MakeDir(const std::string& path) = 0;
  // rmdir(path). The kernel removes a cgroup directory with rmdir although
  // it lists control files; EBUSY means it still has tasks or children.
  virtual absl::Status RemoveDir(const std::string& path) = 0;
  // rename(from, to), within one parent (all a v1 hierarchy allows; v2
  // refuses with EPERM). The error keeps the errno's code (ALREADY_EXISTS
  // for EEXIST, NOT_FOUND for ENOENT, ...).
  virtual absl::Status Rename(const std::string& from,
                              const std::string& to) = 0;
  // Writes `value` to an existing control file (see WriteCgroupFile).
  virtual absl::Status Write(const std::string& path,
                             absl::string_view value) = 0;
};

// The kernel's cgroupfs.
std::unique_ptr<CgroupFs> NewKernelCgroupFs();

// The one place where a cgroup control file is written: opens `path`
// O_WRONLY|O_CLOEXEC (never creating it) and writes `value` in a single
// write(2), because the kernel parses each write as one value. Errors are
// PosixError("write <path> \"<value>\"", errno), so a kernel EINVAL or
// EBUSY names both the file and the value it refused.
absl::Status WriteCgroupFile(const std::string& path, absl::string_view value);

// The error WriteCgroupFile reports for `errnum` (for fakes of CgroupFs).
absl::Status CgroupWriteError(const std::string& path, absl::string_view value,
                              int errnum);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_CGROUP_CGROUP_FS_H_
