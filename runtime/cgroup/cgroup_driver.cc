#include "runtime/cgroup/cgroup_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/cgroup/cgroup_v1.h"
#include "runtime/cgroup/cgroup_v2.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel {
namespace {

absl::Status CheckMemory(absl::string_view field,
                         const std::optional<int64_t>& bytes) {
  if (!bytes.has_value() || *bytes >= kMinMemoryBytes) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": ", *bytes, " is below the minimum of 1 MiB (", kMinMemoryBytes,
      " bytes); a cell needs at least that to start a process"));
}

// Checks a kernel list such as "0-1,3"; each number must be below `limit`
// when `limit` > 0. `unit` names the numbers in errors ("CPU").
absl::Status CheckList(absl::string_view field, absl::string_view list,
                       int limit, absl::string_view unit) {
  if (list.empty()) return absl::OkStatus();
  auto bad = [&]() {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", list,
                     "\" is not a list such as \"0-1,3\" (numbers and "
                     "ranges separated by commas)"));
  };
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(item, '-');
    if (ends.size() > 2) return bad();
    uint32_t bounds[2] = {0, 0};
    for (size_t i = 0; i < ends.size(); ++i) {
      if (ends[i].empty() ||
          ends[i].find_first_not_of("0123456789") != absl::string_view::npos ||
          !absl::SimpleAtoi(ends[i], &bounds[i])) {
        return bad();
      }
    }
    uint32_t first = bounds[0];
    uint32_t last = ends.size() == 2 ? bounds[1] : bounds[0];
    if (first > last) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": range \"", item, "\" ends before it starts"));
    }
    if (limit > 0 && last >= static_cast<uint32_t>(limit)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", unit, " ", last, " does not exist (this host has ",
          limit, " ", unit, limit == 1 ? "" : "s", ")"));
    }
  }
  return absl::OkStatus();
}

// Takes the exclusive lock on a subtree directory (see NewCgroupDriver).
absl::StatusOr<UniqueFd> LockSubtree(const std::string& dir) {
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return PosixError(absl::StrCat("open ", dir), errno);
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cgroup_subtree: ", dir,
          " is in use by another myceld; give each daemon on a host its own "
          "--cgroup-subtree"));
    }
    return PosixError(absl::StrCat("flock ", dir), errno);
  }
  return fd;
}

}  // namespace

int64_t CpuQuotaUsec(double cores) {
  return std::llround(cores * static_cast<double>(kCpuPeriodUsec));
}

absl::Status ValidateCgroupLimits(const CgroupLimits& limits, int num_cpus,
                                  int num_memory_nodes) {
  if (limits.cpu_max.has_value()) {
    double cores = *limits.cpu_max;
    if (!std::isfinite(cores)) {
      return absl::InvalidArgumentError(
          "cpu_max: must be a finite number of cores");
    }
    if (cores <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu_max: must be > 0, got ", cores));
    }
    if (CpuQuotaUsec(cores) < CpuQuotaUsec(kMinCpuMaxCores)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cpu_max: ", cores, " is below the minimum of ", kMinCpuMaxCores,
          " cores (the kernel's smallest quota, 1 ms per 100 ms period)"));
    }
    if (num_cpus > 0 && cores > num_cpus) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu_max: ", cores, " cores exceeds the ", num_cpus,
                       " CPUs of this host"));
    }
  }
  if (limits.cpu_weight.has_value() && (*limits.cpu_weight < kMinCpuWeight ||
                                        *limits.cpu_weight > kMaxCpuWeight)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_weight: ", *limits.cpu_weight, " is outside ",
                     kMinCpuWeight, "..", kMaxCpuWeight));
  }
  RETURN_IF_ERROR(CheckMemory("memory_max", limits.memory_max));
  RETURN_IF_ERROR(CheckMemory("memory_high", limits.memory_high));
  if (limits.memory_max.has_value() && limits.memory_high.has_value() &&
      *limits.memory_high > *limits.memory_max) {
    // The kernel would take it, but a throttling threshold above the hard
    // limit never applies: almost certainly a mistake in the spec.
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_high: ", *limits.memory_high, " exceeds memory_max ",
        *limits.memory_max, ", so it would never apply"));
  }
  if (limits.memory_swap_max.has_value() && *limits.memory_swap_max < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_swap_max: must be >= 0 bytes, got ", *limits.memory_swap_max));
  }
  if (limits.pids_max.has_value() &&
      (*limits.pids_max < 1 || *limits.pids_max > kMaxPids)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pids_max: ", *limits.pids_max, " is outside 1..",
                     kMaxPids, " (the kernel's PID_MAX_LIMIT)"));
  }
  RETURN_IF_ERROR(
      CheckList("cpuset_cpus", limits.cpuset_cpus, num_cpus, "CPU"));
  RETURN_IF_ERROR(CheckList("cpuset_mems", limits.cpuset_mems, num_memory_nodes,
                            "memory node"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CgroupDriver>> NewCgroupDriver(
    CgroupMode mode, const std::string& mount_root,
    const std::string& subtree) {
  switch (mode) {
    case CgroupMode::kV2: {
      ASSIGN_OR_RETURN(std::unique_ptr<CgroupV2> v2,
                       CgroupV2::Open(mount_root, subtree));
      ASSIGN_OR_RETURN(UniqueFd lock, LockSubtree(v2->root()));
      v2->HoldSubtreeLock(std::move(lock));
      log::Info("cgroup driver ready",
                {{"driver", "v2"}, {"root", v2->root()}});
      return std::unique_ptr<CgroupDriver>(std::move(v2));
    }
    case CgroupMode::kV1:
    case CgroupMode::kHybrid: {
      ASSIGN_OR_RETURN(std::unique_ptr<CgroupV1> v1,
                       CgroupV1::Open(mount_root, subtree));
      ASSIGN_OR_RETURN(UniqueFd lock, LockSubtree(v1->roots().memory));
      v1->HoldSubtreeLock(std::move(lock));
      log::Info("cgroup driver ready",
                {{"driver", "v1"}, {"memory_root", v1->roots().memory}});
      return std::unique_ptr<CgroupDriver>(std::move(v1));
    }
    case CgroupMode::kNone:
      break;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no cgroup filesystem is mounted at ", mount_root));
}

}  // namespace mycel
