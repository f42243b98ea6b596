#include "runtime/cgroup/internal/cgroup_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel::cgroup_internal {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(5);

struct DirCloser {
  void operator()(DIR* dir) const { closedir(dir); }
};

absl::Status CheckComponent(absl::string_view what, absl::string_view name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != absl::string_view::npos ||
      name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", name,
                     "\" is not a usable cgroup name (empty, \".\", \"..\", "
                     "or contains '/')"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCellName(absl::string_view cell) {
  return CheckComponent("cell name", cell);
}

absl::Status CheckSubtree(absl::string_view subtree) {
  if (subtree.empty() || subtree.front() == '/' || subtree.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("cgroup subtree \"", subtree,
                     "\" must be a relative path such as \"mycel\""));
  }
  for (absl::string_view part : absl::StrSplit(subtree, '/')) {
    RETURN_IF_ERROR(CheckComponent("cgroup subtree component", part));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> PathExists(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return PosixError(absl::StrCat("stat ", path), errno);
}

absl::StatusOr<bool> IsDirectory(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  if (errno == ENOENT) return false;
  return PosixError(absl::StrCat("stat ", path), errno);
}

absl::StatusOr<int64_t> ReadInt64File(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected an integer, got \"",
                     absl::StripAsciiWhitespace(text), "\""));
  }
  return value;
}

absl::StatusOr<uint64_t> ReadUint64File(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected an unsigned integer, got \"",
                     absl::StripAsciiWhitespace(text), "\""));
  }
  return value;
}

absl::StatusOr<std::map<std::string, std::string>> ParseKeyedFile(
    absl::string_view text) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> cols =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (cols.empty()) continue;
    if (cols.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected \"key value\", got \"", line, "\""));
    }
    out[std::string(cols[0])] = std::string(cols[1]);
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ReadKeyedFile(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  absl::StatusOr<std::map<std::string, std::string>> keyed =
      ParseKeyedFile(text);
  if (!keyed.ok()) return Annotate(keyed.status(), path);
  return keyed;
}

absl::StatusOr<uint64_t> KeyedUint64(
    const std::map<std::string, std::string>& keyed, absl::string_view key,
    const std::string& path, uint64_t fallback) {
  auto it = keyed.find(std::string(key));
  if (it == keyed.end()) return fallback;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", key, " is not an unsigned integer: \"", it->second, "\""));
  }
  return value;
}

absl::StatusOr<std::vector<pid_t>> ParsePids(absl::string_view text) {
  std::vector<pid_t> pids;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(line, &pid) || pid <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a pid, got \"", line, "\""));
    }
    pids.push_back(pid);
  }
  return pids;
}

absl::StatusOr<std::vector<std::string>> ListSubdirs(const std::string& dir) {
  std::unique_ptr<DIR, DirCloser> d(opendir(dir.c_str()));
  if (d == nullptr) return PosixError(absl::StrCat("opendir ", dir), errno);
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    struct dirent* e = readdir(d.get());
    if (e == nullptr) {
      if (errno != 0) return PosixError(absl::StrCat("readdir ", dir), errno);
      break;
    }
    absl::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      ASSIGN_OR_RETURN(is_dir, IsDirectory(absl::StrCat(dir, "/", name)));
    }
    if (is_dir) names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status CollectPids(const std::string& dir, std::vector<pid_t>* out) {
  std::string procs = absl::StrCat(dir, "/cgroup.procs");
  ASSIGN_OR_RETURN(std::string text, ReadFile(procs));
  absl::StatusOr<std::vector<pid_t>> pids = ParsePids(text);
  if (!pids.ok()) return Annotate(pids.status(), procs);
  out->insert(out->end(), pids->begin(), pids->end());
  // A directory's link count is 2 plus its subdirectories (cgroupfs keeps
  // it so too): a leaf, the usual cell, needs no listing.
  struct stat st;
  if (stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_nlink == 2) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<std::string> children, ListSubdirs(dir));
  for (const std::string& child : children) {
    // A child cgroup removed since the listing had no processes left.
    absl::Status status = CollectPids(absl::StrCat(dir, "/", child), out);
    if (!status.ok() && !absl::IsNotFound(status)) return status;
  }
  return absl::OkStatus();
}

absl::Status RemoveCgroupTree(CgroupFs& fs, const std::string& dir) {
  // A leaf without processes, the usual case, goes in one call.
  if (fs.RemoveDir(dir).ok()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<std::string> children, ListSubdirs(dir));
  for (const std::string& child : children) {
    RETURN_IF_ERROR(RemoveCgroupTree(fs, absl::StrCat(dir, "/", child)));
  }
  return fs.RemoveDir(dir);
}

absl::Status MakeSubtree(
    CgroupFs& fs, const std::string& base, absl::string_view subtree,
    const std::function<absl::Status(const std::string& path,
                                     const std::string& parent)>& on_created) {
  std::string parent = base;
  for (absl::string_view part : absl::StrSplit(subtree, '/')) {
    std::string path = absl::StrCat(parent, "/", part);
    absl::Status made = fs.MakeDir(path);
    if (!made.ok() && !absl::IsAlreadyExists(made)) return made;
    RETURN_IF_ERROR(on_created(path, parent));
    parent = std::move(path);
  }
  return absl::OkStatus();
}

absl::Status KillPids(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    if (kill(pid, SIGKILL) != 0 && errno != ESRCH) {
      return PosixError(absl::StrCat("kill ", pid, " SIGKILL"), errno);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> PollUntil(
    absl::Time deadline, const std::function<absl::StatusOr<bool>()>& done) {
  // Most waits end within a millisecond (a killed cell's processes exit
  // in a few hundred microseconds): start polling fast and back off gently,
  // so that the end is seen soon after it happens.
  absl::Duration interval = absl::Microseconds(50);
  for (;;) {
    ASSIGN_OR_RETURN(bool ok, done());
    if (ok) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(interval);
    interval = std::min(interval * 3 / 2, kPollInterval);
  }
}

std::string FormatPids(const std::vector<pid_t>& pids) {
  constexpr size_t kShown = 8;
  std::vector<pid_t> shown(pids.begin(),
                           pids.begin() + std::min(pids.size(), kShown));
  std::string out = absl::StrJoin(shown, ", ");
  if (pids.size() > kShown) absl::StrAppend(&out, ", ...");
  return out;
}

absl::Status SurvivorsError(const std::string& cell, absl::Duration timeout,
                            const std::vector<pid_t>& left) {
  return absl::DeadlineExceededError(absl::StrCat(
      "cell ", cell, ": ", left.size(), " processes survived SIGKILL for ",
      absl::FormatDuration(timeout), ": ", FormatPids(left)));
}

void SortUnique(std::vector<pid_t>* pids) {
  std::sort(pids->begin(), pids->end());
  pids->erase(std::unique(pids->begin(), pids->end()), pids->end());
}

absl::Status RefusedLimit(absl::string_view field, absl::string_view value,
                          const absl::Status& write_error) {
  if (write_error.ok()) return write_error;
  if (absl::IsInvalidArgument(write_error) || absl::IsOutOfRange(write_error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": the kernel refused \"", value, "\" (",
                     write_error.message(), ")"));
  }
  return Annotate(write_error, field);
}

}  // namespace mycel::cgroup_internal
