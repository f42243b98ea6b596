#include "cells/log_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/log.h"
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
  char buf[32];
  ssize_t n = fgetxattr(fd, kLogStreamOffsetXattr, buf, sizeof(buf));
  uint64_t offset = 0;
  if (n <= 0 || !absl::SimpleAtoi(
                    absl::string_view(buf, static_cast<size_t>(n)), &offset)) {
    return std::nullopt;
  }
  return offset;
}

absl::Status WriteStreamOffset(int fd, uint64_t offset) {
  std::string value = absl::StrCat(offset);
  if (fsetxattr(fd, kLogStreamOffsetXattr, value.data(), value.size(), 0) !=
      0) {
    return PosixError(absl::StrCat("set ", kLogStreamOffsetXattr), errno);
  }
  return absl::OkStatus();
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
                                getpid(), "-", ++serial);
  if (rename(from.c_str(), to.c_str()) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("no logs at ", from));
    }
    return PosixError(absl::StrCat("rename ", from, " to ", to), errno);
  }
  return to;
}

void RemoveLogDir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno != ENOENT) {
      log::Warn("cannot remove logs",
                {{"dir", dir}, {"error", PosixError("opendir", errno)}});
    }
    return;
  }
  while (struct dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    std::string path = absl::StrCat(dir, "/", e->d_name);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      log::Warn("cannot remove log",
                {{"path", path}, {"error", PosixError("unlink", errno)}});
    }
  }
  closedir(d);
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    log::Warn("cannot remove logs",
              {{"dir", dir}, {"error", PosixError("rmdir", errno)}});
  }
}

void EmptyLogTrash(const std::string& state_dir) {
  std::string logs = absl::StrCat(state_dir, "/logs");
  DIR* d = opendir(logs.c_str());
  if (d == nullptr) return;  // no logs yet
  std::vector<std::string> trash;
  while (struct dirent* e = readdir(d)) {
    if (absl::StartsWith(e->d_name, kTrashPrefix)) {
      trash.push_back(absl::StrCat(logs, "/", e->d_name));
    }
  }
  closedir(d);
  for (const std::string& dir : trash) RemoveLogDir(dir);
}

}  // namespace mycel::cells
