// ValidateCgroupLimits: every out-of-range field is refused with
// INVALID_ARGUMENT naming the field; values the kernel takes pass.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/cgroup/cgroup_v1.h"
#include "runtime/host_info.h"

namespace mycel {
namespace {

// The error for `limits` on a 2-CPU host; "" when they are valid.
std::string Error(const CgroupLimits& limits) {
  absl::Status status = ValidateCgroupLimits(limits, 2);
  if (status.ok()) return "";
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  return std::string(status.message());
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return absl::StartsWith(s, prefix);
}

TEST_CASE("empty limits are valid") { CHECK(Error({}) == ""); }

TEST_CASE("cpu_max must be positive, at least 0.01 and at most the CPUs") {
  CgroupLimits l;
  l.cpu_max = 0;
  CHECK(Error(l) == "cpu_max: must be > 0, got 0");
  l.cpu_max = -1;
  CHECK(Error(l) == "cpu_max: must be > 0, got -1");
  l.cpu_max = 0.001;
  CHECK(StartsWith(Error(l),
                   "cpu_max: 0.001 is below the minimum of 0.01 cores"));
  l.cpu_max = std::nan("");
  CHECK(Error(l) == "cpu_max: must be a finite number of cores");
  l.cpu_max = std::numeric_limits<double>::infinity();
  CHECK(Error(l) == "cpu_max: must be a finite number of cores");
  l.cpu_max = 2.5;
  CHECK(Error(l) == "cpu_max: 2.5 cores exceeds the 2 CPUs of this host");
  for (double ok : {0.01, 0.5, 1.0, 2.0}) {
    l.cpu_max = ok;
    CHECK(Error(l) == "");
  }
}

TEST_CASE("cpu quota is the cores times the 100 ms period") {
  CHECK(CpuQuotaUsec(0.5) == 50000);
  CHECK(CpuQuotaUsec(0.01) == 1000);
  CHECK(CpuQuotaUsec(1.5) == 150000);
  CHECK(CpuQuotaUsec(0.333333) == 33333);
}

TEST_CASE("cpu_weight must be within 1..10000") {
  CgroupLimits l;
  l.cpu_weight = 0;
  CHECK(Error(l) == "cpu_weight: 0 is outside 1..10000");
  l.cpu_weight = 10001;
  CHECK(Error(l) == "cpu_weight: 10001 is outside 1..10000");
  l.cpu_weight = 1;
  CHECK(Error(l) == "");
  l.cpu_weight = 10000;
  CHECK(Error(l) == "");
}

TEST_CASE("cpu_weight maps to v1 cpu.shares like systemd") {
  CHECK(CpuWeightToShares(100) == 1024);  // both defaults
  CHECK(CpuWeightToShares(1) == 10);
  CHECK(CpuWeightToShares(50) == 512);
  CHECK(CpuWeightToShares(200) == 2048);
  CHECK(CpuWeightToShares(10000) == 102400);
}

TEST_CASE("memory limits must be at least 1 MiB") {
  CgroupLimits l;
  l.memory_max = 4096;
  CHECK(Error(l) ==
        "memory_max: 4096 is below the minimum of 1 MiB (1048576 bytes); a "
        "cell needs at least that to start a process");
  l.memory_max = -1;
  CHECK(StartsWith(Error(l), "memory_max: -1 is below the minimum"));
  l.memory_max = 1 << 20;
  CHECK(Error(l) == "");
  l.memory_high = 1000;
  CHECK(
      StartsWith(Error(l), "memory_high: 1000 is below the minimum of 1 MiB"));
}

TEST_CASE("memory_high above memory_max is refused") {
  CgroupLimits l;
  l.memory_max = 64 << 20;
  l.memory_high = 128 << 20;
  CHECK(Error(l) ==
        "memory_high: 134217728 exceeds memory_max 67108864, so it would "
        "never apply");
  l.memory_high = 32 << 20;
  CHECK(Error(l) == "");
}

TEST_CASE("memory_swap_max must not be negative") {
  CgroupLimits l;
  l.memory_swap_max = -5;
  CHECK(Error(l) == "memory_swap_max: must be >= 0 bytes, got -5");
  l.memory_swap_max = 0;
  CHECK(Error(l) == "");
}

TEST_CASE("pids_max must be within 1..PID_MAX_LIMIT") {
  CgroupLimits l;
  l.pids_max = 0;
  CHECK(StartsWith(Error(l), "pids_max: 0 is outside 1..4194304"));
  l.pids_max = 4194305;
  CHECK(StartsWith(Error(l), "pids_max: 4194305 is outside 1..4194304"));
  l.pids_max = 1;
  CHECK(Error(l) == "");
}

TEST_CASE("cpuset lists are checked for form and existing CPUs") {
  CgroupLimits l;
  for (const char* ok : {"0", "1", "0-1", "0,1", "0-0,1"}) {
    l.cpuset_cpus = ok;
    CHECK_MESSAGE(Error(l) == "", ok);
  }
  for (const char* bad : {"a", "0-", "-1", "0--1", "1,", ",", " 0", "0x1"}) {
    l.cpuset_cpus = bad;
    CHECK_MESSAGE(StartsWith(Error(l), "cpuset_cpus: \""), bad);
  }
  l.cpuset_cpus = "1-0";
  CHECK(Error(l) == "cpuset_cpus: range \"1-0\" ends before it starts");
  l.cpuset_cpus = "0-2";
  CHECK(Error(l) == "cpuset_cpus: CPU 2 does not exist (this host has 2 CPUs)");
  l.cpuset_cpus = "";
  l.cpuset_mems = "0-7";  // node count unknown here: the kernel checks
  CHECK(Error(l) == "");
  l.cpuset_mems = "x";
  CHECK(StartsWith(Error(l), "cpuset_mems: \"x\" is not a list"));
}

TEST_CASE("favordynmods is read from the super options of cgroup mounts") {
  constexpr char kHybrid[] =
      "35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime "
      "shared:11 - cgroup2 cgroup2 rw,nsdelegate\n"
      "36 25 0:31 / /sys/fs/cgroup/pids rw,relatime shared:12 - cgroup "
      "cgroup rw,pids\n";
  CHECK_FALSE(CgroupMovesFavored(kHybrid));
  CHECK_FALSE(CgroupMovesFavored(""));
  CHECK(CgroupMovesFavored(
      "35 25 0:30 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 "
      "rw,nsdelegate,favordynmods,memory_recursiveprot\n"));
  // A v1 hierarchy's option counts too: the rwsem is the kernel's, shared.
  CHECK(
      CgroupMovesFavored("36 25 0:31 / /sys/fs/cgroup/pids rw - cgroup cgroup "
                         "rw,pids,favordynmods\n"));
  // Only the super options of a cgroup filesystem count.
  CHECK_FALSE(CgroupMovesFavored(
      "40 25 0:40 / /mnt/favordynmods rw - tmpfs favordynmods rw\n"));
  CHECK_FALSE(CgroupMovesFavored(
      "40 25 0:40 / /mnt rw - tmpfs tmpfs rw,favordynmods\n"));
}

}  // namespace
}  // namespace mycel
