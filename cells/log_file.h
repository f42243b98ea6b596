// Executable logs: each executable's stdout and stderr are one file under
// <state-dir>/logs/<cell>/<exe>.log, written directly by the process (not
// through a pipe that myceld holds), so output survives daemon restarts.
// Files are size-capped with copy-and-truncate rotation into <exe>.log.1,
// because the process keeps its O_APPEND descriptor across the rotation.
#ifndef MYCEL_CELLS_LOG_FILE_H_
#define MYCEL_CELLS_LOG_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/unique_fd.h"

namespace mycel::cells {

inline constexpr int64_t kDefaultLogCapBytes = 8 << 20;

std::string LogDir(const std::string& state_dir, const std::string& cell);
std::string LogPath(const std::string& state_dir, const std::string& cell,
                    const std::string& exe);

// Deleting a cell renames its log directory out of the way at once and
// removes it later (removing files can wait for the disk). MoveLogDirToTrash
// renames <state-dir>/logs/<cell> to a name that no cell can have and
// returns that name; NOT_FOUND when the cell has no logs.
absl::StatusOr<std::string> MoveLogDirToTrash(const std::string& state_dir,
                                              const std::string& cell);
// Removes a directory of log files (not recursive: logs have no
// subdirectories). Errors are logged, not returned: nobody waits for it.
void RemoveLogDir(const std::string& dir);
// Removes what a daemon that died before its background work ran left in
// the trash.
void EmptyLogTrash(const std::string& state_dir);

// Opens (creating) the log for appending; the directory is created too.
absl::StatusOr<UniqueFd> OpenLogForAppend(const std::string& path);

// When `path` is larger than `cap_bytes`, copies it to `path`.1 (replacing
// the previous one) and truncates it. Returns whether it rotated. Output
// written between the copy and the truncation is lost; that window is a
// few milliseconds every `cap_bytes` of output.
absl::StatusOr<bool> RotateIfLarger(const std::string& path, int64_t cap_bytes);

// The last `lines` lines (all when 0) of the rotated file followed by the
// current one. A missing file reads as empty.
absl::StatusOr<std::string> ReadTail(const std::string& path, int lines);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_LOG_FILE_H_
