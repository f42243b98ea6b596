// Helpers shared by the v1 and v2 drivers: name checks, parsers for the
// kernel's control-file formats, and walks over a cgroup directory tree.
#ifndef MYCEL_RUNTIME_CGROUP_INTERNAL_CGROUP_FILES_H_
#define MYCEL_RUNTIME_CGROUP_INTERNAL_CGROUP_FILES_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/cgroup/cgroup_fs.h"

namespace mycel::cgroup_internal {

// INVALID_ARGUMENT unless `cell` is one usable path component.
absl::Status CheckCellName(absl::string_view cell);

// INVALID_ARGUMENT unless `subtree` is a relative path of usable components
// ("mycel", "mycel/cells").
absl::Status CheckSubtree(absl::string_view subtree);

// Whether `path` exists (false on ENOENT, an error for anything else).
absl::StatusOr<bool> PathExists(const std::string& path);

// Whether `path` is an existing directory (false on ENOENT).
absl::StatusOr<bool> IsDirectory(const std::string& path);

// A file that holds one integer, such as memory.current or cpuacct.usage.
absl::StatusOr<int64_t> ReadInt64File(const std::string& path);
absl::StatusOr<uint64_t> ReadUint64File(const std::string& path);

// Parses "key value" lines (cpu.stat, memory.stat, memory.events,
// memory.oom_control, cgroup.events) into a map of raw values.
absl::StatusOr<std::map<std::string, std::string>> ParseKeyedFile(
    absl::string_view text);
absl::StatusOr<std::map<std::string, std::string>> ReadKeyedFile(
    const std::string& path);

// The value of `key` in a parsed keyed file; `fallback` when the kernel does
// not have that key, INVALID_ARGUMENT when it is not a number. `path` only
// names the file in errors.
absl::StatusOr<uint64_t> KeyedUint64(
    const std::map<std::string, std::string>& keyed, absl::string_view key,
    const std::string& path, uint64_t fallback);

// Parses cgroup.procs: one pid per line.
absl::StatusOr<std::vector<pid_t>> ParsePids(absl::string_view text);

// Names of the directories directly in `dir`, sorted.
absl::StatusOr<std::vector<std::string>> ListSubdirs(const std::string& dir);

// Appends the pids listed in <dir>/cgroup.procs and in the cgroup.procs of
// every cgroup below `dir`.
absl::Status CollectPids(const std::string& dir, std::vector<pid_t>* out);

// Removes the cgroup `dir` and every cgroup below it, children first.
absl::Status RemoveCgroupTree(CgroupFs& fs, const std::string& dir);

// Creates every missing component of `subtree` below `base` (which must
// exist) through `fs`, calling `on_created(path, parent)` for each directory
// it made or found, parents first.
absl::Status MakeSubtree(
    CgroupFs& fs, const std::string& base, absl::string_view subtree,
    const std::function<absl::Status(const std::string& path,
                                     const std::string& parent)>& on_created);

// Sends SIGKILL to each pid; a pid that already vanished is not an error.
absl::Status KillPids(const std::vector<pid_t>& pids);

// Polls `done` every few milliseconds until it returns true (OK), returns an
// error (that error), or `deadline` passes (the last result, false).
absl::StatusOr<bool> PollUntil(
    absl::Time deadline, const std::function<absl::StatusOr<bool>()>& done);

// "12, 13, 14" (at most a handful, then "...").
std::string FormatPids(const std::vector<pid_t>& pids);

// DEADLINE_EXCEEDED for KillAll: "cell C: N processes survived SIGKILL for
// T: pids".
absl::Status SurvivorsError(const std::string& cell, absl::Duration timeout,
                            const std::vector<pid_t>& left);

// A limit the kernel refused when it was written: INVALID_ARGUMENT naming
// the spec's `field` and the value when the kernel called the value
// invalid (EINVAL, ERANGE: a CPU or memory node it does not have, for
// example), so that the caller sees what to fix rather than a control
// file's path; any other error (EBUSY, EACCES) keeps its code, with the
// field prepended.
absl::Status RefusedLimit(absl::string_view field, absl::string_view value,
                          const absl::Status& write_error);

// Sorts and removes duplicates.
void SortUnique(std::vector<pid_t>* pids);

}  // namespace mycel::cgroup_internal

#endif  // MYCEL_RUNTIME_CGROUP_INTERNAL_CGROUP_FILES_H_
