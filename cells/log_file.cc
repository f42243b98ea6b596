#include "cells/log_file.h"

#include <atomic>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/process.h"
#include "runtime/status.h"

namespace mycel::cells {

std::string LogDir(const std::string& state_dir, const std::string& cell) {
  return absl::StrCat(state_dir, "/logs/", cell);
}

std::string LogPath(const std::string& state_dir, const std::string& cell,
                    const std::string& exe) {
  return absl::StrCat(LogDir(state_dir, cell), "/", exe, ".log");
}

std::string RotatedLogPath(const std::string& path) { return path + ".1"; }

std::optional<uint64_t> ReadStreamOffset(int fd) {
  // Missing, unreadable, over 32 bytes or not a number: no offset.
  absl::StatusOr<std::string> value =
      GetXattr(fd, kLogStreamOffsetXattr, /*max_size=*/32);
  uint64_t offset = 0;
  if (!value.ok() || value->empty() || !absl::SimpleAtoi(*value, &offset)) {
    return std::nullopt;
  }
  return offset;
}

absl::Status WriteStreamOffset(int fd, uint64_t offset) {
  return SetXattr(fd, kLogStreamOffsetXattr, absl::StrCat(offset));
}

namespace {

// Cell names start with a letter or digit (cells/names.h), so no cell's log
// directory starts with this.
constexpr char kTrashPrefix[] = ".deleted-";

}  // namespace

absl::StatusOr<std::string> MoveLogDirToTrash(const std::string& state_dir,
                                              const std::string& cell) {
  static std::atomic<uint64_t> serial{0};
  std::string from = LogDir(state_dir, cell);
  std::string to = absl::StrCat(state_dir, "/logs/", kTrashPrefix, cell, "-",
                                CurrentPid(), "-", ++serial);
  absl::Status s = Rename(from, to);
  if (absl::IsNotFound(s)) {
    return absl::NotFoundError(absl::StrCat("no logs at ", from));
  }
  RETURN_IF_ERROR(s);
  return to;
}

void RemoveLogDir(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  if (!names.ok()) {
    if (!absl::IsNotFound(names.status())) {
      log::Warn("cannot remove logs",
                {{"dir", dir}, {"error", names.status()}});
    }
    return;
  }
  for (const std::string& name : *names) {
    std::string path = absl::StrCat(dir, "/", name);
    if (absl::Status s = RemoveFile(path); !s.ok() && !absl::IsNotFound(s)) {
      log::Warn("cannot remove log", {{"path", path}, {"error", s}});
    }
  }
  if (absl::Status s = RemoveDir(dir); !s.ok() && !absl::IsNotFound(s)) {
    log::Warn("cannot remove logs", {{"dir", dir}, {"error", s}});
  }
}

void EmptyLogTrash(const std::string& state_dir) {
  std::string logs = absl::StrCat(state_dir, "/logs");
  absl::StatusOr<std::vector<std::string>> names = ListDir(logs);
  if (!names.ok()) return;  // no logs yet
  std::vector<std::string> trash;
  for (const std::string& name : *names) {
    if (absl::StartsWith(name, kTrashPrefix)) {
      trash.push_back(absl::StrCat(logs, "/", name));
    }
  }
  for (const std::string& dir : trash) RemoveLogDir(dir);
}

}  // namespace mycel::cells
