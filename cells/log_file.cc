#include "cells/log_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
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

absl::StatusOr<UniqueFd> OpenLogForAppend(const std::string& path) {
  RETURN_IF_ERROR(MakeDirs(path.substr(0, path.rfind('/')), 0750));
  UniqueFd fd(
      open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640));
  if (!fd) return PosixError(absl::StrCat("open log ", path), errno);
  return fd;
}

absl::StatusOr<bool> RotateIfLarger(const std::string& path,
                                    int64_t cap_bytes) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    return PosixError(absl::StrCat("stat ", path), errno);
  }
  if (st.st_size <= cap_bytes) return false;
  std::string rotated = path + ".1";
  UniqueFd in(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return PosixError(absl::StrCat("open ", path), errno);
  UniqueFd out(
      open(rotated.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!out) return PosixError(absl::StrCat("open ", rotated), errno);
  off_t offset = 0;
  while (offset < st.st_size) {
    ssize_t n = sendfile(out.get(), in.get(), &offset, st.st_size - offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(absl::StrCat("copy ", path, " to ", rotated), errno);
    }
    if (n == 0) break;
  }
  if (truncate(path.c_str(), 0) != 0) {
    return PosixError(absl::StrCat("truncate ", path), errno);
  }
  return true;
}

absl::StatusOr<std::string> ReadTail(const std::string& path, int lines) {
  std::string all;
  for (const std::string& p : {path + ".1", path}) {
    absl::StatusOr<std::string> part = ReadFile(p);
    if (!part.ok()) {
      if (part.status().code() == absl::StatusCode::kNotFound) continue;
      return part.status();
    }
    all += *part;
  }
  if (lines <= 0) return all;
  // Walk back over `lines` newlines; a final line without one counts too.
  size_t end = all.size();
  if (end > 0 && all[end - 1] == '\n') --end;
  size_t pos = end;
  int seen = 0;
  while (pos > 0) {
    if (all[pos - 1] == '\n' && ++seen == lines) break;
    --pos;
  }
  return all.substr(pos);
}

}  // namespace mycel::cells
