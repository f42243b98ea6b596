#include "runtime/cgroup/cgroup_v1.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/cgroup/internal/cgroup_files.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel {
namespace {

using cgroup_internal::CheckCellName;
using cgroup_internal::KeyedUint64;
using cgroup_internal::PathExists;
using cgroup_internal::ReadKeyedFile;

constexpr absl::string_view kRequired[] = {"cpu", "cpuacct", "memory", "pids",
                                           "freezer"};

// cgroup v1 mount options that are not controllers.
constexpr absl::string_view kNotControllers[] = {
    "rw",     "ro",    "noprefix",       "clone_children", "xattr",
    "none",   "all",   "cpuset_v2_mode", "favordynmods",   "nsdelegate",
    "nosuid", "nodev", "noexec",         "relatime"};

constexpr uint64_t kMinShares = 2;
constexpr uint64_t kMaxShares = 262144;

// As in KillAll on v2: a task stuck in the kernel can delay freezing.
constexpr absl::Duration kFreezeWait = absl::Seconds(1);

// Undoes mountinfo's octal escapes (\040 for space and so on).
std::string UnescapeMountPath(absl::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\\' && i + 3 < in.size() && in[i + 1] >= '0' &&
        in[i + 1] <= '3' && in[i + 2] >= '0' && in[i + 2] <= '7' &&
        in[i + 3] >= '0' && in[i + 3] <= '7') {
      out.push_back(static_cast<char>(
          (in[i + 1] - '0') * 64 + (in[i + 2] - '0') * 8 + (in[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

bool IsController(absl::string_view option) {
  if (absl::StartsWith(option, "release_agent=")) return false;
  for (absl::string_view not_controller : kNotControllers) {
    if (option == not_controller) return false;
  }
  return !option.empty();
}

std::string Trimmed(absl::string_view text) {
  return std::string(absl::StripAsciiWhitespace(text));
}

// Gives `path` the CPUs and memory nodes of `parent` where it has none: a
// v1 cpuset cgroup with an empty list refuses tasks (ENOSPC).
absl::Status InheritCpuset(CgroupFs& fs, const std::string& path,
                           const std::string& parent) {
  for (absl::string_view file : {"cpuset.cpus", "cpuset.mems"}) {
    ASSIGN_OR_RETURN(std::string own, ReadFile(absl::StrCat(path, "/", file)));
    if (!Trimmed(own).empty()) continue;
    std::string parent_file = absl::StrCat(parent, "/", file);
    ASSIGN_OR_RETURN(std::string inherited, ReadFile(parent_file));
    if (Trimmed(inherited).empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          parent_file, " is empty, so there is nothing to give ", path));
    }
    RETURN_IF_ERROR(
        fs.Write(absl::StrCat(path, "/", file), Trimmed(inherited)));
  }
  return absl::OkStatus();
}

std::vector<std::string> DistinctHierarchies(const CgroupV1::Roots& roots) {
  std::vector<std::string> out;
  for (const std::string* root : {&roots.memory, &roots.cpu, &roots.cpuacct,
                                  &roots.pids, &roots.freezer, &roots.cpuset}) {
    if (root->empty()) continue;
    if (std::find(out.begin(), out.end(), *root) == out.end()) {
      out.push_back(*root);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ParseCgroupV1Mounts(
    absl::string_view mountinfo, absl::string_view under) {
  std::map<std::string, std::string> out;
  for (absl::string_view line :
       absl::StrSplit(mountinfo, '\n', absl::SkipEmpty())) {
    // <id> <parent> <maj:min> <root> <mount point> <options> [optional...]
    // - <fstype> <source> <super options>
    size_t dash = line.find(" - ");
    if (dash == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("mountinfo line without \" - \": \"", line, "\""));
    }
    std::vector<absl::string_view> head =
        absl::StrSplit(line.substr(0, dash), ' ', absl::SkipEmpty());
    std::vector<absl::string_view> tail =
        absl::StrSplit(line.substr(dash + 3), ' ', absl::SkipEmpty());
    if (head.size() < 6 || tail.size() < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed mountinfo line: \"", line, "\""));
    }
    if (tail[0] != "cgroup") continue;
    std::string mount_point = UnescapeMountPath(head[4]);
    if (mount_point != under &&
        !absl::StartsWith(mount_point, absl::StrCat(under, "/"))) {
      continue;
    }
    for (absl::string_view option : absl::StrSplit(tail[2], ',')) {
      if (IsController(option)) {
        out.emplace(std::string(option), mount_point);  // first mount wins
      }
    }
  }
  return out;
}

uint64_t CpuWeightToShares(uint64_t weight) {
  return std::clamp<uint64_t>(weight * 1024 / 100, kMinShares, kMaxShares);
}

absl::StatusOr<std::unique_ptr<CgroupV1>> CgroupV1::Open(
    const std::string& mount_root, const std::string& subtree,
    std::unique_ptr<CgroupFs> fs, const std::string& mountinfo_path) {
  RETURN_IF_ERROR(cgroup_internal::CheckSubtree(subtree));
  ASSIGN_OR_RETURN(std::string mountinfo, ReadFile(mountinfo_path));
  absl::StatusOr<std::map<std::string, std::string>> mounts =
      ParseCgroupV1Mounts(mountinfo, mount_root);
  if (!mounts.ok()) return Annotate(mounts.status(), mountinfo_path);
  for (absl::string_view name : kRequired) {
    if (mounts->count(std::string(name)) == 0) {
      std::vector<std::string> found;
      for (const auto& [controller, path] : *mounts)
        found.push_back(controller);
      return absl::FailedPreconditionError(absl::StrCat(
          "cgroup v1 controller ", name, " is not mounted below ", mount_root,
          " (", mountinfo_path, " lists: ", absl::StrJoin(found, " "), ")"));
    }
  }
  auto root_of = [&](const std::string& controller) -> std::string {
    auto it = mounts->find(controller);
    if (it == mounts->end()) return "";
    return absl::StrCat(it->second, "/", subtree);
  };
  Roots roots;
  roots.cpu = root_of("cpu");
  roots.cpuacct = root_of("cpuacct");
  roots.memory = root_of("memory");
  roots.pids = root_of("pids");
  roots.freezer = root_of("freezer");
  roots.cpuset = root_of("cpuset");

  std::string cpuset_mount =
      mounts->count("cpuset") != 0 ? mounts->at("cpuset") : "";
  std::set<std::string> prepared;
  for (absl::string_view controller :
       {"memory", "cpu", "cpuacct", "pids", "freezer", "cpuset"}) {
    auto it = mounts->find(std::string(controller));
    if (it == mounts->end() || !prepared.insert(it->second).second) continue;
    const std::string& mount = it->second;
    bool is_cpuset = mount == cpuset_mount;
    RETURN_IF_ERROR(cgroup_internal::MakeSubtree(
        *fs, mount, subtree,
        [&fs, is_cpuset](const std::string& path, const std::string& parent) {
          if (!is_cpuset) return absl::OkStatus();
          return InheritCpuset(*fs, path, parent);
        }));
  }
  // A new v1 cpuset cgroup has no CPUs (and refuses tasks) unless its
  // parent has clone_children set; then it starts with the parent's. That
  // saves a cell two reads and two writes; without it (the write failed),
  // Apply copies them.
  bool cpuset_cloned = false;
  if (!roots.cpuset.empty()) {
    absl::Status s = fs->Write(roots.cpuset + "/cgroup.clone_children", "1");
    cpuset_cloned = s.ok();
    if (!s.ok()) {
      log::Warn("cells will copy their cpuset by hand", {{"error", s}});
    }
  }
  auto driver = std::make_unique<CgroupV1>(std::move(roots), std::move(fs));
  driver->cpuset_cloned_ = cpuset_cloned;
  return driver;
}

CgroupV1::CgroupV1(Roots roots, std::unique_ptr<CgroupFs> fs)
    : roots_(std::move(roots)),
      hierarchies_(DistinctHierarchies(roots_)),
      fs_(std::move(fs)) {}

std::string CgroupV1::CellDir(absl::string_view controller,
                              const std::string& cell) const {
  const std::string* root = nullptr;
  if (controller == "cpu") root = &roots_.cpu;
  if (controller == "cpuacct") root = &roots_.cpuacct;
  if (controller == "memory") root = &roots_.memory;
  if (controller == "pids") root = &roots_.pids;
  if (controller == "freezer") root = &roots_.freezer;
  if (controller == "cpuset") root = &roots_.cpuset;
  if (root == nullptr || root->empty()) return "";
  return absl::StrCat(*root, "/", cell);
}

absl::StatusOr<std::vector<std::string>> CgroupV1::ExistingDirs(
    const std::string& cell) {
  RETURN_IF_ERROR(CheckCellName(cell));
  std::vector<std::string> dirs;
  for (const std::string& root : hierarchies_) {
    std::string dir = absl::StrCat(root, "/", cell);
    ASSIGN_OR_RETURN(bool exists, cgroup_internal::IsDirectory(dir));
    if (exists) dirs.push_back(std::move(dir));
  }
  return dirs;
}

absl::Status CgroupV1::RequireCell(const std::string& cell) {
  RETURN_IF_ERROR(CheckCellName(cell));
  for (const std::string& root : hierarchies_) {
    std::string dir = absl::StrCat(root, "/", cell);
    ASSIGN_OR_RETURN(bool exists, cgroup_internal::IsDirectory(dir));
    if (!exists) {
      return absl::NotFoundError(
          absl::StrCat("cell ", cell, ": no cgroup at ", dir));
    }
  }
  return absl::OkStatus();
}

absl::Status CgroupV1::ApplyMemory(const std::string& dir,
                                   const CgroupLimits& limits, bool fresh) {
  if (fresh && !limits.memory_max.has_value() &&
      !limits.memory_swap_max.has_value() && !limits.memory_high.has_value()) {
    return absl::OkStatus();
  }
  std::string limit_path = dir + "/memory.limit_in_bytes";
  std::string memsw_path = dir + "/memory.memsw.limit_in_bytes";
  // A fresh memsw limit is unlimited, which any memory limit fits under.
  const bool touch_memsw = !fresh || limits.memory_swap_max.has_value();
  bool has_memsw = false;
  if (touch_memsw) {
    ASSIGN_OR_RETURN(has_memsw, PathExists(memsw_path));
  }
  std::string limit =
      limits.memory_max.has_value() ? absl::StrCat(*limits.memory_max) : "-1";

  if (limits.memory_swap_max.has_value()) {
    if (!limits.memory_max.has_value()) {
      return absl::InvalidArgumentError(
          "memory_swap_max: cgroup v1 limits memory and swap together "
          "(memory.memsw.limit_in_bytes = memory_max + memory_swap_max), so "
          "it needs memory_max");
    }
    if (!has_memsw) {
      return absl::FailedPreconditionError(
          absl::StrCat("memory_swap_max: ", memsw_path,
                       " does not exist; the kernel accounts swap only with "
                       "CONFIG_MEMCG_SWAP and swapaccount=1"));
    }
  }

  if (!has_memsw) {
    if (!fresh || limits.memory_max.has_value()) {
      RETURN_IF_ERROR(fs_->Write(limit_path, limit));
    }
  } else {
    // The kernel keeps memsw >= limit at every step, so the order of the
    // two writes depends on whether the limit goes up or down.
    std::string memsw = "-1";
    int64_t sum = 0;
    if (limits.memory_swap_max.has_value() &&
        !__builtin_add_overflow(*limits.memory_max, *limits.memory_swap_max,
                                &sum)) {
      memsw = absl::StrCat(sum);
    }
    ASSIGN_OR_RETURN(int64_t current,
                     cgroup_internal::ReadInt64File(limit_path));
    int64_t wanted =
        limits.memory_max.value_or(std::numeric_limits<int64_t>::max());
    if (memsw == "-1" || wanted > current) {
      RETURN_IF_ERROR(fs_->Write(memsw_path, memsw));
      RETURN_IF_ERROR(fs_->Write(limit_path, limit));
    } else {
      RETURN_IF_ERROR(fs_->Write(limit_path, limit));
      RETURN_IF_ERROR(fs_->Write(memsw_path, memsw));
    }
  }

  if (fresh && !limits.memory_high.has_value()) return absl::OkStatus();
  return fs_->Write(dir + "/memory.soft_limit_in_bytes",
                    limits.memory_high.has_value()
                        ? absl::StrCat(*limits.memory_high)
                        : "-1");
}

absl::Status CgroupV1::Apply(const std::string& cell,
                             const CgroupLimits& limits, bool fresh) {
  // cpuset first: until it has CPUs and memory nodes no task can join.
  if (!roots_.cpuset.empty()) {
    std::string dir = CellDir("cpuset", cell);
    struct CpusetFile {
      absl::string_view file, field;
      const std::string& wanted;
    };
    for (const CpusetFile& c :
         {CpusetFile{"cpuset.cpus", "cpuset_cpus", limits.cpuset_cpus},
          CpusetFile{"cpuset.mems", "cpuset_mems", limits.cpuset_mems}}) {
      std::string value = c.wanted;
      if (value.empty() && fresh && cpuset_cloned_) continue;
      if (value.empty()) {
        ASSIGN_OR_RETURN(std::string inherited,
                         ReadFile(absl::StrCat(roots_.cpuset, "/", c.file)));
        value = Trimmed(inherited);
      }
      absl::Status s = fs_->Write(absl::StrCat(dir, "/", c.file), value);
      if (!s.ok() && !c.wanted.empty()) {
        return cgroup_internal::RefusedLimit(c.field, value, s);
      }
      RETURN_IF_ERROR(s);
    }
  } else if (!limits.cpuset_cpus.empty() || !limits.cpuset_mems.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(limits.cpuset_cpus.empty() ? "cpuset_mems" : "cpuset_cpus",
                     ": the cpuset controller is not mounted on this host"));
  }

  // A fresh cell's period is already the kernel's default, kCpuPeriodUsec.
  std::string cpu = CellDir("cpu", cell);
  if (!fresh) {
    RETURN_IF_ERROR(
        fs_->Write(cpu + "/cpu.cfs_period_us", absl::StrCat(kCpuPeriodUsec)));
  }
  if (!fresh || limits.cpu_max.has_value()) {
    RETURN_IF_ERROR(fs_->Write(cpu + "/cpu.cfs_quota_us",
                               limits.cpu_max.has_value()
                                   ? absl::StrCat(CpuQuotaUsec(*limits.cpu_max))
                                   : "-1"));
  }
  if (!fresh || limits.cpu_weight.has_value()) {
    RETURN_IF_ERROR(fs_->Write(
        cpu + "/cpu.shares",
        absl::StrCat(CpuWeightToShares(limits.cpu_weight.value_or(100)))));
  }

  RETURN_IF_ERROR(ApplyMemory(CellDir("memory", cell), limits, fresh));

  if (fresh && !limits.pids_max.has_value()) return absl::OkStatus();
  return fs_->Write(
      CellDir("pids", cell) + "/pids.max",
      limits.pids_max.has_value() ? absl::StrCat(*limits.pids_max) : "max");
}

absl::Status CgroupV1::Create(const std::string& cell,
                              const CgroupLimits& limits) {
  RETURN_IF_ERROR(CheckCellName(cell));
  std::vector<std::string> created;
  absl::Status status;
  for (const std::string& root : hierarchies_) {
    std::string dir = absl::StrCat(root, "/", cell);
    status = fs_->MakeDir(dir);
    if (absl::IsAlreadyExists(status)) {
      status = absl::AlreadyExistsError(
          absl::StrCat("cell ", cell, " already exists (", dir, ")"));
    }
    if (!status.ok()) break;
    created.push_back(std::move(dir));
  }
  if (status.ok()) status = Apply(cell, limits, /*fresh=*/true);
  if (status.ok()) return absl::OkStatus();
  // Only what this call created: a cell that already exists stays whole.
  for (auto it = created.rbegin(); it != created.rend(); ++it) {
    absl::Status removed = fs_->RemoveDir(*it);
    if (!removed.ok()) {
      log::Warn("cannot remove a half-created cell",
                {{"cell", cell}, {"error", removed}});
    }
  }
  return Annotate(status, absl::StrCat("create cell ", cell));
}

absl::Status CgroupV1::Update(const std::string& cell,
                              const CgroupLimits& limits) {
  RETURN_IF_ERROR(RequireCell(cell));
  return Annotate(Apply(cell, limits, /*fresh=*/false),
                  absl::StrCat("update cell ", cell));
}

absl::Status CgroupV1::ApplyToNew(const std::string& cell,
                                  const CgroupLimits& limits) {
  RETURN_IF_ERROR(CheckCellName(cell));
  return Annotate(Apply(cell, limits, /*fresh=*/true),
                  absl::StrCat("limit cell ", cell));
}

absl::StatusOr<CgroupJoin> CgroupV1::OpenJoin(const std::string& cell) {
  RETURN_IF_ERROR(CheckCellName(cell));
  CgroupJoin join;
  for (const std::string& root : hierarchies_) {
    std::string procs = absl::StrCat(root, "/", cell, "/cgroup.procs");
    UniqueFd fd(open(procs.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd && errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("cell ", cell, ": no cgroup at ", root, "/", cell));
    }
    if (!fd) return PosixError(absl::StrCat("open ", procs), errno);
    join.procs_fds.push_back(std::move(fd));
  }
  return join;
}

absl::Status CgroupV1::AddProcess(const std::string& cell, pid_t pid) {
  RETURN_IF_ERROR(RequireCell(cell));
  for (const std::string& root : hierarchies_) {
    RETURN_IF_ERROR(fs_->Write(absl::StrCat(root, "/", cell, "/cgroup.procs"),
                               absl::StrCat(pid)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<pid_t>> CgroupV1::Pids(const std::string& cell) {
  // The union over hierarchies: a process that joined only some of them
  // (a failed AddProcess) still belongs to the cell.
  RETURN_IF_ERROR(CheckCellName(cell));
  std::vector<pid_t> pids;
  bool found = false;
  for (const std::string& root : hierarchies_) {
    absl::Status s =
        cgroup_internal::CollectPids(absl::StrCat(root, "/", cell), &pids);
    if (absl::IsNotFound(s)) continue;
    RETURN_IF_ERROR(s);
    found = true;
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat("cell ", cell, " does not exist"));
  }
  cgroup_internal::SortUnique(&pids);
  return pids;
}

absl::StatusOr<std::string> CgroupV1::FreezerState(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string state, ReadFile(dir + "/freezer.state"));
  return Trimmed(state);
}

absl::Status CgroupV1::KillAll(const std::string& cell) {
  ASSIGN_OR_RETURN(std::vector<pid_t> pids, Pids(cell));
  if (pids.empty()) return absl::OkStatus();
  // First without the freezer: freezing and thawing flips a kernel static
  // key when no other cgroup is frozen, which patches kernel text on every
  // CPU and costs milliseconds to tens of milliseconds per cell. A cell
  // whose processes are already dying (its init was killed) or that does
  // not fork empties after one SIGKILL pass; only one that keeps forking
  // needs the freezer's race-free pass below.
  RETURN_IF_ERROR(cgroup_internal::KillPids(pids));
  // A task leaves the cgroups of every hierarchy at once when it exits, so
  // while they die, watching the first hierarchy is enough; the union over
  // all of them is read once more when it looks empty.
  const std::string first = absl::StrCat(hierarchies_.front(), "/", cell);
  ASSIGN_OR_RETURN(
      bool drained,
      cgroup_internal::PollUntil(
          absl::Now() + absl::Milliseconds(50), [&]() -> absl::StatusOr<bool> {
            std::vector<pid_t> left;
            absl::Status s = cgroup_internal::CollectPids(first, &left);
            if (!s.ok() && !absl::IsNotFound(s)) return s;
            if (!left.empty()) return false;
            ASSIGN_OR_RETURN(left, Pids(cell));
            return left.empty();
          }));
  if (drained) return absl::OkStatus();
  absl::Time deadline = absl::Now() + kill_timeout_;
  std::string freezer = CellDir("freezer", cell);
  ASSIGN_OR_RETURN(bool has_freezer, cgroup_internal::IsDirectory(freezer));
  for (;;) {
    absl::Status killed;
    if (has_freezer) {
      // Frozen tasks cannot fork, so one pass over the cell sees them all.
      // v1 delivers the SIGKILL once the cell thaws.
      killed = fs_->Write(freezer + "/freezer.state", "FROZEN");
      if (killed.ok()) {
        absl::StatusOr<bool> frozen = cgroup_internal::PollUntil(
            std::min(deadline, absl::Now() + kFreezeWait),
            [&]() -> absl::StatusOr<bool> {
              ASSIGN_OR_RETURN(std::string state, FreezerState(freezer));
              return state == "FROZEN";
            });
        killed = frozen.status();
      }
    }
    if (killed.ok()) {
      absl::StatusOr<std::vector<pid_t>> now = Pids(cell);
      killed = now.ok() ? cgroup_internal::KillPids(*now) : now.status();
    }
    if (has_freezer) {
      // Thaw even after an error: a cell left frozen would hang its workload.
      absl::Status thawed = fs_->Write(freezer + "/freezer.state", "THAWED");
      if (killed.ok()) killed = thawed;
    }
    RETURN_IF_ERROR(killed);
    ASSIGN_OR_RETURN(
        bool empty,
        cgroup_internal::PollUntil(
            std::min(deadline, absl::Now() + absl::Milliseconds(200)),
            [&]() -> absl::StatusOr<bool> {
              ASSIGN_OR_RETURN(std::vector<pid_t> left, Pids(cell));
              return left.empty();
            }));
    if (empty) return absl::OkStatus();
    if (absl::Now() >= deadline) break;
  }
  ASSIGN_OR_RETURN(std::vector<pid_t> left, Pids(cell));
  return cgroup_internal::SurvivorsError(cell, kill_timeout_, left);
}

absl::Status CgroupV1::Destroy(const std::string& cell) {
  RETURN_IF_ERROR(CheckCellName(cell));
  // The usual case first: an empty leaf in every hierarchy, one rmdir each.
  // Anything else (processes left, child cgroups, a failure) is left to
  // the careful path below, which names what is in the way.
  bool removed_any = false, missing_all = true, fast = true;
  for (const std::string& root : hierarchies_) {
    absl::Status s = fs_->RemoveDir(absl::StrCat(root, "/", cell));
    removed_any |= s.ok();
    missing_all &= absl::IsNotFound(s);
    if (!s.ok() && !absl::IsNotFound(s)) fast = false;
  }
  if (fast && removed_any) return absl::OkStatus();
  if (missing_all) {
    return absl::NotFoundError(absl::StrCat("cell ", cell, " does not exist"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> dirs, ExistingDirs(cell));
  if (dirs.empty()) {
    return absl::NotFoundError(absl::StrCat("cell ", cell, " does not exist"));
  }
  ASSIGN_OR_RETURN(std::vector<pid_t> pids, Pids(cell));
  if (!pids.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cell ", cell, " still holds ", pids.size(), " processes (pids ",
        cgroup_internal::FormatPids(pids), "); KillAll it before Destroy"));
  }
  // Try every hierarchy so one failure does not strand the others.
  absl::Status first;
  for (const std::string& dir : dirs) {
    absl::Status removed = cgroup_internal::RemoveCgroupTree(*fs_, dir);
    if (first.ok()) first = removed;
  }
  return Annotate(first, absl::StrCat("destroy cell ", cell));
}

absl::StatusOr<uint64_t> CgroupV1::OomKills(const std::string& cell) {
  RETURN_IF_ERROR(CheckCellName(cell));
  std::string oom_path = CellDir("memory", cell) + "/memory.oom_control";
  ASSIGN_OR_RETURN(auto oom, ReadKeyedFile(oom_path));
  return KeyedUint64(oom, "oom_kill", oom_path, 0);
}

absl::StatusOr<CgroupStats> CgroupV1::Stats(const std::string& cell) {
  RETURN_IF_ERROR(RequireCell(cell));
  CgroupStats stats;
  ASSIGN_OR_RETURN(uint64_t usage_ns,
                   cgroup_internal::ReadUint64File(CellDir("cpuacct", cell) +
                                                   "/cpuacct.usage"));
  stats.cpu_usage_usec = usage_ns / 1000;

  std::string memory = CellDir("memory", cell);
  ASSIGN_OR_RETURN(
      stats.memory_current,
      cgroup_internal::ReadInt64File(memory + "/memory.usage_in_bytes"));
  ASSIGN_OR_RETURN(
      stats.memory_peak,
      cgroup_internal::ReadInt64File(memory + "/memory.max_usage_in_bytes"));
  // oom_kill appeared in memory.oom_control in Linux 4.13.
  std::string oom_path = memory + "/memory.oom_control";
  ASSIGN_OR_RETURN(auto oom, ReadKeyedFile(oom_path));
  ASSIGN_OR_RETURN(stats.oom_kills, KeyedUint64(oom, "oom_kill", oom_path, 0));
  // The total_ lines include cgroups below the cell, like v2's memory.stat.
  std::string stat_path = memory + "/memory.stat";
  ASSIGN_OR_RETURN(auto mem, ReadKeyedFile(stat_path));
  ASSIGN_OR_RETURN(uint64_t rss, KeyedUint64(mem, "total_rss", stat_path, 0));
  ASSIGN_OR_RETURN(uint64_t cache,
                   KeyedUint64(mem, "total_cache", stat_path, 0));
  stats.memory_anon = static_cast<int64_t>(rss);
  stats.memory_file = static_cast<int64_t>(cache);

  ASSIGN_OR_RETURN(
      stats.pids_current,
      cgroup_internal::ReadInt64File(CellDir("pids", cell) + "/pids.current"));
  return stats;
}

absl::StatusOr<bool> CgroupV1::Exists(const std::string& cell) {
  ASSIGN_OR_RETURN(std::vector<std::string> dirs, ExistingDirs(cell));
  return !dirs.empty();
}

absl::StatusOr<std::vector<std::string>> CgroupV1::List() {
  std::set<std::string> names;
  for (const std::string& root : hierarchies_) {
    ASSIGN_OR_RETURN(std::vector<std::string> cells,
                     cgroup_internal::ListSubdirs(root));
    names.insert(cells.begin(), cells.end());
  }
  return std::vector<std::string>(names.begin(), names.end());
}

absl::Status CgroupV1::Rename(const std::string& from, const std::string& to) {
  RETURN_IF_ERROR(CheckCellName(from));
  RETURN_IF_ERROR(CheckCellName(to));
  // rename(2) within one parent is the one move a v1 hierarchy allows. A
  // hierarchy that lacks the cell is skipped (see Destroy); one failure
  // undoes the renames before it.
  std::vector<std::string> renamed;
  absl::Status status;
  for (const std::string& root : hierarchies_) {
    std::string old_dir = absl::StrCat(root, "/", from);
    std::string new_dir = absl::StrCat(root, "/", to);
    absl::Status s = fs_->Rename(old_dir, new_dir);
    if (s.ok()) {
      renamed.push_back(root);
      continue;
    }
    if (absl::IsNotFound(s)) continue;
    status = absl::IsAlreadyExists(s)
                 ? absl::AlreadyExistsError(absl::StrCat(
                       "cell ", to, " already exists (", new_dir, ")"))
                 : s;
    break;
  }
  if (status.ok() && renamed.empty()) {
    return absl::NotFoundError(absl::StrCat("cell ", from, " does not exist"));
  }
  if (status.ok()) return status;
  for (const std::string& root : renamed) {
    absl::Status undone =
        fs_->Rename(absl::StrCat(root, "/", to), absl::StrCat(root, "/", from));
    if (!undone.ok()) {
      log::Warn("cannot undo a cgroup rename", {{"error", undone}});
    }
  }
  return status;
}

}  // namespace mycel
