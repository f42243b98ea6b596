// LogReader: reads an executable's log, <exe>.log.1 then <exe>.log
// (cells/log_file.h), once or following it as it grows and rotates, in
// memory that does not depend on the log's size.
#ifndef MYCEL_CELLS_LOG_READER_H_
#define MYCEL_CELLS_LOG_READER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/unique_fd.h"

namespace mycel::cells {

// Reads the stream kept at `path` and `path`.1 in order, from where Open
// put it, holding at most one file open at a time (and two while it
// opens).
//
// Following: a caller that keeps calling Read after it returned 0 gets
// what is written later. The reader relies on the keeper's rules
// (cells/log_file.h): when `path` is no longer the file it reads, that
// file was renamed and will not grow again, so it reads it to its end,
// then goes on with its successor: `path`.1 if that is neither the file
// it read nor the current `path` (the file rotated after it, which it
// reads from its start), else `path`. It sees every byte that was kept, in
// order, with no duplicate, as long as it reaches each file before that
// file is rotated away twice (it holds the file it reads, so a rotation
// cannot take that one from under it): a follower that falls further
// behind than one rotation skips whole files, and lost_bytes() says how
// many bytes it skipped (where the filesystem keeps the files' stream
// positions, kLogStreamOffsetXattr; elsewhere skips are not seen).
//
// Move-only; not thread-safe (one reader per caller).
class LogReader {
 public:
  // Positions the reader at the start of the last `tail_lines` lines of
  // `path`.1 followed by `path` (all of them when 0; a newline that ends
  // the last line does not start another). Scans backwards in fixed-size
  // blocks, never loading a file. A missing log reads as empty, and is
  // followed from its first byte once it appears.
  static absl::StatusOr<LogReader> Open(const std::string& path,
                                        int tail_lines);

  LogReader(LogReader&&) = default;
  LogReader& operator=(LogReader&&) = default;
  LogReader(const LogReader&) = delete;
  LogReader& operator=(const LogReader&) = delete;

  // Copies up to `n` bytes into `buf` and returns how many; 0 when it has
  // caught up with the writer (for now: call again to follow).
  absl::StatusOr<size_t> Read(char* buf, size_t n);

  // Bytes a follower skipped because they were rotated away before it got
  // to them, and how many times that happened. Only ever grow.
  uint64_t lost_bytes() const { return lost_bytes_; }
  uint64_t gaps() const { return gaps_; }

 private:
  // One open log file.
  struct File {
    UniqueFd fd;  // invalid: no such file
    dev_t dev = 0;
    ino_t ino = 0;
    uint64_t size = 0;  // when opened
    std::optional<uint64_t> stream_offset;
  };
  // `path`.1 and `path` as they were at one moment.
  struct Snapshot {
    File rotated;
    File current;
  };

  explicit LogReader(std::string path);

  absl::Status OpenIfExists(const std::string& path, File* file) const;
  absl::StatusOr<Snapshot> TakeSnapshot() const;
  // Moves on to `next`, counting what lies between the end of the file
  // read so far and the start of `next` as lost. `finished`: `next` was
  // renamed already, so it will not grow.
  void MoveTo(File next, bool finished);
  // Whether `f` is known to start before where the reader is: a file
  // older than the one read (only a file removed from under the keeper
  // can put one there).
  bool Behind(const File& f) const;
  std::optional<uint64_t> StreamPosition() const;

  std::string path_;
  std::string rotated_path_;
  File file_;         // the file being read; invalid while there is none
  uint64_t pos_ = 0;  // in file_
  // file_ has been renamed: read it to its end, then go on.
  bool finished_ = false;
  // Where the stream starts for a reader that found no log at Open.
  std::optional<uint64_t> start_position_;
  uint64_t lost_bytes_ = 0;
  uint64_t gaps_ = 0;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_LOG_READER_H_
