#include "runtime/cgroup/cgroup_v2.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
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

// Enabled for cells when the kernel offers them, in this order. The first
// three are required.
constexpr absl::string_view kRequired[] = {"cpu", "memory", "pids"};
constexpr absl::string_view kWanted[] = {"cpu", "cpuset", "io", "memory",
                                         "pids"};

// How long one freeze may take before KillAll signals anyway: a task stuck
// in the kernel (D state) can delay freezing indefinitely.
constexpr absl::Duration kFreezeWait = absl::Seconds(1);

absl::StatusOr<std::set<std::string>> ReadControllerList(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::set<std::string> out;
  for (absl::string_view name :
       absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    out.emplace(name);
  }
  return out;
}

// Passes the wanted controllers that `dir` has on to its children.
absl::Status EnableControllers(CgroupFs& fs, const std::string& dir) {
  ASSIGN_OR_RETURN(std::set<std::string> available,
                   ReadControllerList(dir + "/cgroup.controllers"));
  ASSIGN_OR_RETURN(std::set<std::string> enabled,
                   ReadControllerList(dir + "/cgroup.subtree_control"));
  std::vector<std::string> add;
  for (absl::string_view name : kWanted) {
    std::string n(name);
    if (available.count(n) != 0 && enabled.count(n) == 0) {
      add.push_back(absl::StrCat("+", n));
    }
  }
  if (add.empty()) return absl::OkStatus();
  absl::Status status =
      fs.Write(dir + "/cgroup.subtree_control", absl::StrJoin(add, " "));
  if (absl::IsUnavailable(status)) {
    // EBUSY: the "no internal processes" rule. Say which processes.
    absl::StatusOr<std::string> procs = ReadFile(dir + "/cgroup.procs");
    if (procs.ok() && !absl::StripAsciiWhitespace(*procs).empty()) {
      return Annotate(
          status,
          absl::StrCat(
              dir, " holds processes (",
              absl::StrJoin(absl::StrSplit(*procs, '\n', absl::SkipEmpty()),
                            ", "),
              "); cgroup v2 lets only a cgroup without processes "
              "pass controllers to its children, so move them to a "
              "leaf cgroup first"));
    }
  }
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CgroupV2>> CgroupV2::Open(
    const std::string& mount_root, const std::string& subtree,
    std::unique_ptr<CgroupFs> fs) {
  RETURN_IF_ERROR(cgroup_internal::CheckSubtree(subtree));
  ASSIGN_OR_RETURN(std::set<std::string> available,
                   ReadControllerList(mount_root + "/cgroup.controllers"));
  for (absl::string_view name : kRequired) {
    if (available.count(std::string(name)) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cgroup v2 at ", mount_root, " lacks the ", name,
          " controller (available: ", absl::StrJoin(available, " "), ")"));
    }
  }
  RETURN_IF_ERROR(cgroup_internal::MakeSubtree(
      *fs, mount_root, subtree,
      [&fs](const std::string& path, const std::string& parent) {
        return EnableControllers(*fs, parent);
      }));
  std::string root = absl::StrCat(mount_root, "/", subtree);
  RETURN_IF_ERROR(EnableControllers(*fs, root));
  return std::make_unique<CgroupV2>(std::move(root), std::move(fs));
}

CgroupV2::CgroupV2(std::string root, std::unique_ptr<CgroupFs> fs)
    : root_(std::move(root)), fs_(std::move(fs)) {}

std::string CgroupV2::CellDir(const std::string& cell) const {
  return absl::StrCat(root_, "/", cell);
}

absl::StatusOr<std::string> CgroupV2::ExistingCell(const std::string& cell) {
  RETURN_IF_ERROR(CheckCellName(cell));
  std::string dir = CellDir(cell);
  ASSIGN_OR_RETURN(bool exists, cgroup_internal::IsDirectory(dir));
  if (!exists) {
    return absl::NotFoundError(
        absl::StrCat("cell ", cell, ": no cgroup at ", dir));
  }
  return dir;
}

absl::Status CgroupV2::WriteOptional(const std::string& dir,
                                     absl::string_view file,
                                     absl::string_view value,
                                     absl::string_view field, bool needed,
                                     absl::string_view why_absent) {
  std::string path = absl::StrCat(dir, "/", file);
  ASSIGN_OR_RETURN(bool exists, PathExists(path));
  if (exists) {
    absl::Status s = fs_->Write(path, value);
    if (!s.ok() && needed)
      return cgroup_internal::RefusedLimit(field, value, s);
    return s;
  }
  if (!needed) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(field, ": ", path, " does not exist (", why_absent, ")"));
}

