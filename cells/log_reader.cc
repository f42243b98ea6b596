#include "cells/log_reader.h"

#include <errno.h>
#include <fcntl.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cells/log_file.h"
#include "runtime/fs.h"
#include "runtime/status.h"
#include "runtime/syscalls.h"

namespace mycel::cells {
namespace {

// The block a tail scan reads at a time.
constexpr size_t kScanBlockBytes = 64 << 10;

// How often Read tries again when the files move while it looks at them.
constexpr int kSnapshotAttempts = 10;
constexpr int kStepsPerRead = 8;

bool SameFile(dev_t dev, ino_t ino, const FileInfo& info) {
  return info.dev == dev && info.ino == ino;
}

// Reads [offset, offset + n) of `fd` into `buf`; what exists of it.
absl::StatusOr<size_t> ReadAt(int fd, char* buf, size_t n, uint64_t offset,
                              const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r =
        sys::Pread(fd, buf + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return PosixError(absl::StrCat("read ", path), errno);
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

}  // namespace

LogReader::LogReader(std::string path)
    : path_(std::move(path)), rotated_path_(RotatedLogPath(path_)) {}

absl::Status LogReader::OpenIfExists(const std::string& path,
                                     File* file) const {
  *file = File();
  absl::StatusOr<UniqueFd> fd =
      OpenFile(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
  if (absl::IsNotFound(fd.status())) return absl::OkStatus();
  RETURN_IF_ERROR(fd.status());
  ASSIGN_OR_RETURN(FileInfo st, StatFd(fd->get(), path));
  file->dev = st.dev;
  file->ino = st.ino;
  file->size = static_cast<uint64_t>(st.size);
  file->stream_offset = ReadStreamOffset(fd->get());
  file->fd = *std::move(fd);
  return absl::OkStatus();
}

absl::StatusOr<LogReader::Snapshot> LogReader::TakeSnapshot() const {
  for (int attempt = 1;; ++attempt) {
    Snapshot s;
    RETURN_IF_ERROR(OpenIfExists(rotated_path_, &s.rotated));
    RETURN_IF_ERROR(OpenIfExists(path_, &s.current));
    // A rotation between the two opens would pair a file with one that is
    // not its successor. Every rotation replaces `path`.1 (with a file that
    // cannot have `s.rotated`'s inode, which is held open), so finding it
    // unchanged proves that none happened.
    absl::StatusOr<FileInfo> st = Stat(rotated_path_);
    bool unchanged;
    if (st.ok()) {
      unchanged = s.rotated.fd && SameFile(s.rotated.dev, s.rotated.ino, *st);
    } else if (absl::IsNotFound(st.status())) {
      unchanged = !s.rotated.fd;
    } else {
      return st.status();
    }
    if (s.rotated.fd && s.current.fd && s.rotated.dev == s.current.dev &&
        s.rotated.ino == s.current.ino) {
      s.rotated = File();  // one file under both names: not ours to judge
    }
    // A writer rotating faster than two opens would starve us; an
    // inconsistent pair then costs at most a skipped file, as falling
    // behind does.
    if (unchanged || attempt == kSnapshotAttempts) return s;
  }
}

absl::StatusOr<LogReader> LogReader::Open(const std::string& path,
                                          int tail_lines) {
  if (tail_lines < 0) {
    return absl::InvalidArgumentError("tail_lines: must not be negative");
  }
  LogReader r(path);
  ASSIGN_OR_RETURN(Snapshot s, r.TakeSnapshot());
  if (!s.rotated.fd && !s.current.fd) {
    r.start_position_ = 0;  // a stream that has yet to begin
    return r;
  }
  const uint64_t rotated_size = s.rotated.size;
  const uint64_t total = rotated_size + s.current.size;
  // A position in the two files as one: [0, rotated_size) is `path`.1.
  uint64_t start = 0;
  if (tail_lines > 0 && total > 0) {
    auto buf = std::make_unique<char[]>(kScanBlockBytes);
    int seen = 0;
    bool found = false;
    struct Part {
      const File* file;
      uint64_t base;
      const std::string* name;
    } parts[] = {{&s.current, rotated_size, &r.path_},
                 {&s.rotated, 0, &r.rotated_path_}};
    for (const Part& part : parts) {
      if (found || !part.file->fd) continue;
      for (uint64_t hi = part.file->size; hi > 0 && !found;) {
        uint64_t lo = hi > kScanBlockBytes ? hi - kScanBlockBytes : 0;
        ASSIGN_OR_RETURN(size_t got, ReadAt(part.file->fd.get(), buf.get(),
                                            hi - lo, lo, *part.name));
        for (size_t i = got; i-- > 0;) {
          uint64_t at = part.base + lo + i;
          // The newline that ends the last line starts no line after it.
          if (buf[i] == '\n' && at != total - 1 && ++seen == tail_lines) {
            start = at + 1;
            found = true;
            break;
          }
        }
        hi = lo;
      }
    }
  }
  if (s.rotated.fd && (start < rotated_size || !s.current.fd)) {
    r.file_ = std::move(s.rotated);
    r.pos_ = std::min(start, rotated_size);
    r.finished_ = true;
  } else {
    r.file_ = std::move(s.current);
    r.pos_ = start - rotated_size;
  }
  return r;
}

std::optional<uint64_t> LogReader::StreamPosition() const {
  if (!file_.fd) return start_position_;
  if (!file_.stream_offset.has_value()) return std::nullopt;
  return *file_.stream_offset + pos_;
}

bool LogReader::Behind(const File& f) const {
  std::optional<uint64_t> at = StreamPosition();
  return at.has_value() && f.stream_offset.has_value() &&
         *f.stream_offset < *at;
}

void LogReader::MoveTo(File next, bool finished) {
  std::optional<uint64_t> at = StreamPosition();
  if (at.has_value() && next.stream_offset.has_value() &&
      *next.stream_offset > *at) {
    lost_bytes_ += *next.stream_offset - *at;
    ++gaps_;
  }
  file_ = std::move(next);
  pos_ = 0;
  finished_ = finished;
}

absl::StatusOr<size_t> LogReader::Read(char* buf, size_t n) {
  if (n == 0) return 0;
  for (int step = 0; step < kStepsPerRead; ++step) {
    if (!file_.fd) {
      // There was no log at Open: begin with the oldest file there is now.
      ASSIGN_OR_RETURN(Snapshot s, TakeSnapshot());
      if (s.rotated.fd) {
        MoveTo(std::move(s.rotated), /*finished=*/true);
      } else if (s.current.fd) {
        MoveTo(std::move(s.current), /*finished=*/false);
      } else {
        return 0;
      }
      continue;
    }
    ASSIGN_OR_RETURN(size_t got, ReadAt(file_.fd.get(), buf, n, pos_, path_));
    if (got > 0) {
      pos_ += got;
      return got;
    }
    if (!finished_) {
      absl::StatusOr<FileInfo> st = Stat(path_);
      if (!st.ok()) {
        // Between a rotation's rename and its new file; or the log was
        // removed. Either way nothing more to read yet.
        if (absl::IsNotFound(st.status())) return 0;
        return st.status();
      }
      if (SameFile(file_.dev, file_.ino, *st)) return 0;  // caught up
      // Renamed: the keeper wrote its last bytes before the rename, so
      // read again to its end before going on.
      finished_ = true;
      continue;
    }
    ASSIGN_OR_RETURN(Snapshot s, TakeSnapshot());
    auto is_ours = [this](const File& f) {
      return f.fd && f.dev == file_.dev && f.ino == file_.ino;
    };
    if (is_ours(s.current)) {
      finished_ = false;  // cannot be after a rename; be safe, not stuck
      return 0;
    }
    // Files at the two names are both newer than one that left them, so
    // `path`.1, when it is not ours, is the oldest thing left to read.
    if (s.rotated.fd && !is_ours(s.rotated) && !Behind(s.rotated)) {
      MoveTo(std::move(s.rotated), /*finished=*/true);
    } else if (s.current.fd) {
      MoveTo(std::move(s.current), /*finished=*/false);
    } else {
      return 0;  // the successor is not there yet
    }
  }
  return 0;
}

}  // namespace mycel::cells
