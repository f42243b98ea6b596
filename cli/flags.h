// Small parsers for CLI values: sizes ("64M"), durations ("500ms"),
// "CELL/EXE" references, signals, users.
#ifndef MYCEL_CLI_FLAGS_H_
#define MYCEL_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mycel::cli {

// "1048576", "512K", "64M", "2G", "1T" (powers of 1024; "Ki"/"MiB" also
// accepted). INVALID_ARGUMENT names `flag`.
absl::StatusOr<int64_t> ParseSize(absl::string_view flag,
                                  absl::string_view text);

// "100ms", "5s", "2m", "1h", or a bare number of seconds.
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag,
                                                 absl::string_view text);

// "CELL/EXE" → {CELL, EXE}.
absl::StatusOr<std::pair<std::string, std::string>> ParseExeRef(
    absl::string_view text);

// A signal by name ("TERM", "SIGKILL") or number.
absl::StatusOr<int> ParseSignal(absl::string_view text);

// --user: "UID" or "UID:GID" (numbers) → {uid, gid}; the gid defaults to
// the uid.
absl::StatusOr<std::pair<uint32_t, uint32_t>> ParseUser(absl::string_view text);

}  // namespace mycel::cli

#endif  // MYCEL_CLI_FLAGS_H_
