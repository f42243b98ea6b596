// TEMPORARY compatibility shim, to be deleted when the log keeper is wired
// into CellManager::Launch and ExecutablesService::Logs.
//
// These are the pieces of the old design that cells/log_file.h no longer
// has (executables writing to their log file directly, copy-and-truncate
// rotation by the daemon, whole-file tails), kept verbatim so that the
// daemon behaves as before until its call sites move to LogKeeperClient
// (cells/log_keeper_client.h) and LogReader (cells/log_reader.h). Nothing
// new may call them: they have the defects the keeper fixes (the cap does
// not hold against a fast writer, a follower loses what is written during a
// rotation, a tail holds whole files in memory).
#ifndef MYCEL_CELLS_LOG_FILE_COMPAT_H_
#define MYCEL_CELLS_LOG_FILE_COMPAT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/unique_fd.h"

namespace mycel::cells::compat {

// Opens (creating) the log for appending; the directory is created too.
absl::StatusOr<UniqueFd> OpenLogForAppend(const std::string& path);

// When `path` is larger than `cap_bytes`, copies it to `path`.1 (replacing
// the previous one) and truncates it. Returns whether it rotated. Output
// written between the copy and the truncation is lost.
absl::StatusOr<bool> RotateIfLarger(const std::string& path, int64_t cap_bytes);

// The last `lines` lines (all when 0) of the rotated file followed by the
// current one. A missing file reads as empty. Holds both files in memory.
absl::StatusOr<std::string> ReadTail(const std::string& path, int lines);

}  // namespace mycel::cells::compat

#endif  // MYCEL_CELLS_LOG_FILE_COMPAT_H_
