#include "runtime/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "runtime/random.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

// Removes the temporary file unless disarmed.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void Disarm() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace

absl::Status WriteAll(int fd, absl::string_view data, absl::string_view what) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(absl::StrCat("write ", what), errno);
    }
    // write(2) of a non-empty buffer returning 0 would loop for ever.
    if (n == 0) return PosixError(absl::StrCat("write ", what), EIO);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenFile(const std::string& path, int flags,
                                  mode_t mode) {
  UniqueFd fd(open(path.c_str(), flags, mode));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  return fd;
}

absl::Status Truncate(int fd, off_t size, absl::string_view name) {
  if (ftruncate(fd, size) != 0) {
    return PosixError(absl::StrCat("truncate ", name), errno);
  }
  return absl::OkStatus();
}

absl::Status MakeDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0) {
    return PosixError(absl::StrCat("mkdir ", path), errno);
  }
  return absl::OkStatus();
}

absl::Status RemoveFile(const std::string& path) {
  if (unlink(path.c_str()) != 0) {
    return PosixError(absl::StrCat("unlink ", path), errno);
  }
  return absl::OkStatus();
}

absl::Status RemoveDir(const std::string& path) {
  if (rmdir(path.c_str()) != 0) {
    return PosixError(absl::StrCat("rmdir ", path), errno);
  }
  return absl::OkStatus();
}

absl::Status Rename(const std::string& from, const std::string& to) {
  if (rename(from.c_str(), to.c_str()) != 0) {
    return PosixError(absl::StrCat("rename ", from, " to ", to), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return PosixError(absl::StrCat("opendir ", path), errno);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  closedir(d);
  return names;
}

bool CanAccess(const std::string& path, int mode) {
  return access(path.c_str(), mode) == 0;
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(path, " exists and is not a directory"));
  }
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    RETURN_IF_ERROR(MakeDirs(path.substr(0, slash), 0755));
  }
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return PosixError(absl::StrCat("mkdir ", path), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(absl::StrCat("read ", path), errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::StatusOr<std::string> ReadPemFile(absl::string_view field,
                                        const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": no file given"));
  }
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok()) return Annotate(pem.status(), field);
  if (pem->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, " is not a PEM file"));
  }
  return *std::move(pem);
}

absl::Status WriteFile(const std::string& path, absl::string_view data,
                       mode_t mode) {
  UniqueFd fd(
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  return WriteAll(fd.get(), data, path);
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view data,
                             mode_t mode) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("path: \"", path, "\" does not name a file"));
  }
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? std::string(".")
                    : slash == 0               ? std::string("/")
                                               : path.substr(0, slash);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);

  UniqueFd fd;
  std::string tmp;
  for (int attempt = 0; attempt < 8 && !fd; ++attempt) {
    uint64_t suffix = 0;
    RETURN_IF_ERROR(RandomBytes(&suffix, sizeof(suffix)));
    tmp = absl::StrCat(dir, "/.", base, ".tmp-", absl::Hex(suffix));
    fd.reset(open(tmp.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd && errno != EEXIST) {
      return PosixError(absl::StrCat("create ", tmp), errno);
    }
  }
  if (!fd) return PosixError(absl::StrCat("create ", tmp), EEXIST);
  TempFileGuard guard(tmp);

  if (fchmod(fd.get(), mode) != 0) {
    return PosixError(absl::StrCat("chmod ", tmp), errno);
  }
  RETURN_IF_ERROR(WriteAll(fd.get(), data, tmp));
  if (fsync(fd.get()) != 0) {
    return PosixError(absl::StrCat("fsync ", tmp), errno);
  }
  if (close(fd.release()) != 0) {
    return PosixError(absl::StrCat("close ", tmp), errno);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return PosixError(absl::StrCat("rename ", tmp, " to ", path), errno);
  }
  guard.Disarm();

  UniqueFd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) return PosixError(absl::StrCat("open ", dir), errno);
  if (fsync(dir_fd.get()) != 0) {
    return PosixError(absl::StrCat("fsync ", dir), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TightenMode(const std::string& path, mode_t allowed) {
  // O_PATH|O_NOFOLLOW: the mode of the file itself, never of a symlink's
  // target; fchmod needs a real descriptor, so go through /proc.
  UniqueFd fd(open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return PosixError(absl::StrCat("stat ", path), errno);
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is a symbolic link"));
  }
  const mode_t perms = st.st_mode & 07777;
  if ((perms & ~allowed) == 0) return false;
  std::string proc = absl::StrCat("/proc/self/fd/", fd.get());
  if (chmod(proc.c_str(), perms & allowed) != 0) {
    return PosixError(absl::StrCat("chmod ", path), errno);
  }
  return true;
}

namespace {

FileInfo ToFileInfo(const struct stat& st) {
  FileInfo info;
  info.mode = st.st_mode;
  info.dev = st.st_dev;
  info.ino = st.st_ino;
  info.size = st.st_size;
  info.uid = st.st_uid;
  return info;
}

}  // namespace

bool FileInfo::is_directory() const { return S_ISDIR(mode); }
bool FileInfo::is_regular() const { return S_ISREG(mode); }
bool FileInfo::is_symlink() const { return S_ISLNK(mode); }

absl::StatusOr<FileInfo> Stat(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return PosixError(absl::StrCat("stat ", path), errno);
  }
  return ToFileInfo(st);
}

absl::StatusOr<FileInfo> StatFd(int fd, absl::string_view name) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return PosixError(absl::StrCat("stat ", name), errno);
  }
  return ToFileInfo(st);
}

absl::StatusOr<FileInfo> LinkStat(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return PosixError(absl::StrCat("lstat ", path), errno);
  }
  return ToFileInfo(st);
}

absl::Status SyncPath(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  if (fsync(fd.get()) != 0) {
    return PosixError(absl::StrCat("fsync ", path), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadLink(const std::string& path) {
  char buf[PATH_MAX];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
  if (n < 0) return PosixError(absl::StrCat("readlink ", path), errno);
  if (static_cast<size_t>(n) == sizeof(buf)) {
    return PosixError(absl::StrCat("readlink ", path), ENAMETOOLONG);
  }
  return std::string(buf, static_cast<size_t>(n));
}

absl::StatusOr<std::string> GetXattr(int fd, const char* name,
                                     size_t max_size) {
  std::string value(max_size, '\0');
  ssize_t n = fgetxattr(fd, name, value.data(), value.size());
  if (n < 0) return PosixError(absl::StrCat("get ", name), errno);
  value.resize(static_cast<size_t>(n));
  return value;
}

absl::Status SetXattr(int fd, const char* name, absl::string_view value) {
  if (fsetxattr(fd, name, value.data(), value.size(), 0) != 0) {
    return PosixError(absl::StrCat("set ", name), errno);
  }
  return absl::OkStatus();
}

}  // namespace mycel