absl::Status CgroupV2::Apply(const std::string& dir, const CgroupLimits& limits,
                             bool fresh) {
  constexpr absl::string_view kNoCpuset =
      "the cpuset controller is not enabled for mycel's cgroup";
  // An empty list ("\n", since the kernel ignores a zero-length write)
  // makes the cell inherit its parent's CPUs and memory nodes, as a new
  // cgroup does.
  struct CpusetFile {
    absl::string_view file, field;
    const std::string& value;
  };
  for (const CpusetFile& c :
       {CpusetFile{"cpuset.cpus", "cpuset_cpus", limits.cpuset_cpus},
        CpusetFile{"cpuset.mems", "cpuset_mems", limits.cpuset_mems}}) {
    if (fresh && c.value.empty()) continue;
    RETURN_IF_ERROR(WriteOptional(dir, c.file, c.value.empty() ? "\n" : c.value,
                                  c.field, !c.value.empty(), kNoCpuset));
  }

  if (!fresh || limits.cpu_max.has_value()) {
    RETURN_IF_ERROR(fs_->Write(
        dir + "/cpu.max",
        absl::StrCat(limits.cpu_max.has_value()
                         ? absl::StrCat(CpuQuotaUsec(*limits.cpu_max))
                         : std::string("max"),
                     " ", kCpuPeriodUsec)));
  }
  if (!fresh || limits.cpu_weight.has_value()) {
    RETURN_IF_ERROR(fs_->Write(dir + "/cpu.weight",
                               absl::StrCat(limits.cpu_weight.value_or(100))));
  }

  auto bytes_or_max = [](const std::optional<int64_t>& v) {
    return v.has_value() ? absl::StrCat(*v) : std::string("max");
  };
  if (!fresh || limits.memory_max.has_value()) {
    RETURN_IF_ERROR(
        fs_->Write(dir + "/memory.max", bytes_or_max(limits.memory_max)));
  }
  if (!fresh || limits.memory_high.has_value()) {
    RETURN_IF_ERROR(
        fs_->Write(dir + "/memory.high", bytes_or_max(limits.memory_high)));
  }
  if (!fresh || limits.memory_swap_max.has_value()) {
    RETURN_IF_ERROR(WriteOptional(
        dir, "memory.swap.max", bytes_or_max(limits.memory_swap_max),
        "memory_swap_max", limits.memory_swap_max.has_value(),
        "the kernel has no swap accounting (CONFIG_MEMCG_SWAP, "
        "swapaccount=1)"));
  }

  if (fresh && !limits.pids_max.has_value()) return absl::OkStatus();
  return fs_->Write(dir + "/pids.max", bytes_or_max(limits.pids_max));
}

absl::Status CgroupV2::Create(const std::string& cell,
                              const CgroupLimits& limits) {
  RETURN_IF_ERROR(CheckCellName(cell));
  std::string dir = CellDir(cell);
  absl::Status made = fs_->MakeDir(dir);
  if (absl::IsAlreadyExists(made)) {
    return absl::AlreadyExistsError(
        absl::StrCat("cell ", cell, " already exists (", dir, ")"));
  }
  RETURN_IF_ERROR(made);
  absl::Status applied = Apply(dir, limits, /*fresh=*/true);
  if (!applied.ok()) {
    absl::Status removed = fs_->RemoveDir(dir);
    if (!removed.ok()) {
      log::Warn("cannot remove a half-created cell",
                {{"cell", cell}, {"error", removed}});
    }
    return Annotate(applied, absl::StrCat("create cell ", cell));
  }
  return absl::OkStatus();
}

absl::Status CgroupV2::Update(const std::string& cell,
                              const CgroupLimits& limits) {
  ASSIGN_OR_RETURN(std::string dir, ExistingCell(cell));
  return Annotate(Apply(dir, limits, /*fresh=*/false),
                  absl::StrCat("update cell ", cell));
}

