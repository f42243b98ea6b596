// Small filesystem helpers over POSIX calls, returning Status.
#ifndef MYCEL_RUNTIME_FS_H_
#define MYCEL_RUNTIME_FS_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

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

// fsync(2) of a file or directory (for a directory: so that a rename or a
// new entry in it survives a crash).
absl::Status SyncPath(const std::string& path);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_FS_H_
