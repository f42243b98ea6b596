// Sizes as people write them, for flags and settings.
#ifndef MYCEL_RUNTIME_BYTE_SIZE_H_
#define MYCEL_RUNTIME_BYTE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel {

// "1048576", "512K", "64M", "2G", "1T" (powers of 1024; "Ki"/"MiB" also
// accepted). INVALID_ARGUMENT names `name`.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view name,
                                      absl::string_view text);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_BYTE_SIZE_H_
