// Validation of user-supplied names and values shared by the cells layer.
#ifndef MYCEL_CELLS_NAMES_H_
#define MYCEL_CELLS_NAMES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mycel::cells {

inline constexpr size_t kMaxNameLength = 63;

// A cell or executable name: [a-z0-9][a-z0-9_.-]{0,62}, and not containing
// "..". Names become cgroup directories and log file names, so anything
// that could escape a directory is refused. INVALID_ARGUMENT names `field`
// and says why.
absl::Status ValidateName(absl::string_view field, absl::string_view name);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_NAMES_H_
