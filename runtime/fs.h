// Small filesystem helpers over POSIX calls, returning Status.
#ifndef MYCEL_RUNTIME_FS_H_
#define MYCEL_RUNTIME_FS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/unique_fd.h"

namespace mycel {

// mkdir -p: creates `path` and missing parents with `mode`. An existing
// directory is fine; an existing non-directory is INVALID_ARGUMENT.
absl::Status MakeDirs(const std::string& path, mode_t mode);

// Reads a whole (small) file.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Reads a whole PEM file (a certificate, a key). An error names `field`
// (the flag or setting that gave the path); INVALID_ARGUMENT when the file
// holds no PEM block.
absl::StatusOr<std::string> ReadPemFile(absl::string_view field,
                                        const std::string& path);

// Writes `data` to `path` (created or truncated).
absl::Status WriteFile(const std::string& path, absl::string_view data,
                       mode_t mode = 0644);

// Replaces `path` with `data` so that a reader (or a crash) sees either the
// old file or the whole new one, never a mix, and the new file never exists
// with a wider mode than `mode`:
//   1. creates "<dir>/.<name>.tmp-<random>" with O_CREAT|O_EXCL|O_NOFOLLOW|
//      O_CLOEXEC and `mode`, then fchmod()s it to exactly `mode` (the umask
//      can only narrow the open() mode);
//   2. writes everything and fsync()s it;
//   3. rename()s it over `path` and fsync()s the directory.
// On any failure the temporary file is removed and `path` is untouched. The
// error names the step and the path (PosixError codes).
absl::Status WriteFileAtomic(const std::string& path, absl::string_view data,
                             mode_t mode);

// Clears the permission bits of `path` that `allowed` lacks (chmod to
// mode & allowed), without following a symlink at `path`. Returns whether
// the mode changed; NOT_FOUND when there is no such file.
absl::StatusOr<bool> TightenMode(const std::string& path, mode_t allowed);

// What stat(2) says of a file.
struct FileInfo {
  mode_t mode = 0;  // type and permission bits (st_mode)
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  uid_t uid = 0;

  bool is_directory() const;
  bool is_regular() const;
  bool is_symlink() const;
  // The same file as `other` (device and inode).
  bool SameFile(const FileInfo& other) const {
    return dev == other.dev && ino == other.ino;
  }
};

// stat(2) and lstat(2) (which does not follow a symlink at `path`).
// NOT_FOUND when there is no such file.
absl::StatusOr<FileInfo> Stat(const std::string& path);
absl::StatusOr<FileInfo> LinkStat(const std::string& path);

// fstat(2) of an open file; `name` is what an error calls it (its path).
absl::StatusOr<FileInfo> StatFd(int fd, absl::string_view name);

// open(2) of `path` with `flags` (the caller's O_CLOEXEC, O_NOFOLLOW, ...
// exactly as given) and, when it creates the file, `mode`. NOT_FOUND when
// there is no such file, ALREADY_EXISTS for O_EXCL on an existing one.
absl::StatusOr<UniqueFd> OpenFile(const std::string& path, int flags,
                                  mode_t mode = 0);

// Writes all of `data` to `fd`, retrying on EINTR. An error names `what`
// (the file's path, or "stdout").
absl::Status WriteAll(int fd, absl::string_view data, absl::string_view what);

// ftruncate(2).
absl::Status Truncate(int fd, off_t size, absl::string_view name);

// mkdir(2) of one directory. ALREADY_EXISTS when something is at `path`.
absl::Status MakeDir(const std::string& path, mode_t mode);

// unlink(2) and rmdir(2). NOT_FOUND when there is no such file.
absl::Status RemoveFile(const std::string& path);
absl::Status RemoveDir(const std::string& path);

// rename(2). NOT_FOUND when `from` does not exist.
absl::Status Rename(const std::string& from, const std::string& to);

// The names in directory `path`, without "." and "..", in the order the
// directory lists them. NOT_FOUND when there is no such directory.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path);

// access(2): whether this process may access `path` with `mode` (R_OK,
// W_OK, X_OK, F_OK), by its real ids.
bool CanAccess(const std::string& path, int mode);

// fsync(2) of a file or directory (for a directory: so that a rename or a
// new entry in it survives a crash).
absl::Status SyncPath(const std::string& path);

// The target of the symbolic link at `path` (readlink(2)).
absl::StatusOr<std::string> ReadLink(const std::string& path);

// The extended attribute `name` of the file open at `fd` (fgetxattr(2)),
// at most `max_size` bytes of it: a larger value fails (ERANGE), a missing
// one fails with ENODATA, a filesystem without them with EOPNOTSUPP.
absl::StatusOr<std::string> GetXattr(int fd, const char* name, size_t max_size);

// Sets the extended attribute `name` of the file open at `fd`
// (fsetxattr(2)); the error reads "set <name>: ...".
absl::Status SetXattr(int fd, const char* name, absl::string_view value);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_FS_H_