absl::Status CgroupV2::ApplyToNew(const std::string& cell,
                                  const CgroupLimits& limits) {
  ASSIGN_OR_RETURN(std::string dir, ExistingCell(cell));
  return Annotate(Apply(dir, limits, /*fresh=*/true),
                  absl::StrCat("limit cell ", cell));
}

absl::StatusOr<CgroupJoin> CgroupV2::OpenJoin(const std::string& cell) {
  ASSIGN_OR_RETURN(std::string dir, ExistingCell(cell));
  CgroupJoin join;
  join.dir_fd.reset(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!join.dir_fd) return PosixError(absl::StrCat("open ", dir), errno);
  return join;
}

absl::Status CgroupV2::AddProcess(const std::string& cell, pid_t pid) {
  ASSIGN_OR_RETURN(std::string dir, ExistingCell(cell));
  return fs_->Write(dir + "/cgroup.procs", absl::StrCat(pid));
}

absl::StatusOr<std::vector<pid_t>> CgroupV2::Pids(const std::string& cell) {
  ASSIGN_OR_RETURN(std::string dir, ExistingCell(cell));
  std::vector<pid_t> pids;
  RETURN_IF_ERROR(cgroup_internal::CollectPids(dir, &pids));
  cgroup_internal::SortUnique(&pids);
  return pids;
}

absl::StatusOr<bool> CgroupV2::Populated(const std::string& dir) {
  std::string events = dir + "/cgroup.events";
  ASSIGN_OR_RETURN(auto keyed, ReadKeyedFile(events));
  ASSIGN_OR_RETURN(uint64_t populated,
                   KeyedUint64(keyed, "populated", events, 1));
  return populated != 0;
}

absl::Status CgroupV2::KillWithCgroupKill(const std::string& cell,
                                          const std::string& dir,
                                          absl::Time deadline) {
  // The kernel signals every task of the subtree at once, including ones
  // forked during the walk, so there is no race to win.
  RETURN_IF_ERROR(fs_->Write(dir + "/cgroup.kill", "1"));
  ASSIGN_OR_RETURN(bool empty, cgroup_internal::PollUntil(
                                   deadline, [&]() -> absl::StatusOr<bool> {
                                     ASSIGN_OR_RETURN(bool p, Populated(dir));
                                     return !p;
                                   }));
  if (empty) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<pid_t> left, Pids(cell));
  return absl::DeadlineExceededError(absl::StrCat(
      "cell ", cell, ": ", left.size(), " processes survived cgroup.kill for ",
      absl::FormatDuration(kill_timeout_), ": ",
      cgroup_internal::FormatPids(left)));
}

absl::Status CgroupV2::KillWithFreezer(const std::string& cell,
                                       const std::string& dir,
                                       absl::Time deadline) {
  std::string freeze = dir + "/cgroup.freeze";
  std::string events = dir + "/cgroup.events";
  for (;;) {
    // Frozen tasks cannot fork, so one pass over cgroup.procs sees them
    // all; SIGKILL still reaches a frozen task on v2.
    RETURN_IF_ERROR(fs_->Write(freeze, "1"));
    absl::StatusOr<bool> frozen = cgroup_internal::PollUntil(
        std::min(deadline, absl::Now() + kFreezeWait),
        [&]() -> absl::StatusOr<bool> {
          ASSIGN_OR_RETURN(auto keyed, ReadKeyedFile(events));
          ASSIGN_OR_RETURN(uint64_t f, KeyedUint64(keyed, "frozen", events, 0));
          return f != 0;
        });
    absl::Status killed = frozen.status();
    if (killed.ok()) {
      absl::StatusOr<std::vector<pid_t>> pids = Pids(cell);
      killed = pids.ok() ? cgroup_internal::KillPids(*pids) : pids.status();
    }
    // Thaw even after an error: a cell left frozen would hang its workload.
    absl::Status thawed = fs_->Write(freeze, "0");
    RETURN_IF_ERROR(killed);
    RETURN_IF_ERROR(thawed);
    ASSIGN_OR_RETURN(
        bool empty,
        cgroup_internal::PollUntil(
            std::min(deadline, absl::Now() + absl::Milliseconds(200)),
            [&]() -> absl::StatusOr<bool> {
              ASSIGN_OR_RETURN(bool p, Populated(dir));
              return !p;
            }));
    if (empty) return absl::OkStatus();
    if (absl::Now() >= deadline) break;
  }
  ASSIGN_OR_RETURN(std::vector<pid_t> left, Pids(cell));
  return cgroup_internal::SurvivorsError(cell, kill_timeout_, left);
}

