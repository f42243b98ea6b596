#include "runtime/cgroup/cgroup_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

class KernelCgroupFs final : public CgroupFs {
 public:
  absl::Status MakeDir(const std::string& path) override {
    return mycel::MakeDir(path, 0755);
  }

  absl::Status RemoveDir(const std::string& path) override {
    return mycel::RemoveDir(path);
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    return mycel::Rename(from, to);
  }

  absl::Status Write(const std::string& path,
                     absl::string_view value) override {
    return WriteCgroupFile(path, value);
  }
};

}  // namespace

std::unique_ptr<CgroupFs> NewKernelCgroupFs() {
  return std::make_unique<KernelCgroupFs>();
}

absl::Status CgroupWriteError(const std::string& path, absl::string_view value,
                              int errnum) {
  return PosixError(
      absl::StrCat("write ", path, " \"", absl::CEscape(value), "\""), errnum);
}

absl::Status WriteCgroupFile(const std::string& path, absl::string_view value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return CgroupWriteError(path, value, errno);
  ssize_t n;
  do {
    n = write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return CgroupWriteError(path, value, errno);
  // Control files take a value in one write or refuse it; a short count
  // would mean the kernel parsed only part of it.
  if (static_cast<size_t>(n) != value.size()) {
    return absl::InternalError(absl::StrCat("write ", path, " \"",
                                            absl::CEscape(value), "\": wrote ",
                                            n, " of ", value.size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace mycel
