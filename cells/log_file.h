// Executable logs on disk.
//
// Each executable's stdout and stderr are one stream, kept in
// <state-dir>/logs/<cell>/<exe>.log and in its one predecessor,
// <exe>.log.1. The executable writes into a pipe that the log keeper
// (cells/log_keeper.h) holds open, not into the file: the keeper, a process
// of its own that outlives daemon restarts, copies the pipe into the file
// and, when the next write would take the file past its cap, renames it to
// <exe>.log.1 (replacing the previous one) and starts a new <exe>.log. Each
// file therefore holds at most cap bytes whatever the writer's speed, and
// an executable keeps at most 2 × cap bytes on disk.
//
// Two rules of that layout are what readers (cells/log_reader.h) rely on:
// the keeper never writes to a file once it has renamed it, and each file
// records in the extended attribute kLogStreamOffsetXattr how many bytes of
// the stream came before its first byte (where the filesystem keeps user
// extended attributes), so that a reader that fell behind knows how much it
// missed.
//
// Directories are 0700 and files 0600: they hold the workloads' output.
#ifndef MYCEL_CELLS_LOG_FILE_H_
#define MYCEL_CELLS_LOG_FILE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mycel::cells {

inline constexpr int64_t kDefaultLogCapBytes = 8 << 20;

// The stream position of a log file's first byte, in decimal.
inline constexpr char kLogStreamOffsetXattr[] = "user.mycel.stream_offset";

std::string LogDir(const std::string& state_dir, const std::string& cell);
std::string LogPath(const std::string& state_dir, const std::string& cell,
                    const std::string& exe);
// Where `path` goes when it is rotated: path + ".1".
std::string RotatedLogPath(const std::string& path);

// The log keeper's id of an executable's output stream: "<cell>/<exe>".
inline std::string LogStreamId(const std::string& cell,
                               const std::string& exe) {
  return cell + "/" + exe;
}

// kLogStreamOffsetXattr of the open file `fd`; nullopt when it has none or
// the filesystem keeps no user extended attributes.
std::optional<uint64_t> ReadStreamOffset(int fd);
// Sets kLogStreamOffsetXattr on `fd`. UNIMPLEMENTED where the filesystem
// keeps no user extended attributes (tmpfs before Linux 6.6).
absl::Status WriteStreamOffset(int fd, uint64_t offset);

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

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_LOG_FILE_H_