absl::Status CgroupV2::KillAll(const std::string& cell) {
  ASSIGN_OR_RETURN(std::string dir, ExistingCell(cell));
  absl::Time deadline = absl::Now() + kill_timeout_;
  ASSIGN_OR_RETURN(bool has_kill, PathExists(dir + "/cgroup.kill"));
  if (has_kill) return KillWithCgroupKill(cell, dir, deadline);
  return KillWithFreezer(cell, dir, deadline);
}

absl::Status CgroupV2::Destroy(const std::string& cell) {
  ASSIGN_OR_RETURN(std::string dir, ExistingCell(cell));
  ASSIGN_OR_RETURN(std::vector<pid_t> pids, Pids(cell));
  if (!pids.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cell ", cell, " still holds ", pids.size(), " processes (pids ",
        cgroup_internal::FormatPids(pids), "); KillAll it before Destroy"));
  }
  return Annotate(cgroup_internal::RemoveCgroupTree(*fs_, dir),
                  absl::StrCat("destroy cell ", cell));
}

absl::StatusOr<uint64_t> CgroupV2::OomKills(const std::string& cell) {
  RETURN_IF_ERROR(CheckCellName(cell));
  std::string events_path = CellDir(cell) + "/memory.events";
  ASSIGN_OR_RETURN(auto events, ReadKeyedFile(events_path));
  return KeyedUint64(events, "oom_kill", events_path, 0);
}

absl::StatusOr<CgroupStats> CgroupV2::Stats(const std::string& cell) {
  ASSIGN_OR_RETURN(std::string dir, ExistingCell(cell));
  CgroupStats stats;

  std::string cpu_stat = dir + "/cpu.stat";
  ASSIGN_OR_RETURN(auto cpu, ReadKeyedFile(cpu_stat));
  if (cpu.count("usage_usec") == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(cpu_stat, ": no usage_usec line"));
  }
  ASSIGN_OR_RETURN(stats.cpu_usage_usec,
                   KeyedUint64(cpu, "usage_usec", cpu_stat, 0));

  ASSIGN_OR_RETURN(stats.memory_current,
                   cgroup_internal::ReadInt64File(dir + "/memory.current"));
  // memory.peak arrived in Linux 5.19.
  std::string peak = dir + "/memory.peak";
  ASSIGN_OR_RETURN(bool has_peak, PathExists(peak));
  if (has_peak) {
    ASSIGN_OR_RETURN(stats.memory_peak, cgroup_internal::ReadInt64File(peak));
  }

  std::string events_path = dir + "/memory.events";
  ASSIGN_OR_RETURN(auto events, ReadKeyedFile(events_path));
  ASSIGN_OR_RETURN(stats.oom_kills,
                   KeyedUint64(events, "oom_kill", events_path, 0));

  std::string stat_path = dir + "/memory.stat";
  ASSIGN_OR_RETURN(auto mem, ReadKeyedFile(stat_path));
  ASSIGN_OR_RETURN(uint64_t anon, KeyedUint64(mem, "anon", stat_path, 0));
  ASSIGN_OR_RETURN(uint64_t file, KeyedUint64(mem, "file", stat_path, 0));
  stats.memory_anon = static_cast<int64_t>(anon);
  stats.memory_file = static_cast<int64_t>(file);

  ASSIGN_OR_RETURN(stats.pids_current,
                   cgroup_internal::ReadInt64File(dir + "/pids.current"));
  return stats;
}

absl::StatusOr<bool> CgroupV2::Exists(const std::string& cell) {
  RETURN_IF_ERROR(CheckCellName(cell));
  return cgroup_internal::IsDirectory(CellDir(cell));
}

absl::StatusOr<std::vector<std::string>> CgroupV2::List() {
  return cgroup_internal::ListSubdirs(root_);
}

absl::Status CgroupV2::Rename(const std::string& from, const std::string& to) {
  RETURN_IF_ERROR(CheckCellName(from));
  RETURN_IF_ERROR(CheckCellName(to));
  return absl::UnimplementedError(
      "cgroup v2 does not rename cgroups (rename(2) fails with EPERM)");
}

}  // namespace mycel
