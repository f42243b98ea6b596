#include "cells/log_file_compat.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel::cells::compat {

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

}  // namespace mycel::cells::compat
