// Small filesystem helpers over POSIX calls, returning Status.
#ifndef MYCEL_RUNTIME_FS_H_
#define MYCEL_RUNTIME_FS_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace mycel {

// mkdir -p: creates `path` and missing parents with `mode`. An existing
// directory is fine; an existing non-directory is INVALID_ARGUMENT.
absl::Status MakeDirs(const std::string& path, mode_t mode);

// Reads a whole (small) file.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `data` to `path` (created or truncated).
absl::Status WriteFile(const std::string& path, absl::string_view data,
                       mode_t mode = 0644);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_FS_H_
