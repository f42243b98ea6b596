// CgroupV1 on a fake tree of v1 hierarchies: mount discovery, the exact
// values written to the exact files (and their order where the kernel
// cares), parsing of the kernel's files, and errors.
#include "runtime/cgroup/cgroup_v1.h"

#include <doctest/doctest.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/testing/process.h"
#include "tests/unit/runtime/cgroup/fake_cgroupfs.h"

namespace mycel {
namespace {

using testing::AllLimits;
using testing::FakeCgroupFs;
using testing::FileContent;
using testing::SetFile;

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return absl::StrContains(haystack, needle);
}

// The mountinfo of this project's build machines (v1 with a hybrid
// unified mount; cpu and cpuacct mounted separately).
constexpr char kHostMountinfo[] =
    "22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw\n"
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup "
    "rw,cpuacct\n"
    "33 30 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup "
    "rw,cpuset\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup "
    "rw,memory\n"
    "35 30 0:32 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup "
    "rw,devices\n"
    "36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup "
    "rw,freezer\n"
    "38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup "
    "rw,name=systemd\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST_CASE("ParseCgroupV1Mounts reads this host's mountinfo") {
  auto mounts = ParseCgroupV1Mounts(kHostMountinfo, "/sys/fs/cgroup");
  REQUIRE(mounts.ok());
  std::map<std::string, std::string> want = {
      {"cpu", "/sys/fs/cgroup/cpu"},
      {"cpuacct", "/sys/fs/cgroup/cpuacct"},
      {"cpuset", "/sys/fs/cgroup/cpuset"},
      {"memory", "/sys/fs/cgroup/memory"},
      {"devices", "/sys/fs/cgroup/devices"},
      {"freezer", "/sys/fs/cgroup/freezer"},
      {"pids", "/sys/fs/cgroup/pids"},
      {"name=systemd", "/sys/fs/cgroup/systemd"},
  };
  CHECK(*mounts == want);
}

TEST_CASE("ParseCgroupV1Mounts handles shared hierarchies and escapes") {
  constexpr char kInfo[] =
      "25 24 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup "
      "cgroup rw,cpu,cpuacct\n"
      "26 24 0:23 / /sys/fs/cgroup/net_cls,net_prio rw - cgroup cgroup "
      "rw,net_cls,net_prio,clone_children\n"
      "27 24 0:24 / /sys/fs/cgroup/my\\040mem rw - cgroup cgroup "
      "rw,memory,release_agent=/bin/true,xattr\n"
      "28 24 0:24 / /elsewhere/memory rw - cgroup cgroup rw,memory\n"
      "29 24 0:25 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
  auto mounts = ParseCgroupV1Mounts(kInfo, "/sys/fs/cgroup");
  REQUIRE(mounts.ok());
  std::map<std::string, std::string> want = {
      {"cpu", "/sys/fs/cgroup/cpu,cpuacct"},
      {"cpuacct", "/sys/fs/cgroup/cpu,cpuacct"},
      {"net_cls", "/sys/fs/cgroup/net_cls,net_prio"},
      {"net_prio", "/sys/fs/cgroup/net_cls,net_prio"},
      {"memory", "/sys/fs/cgroup/my mem"},
      {"pids", "/sys/fs/cgroup/pids"},
  };
  CHECK(*mounts == want);
  CHECK(absl::IsInvalidArgument(
      ParseCgroupV1Mounts("no separator here\n", "/sys/fs/cgroup").status()));
}

// Fake v1 hierarchies below <tmp>/cg, described by a mountinfo file, and a
// v1 driver on subtree "mycel" prepared through Open.
struct V1Tree {
  explicit V1Tree(bool cpu_cpuacct_together = false, bool with_cpuset = true) {
    mount_root = tmp.Sub("cg");
    std::vector<std::vector<std::string>> hierarchies = {
        {"memory"}, {"pids"}, {"freezer"}, {"devices"}};
    if (cpu_cpuacct_together) {
      hierarchies.push_back({"cpu", "cpuacct"});
    } else {
      hierarchies.push_back({"cpu"});
      hierarchies.push_back({"cpuacct"});
    }
    if (with_cpuset) hierarchies.push_back({"cpuset"});
    auto owned = std::make_unique<FakeCgroupFs>();
    fake = owned.get();
    std::string mountinfo = absl::StrCat("30 22 0:27 / ", mount_root,
                                         " rw - tmpfs tmpfs rw,mode=755\n");
    int id = 31;
    for (const auto& controllers : hierarchies) {
      std::string mount =
          absl::StrCat(mount_root, "/", absl::StrJoin(controllers, ","));
      testing::CgroupFiles root = testing::V1CgroupFiles(controllers);
      if (controllers[0] == "cpuset") {
        root["cpuset.cpus"] = "0-1\n";
        root["cpuset.mems"] = "0\n";
      }
      testing::MakeFakeCgroup(mount, root);
      fake->AddTemplate(mount, testing::V1CgroupFiles(controllers));
      absl::StrAppend(&mountinfo, id, " 30 0:", id, " / ", mount,
                      " rw,relatime - cgroup cgroup rw,",
                      absl::StrJoin(controllers, ","), "\n");
      for (const std::string& c : controllers) mounts[c] = mount;
      ++id;
    }
    absl::StrAppend(&mountinfo, id, " 30 0:99 / ", mount_root,
                    "/unified rw - cgroup2 cgroup2 rw\n");
    SetFile(tmp.Sub("mountinfo"), mountinfo);
    auto opened = CgroupV1::Open(mount_root, "mycel", std::move(owned),
                                 tmp.Sub("mountinfo"));
    REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
    driver = std::move(*opened);
  }
  // <mount of controller>/mycel/<cell>/<file>
  std::string Cell(const std::string& controller, const std::string& cell,
                   const std::string& file) const {
    return absl::StrCat(mounts.at(controller), "/mycel/", cell, "/", file);
  }
  bool CellExistsIn(const std::string& controller,
                    const std::string& cell) const {
    struct stat st;
    return stat(absl::StrCat(mounts.at(controller), "/mycel/", cell).c_str(),
                &st) == 0;
  }

  testing::TempDir tmp;
  std::string mount_root;
  std::map<std::string, std::string> mounts;
  FakeCgroupFs* fake = nullptr;
  std::unique_ptr<CgroupV1> driver;
};

TEST_CASE("Open prepares the subtree in every hierarchy mycel uses") {
  V1Tree t;
  CHECK(t.driver->name() == "v1");
  for (const char* c :
       {"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}) {
    struct stat st;
    CHECK_MESSAGE(stat((t.mounts[c] + "/mycel").c_str(), &st) == 0, c);
  }
  struct stat st;
  CHECK(stat((t.mounts["devices"] + "/mycel").c_str(), &st) != 0);
  CHECK(t.driver->roots().memory == t.mounts["memory"] + "/mycel");
  // cpuset starts empty in a new cgroup and must be filled from the parent.
  CHECK(FileContent(t.mounts["cpuset"] + "/mycel/cpuset.cpus") == "0-1");
  CHECK(FileContent(t.mounts["cpuset"] + "/mycel/cpuset.mems") == "0");
}

TEST_CASE("Open refuses a host without a required controller") {
  testing::TempDir tmp;
  std::string info = absl::StrCat(
      "31 30 0:28 / ", tmp.Sub("cpu"), " rw - cgroup cgroup rw,cpu,cpuacct\n",
      "32 30 0:29 / ", tmp.Sub("memory"), " rw - cgroup cgroup rw,memory\n",
      "33 30 0:30 / ", tmp.Sub("freezer"), " rw - cgroup cgroup rw,freezer\n");
  SetFile(tmp.Sub("mountinfo"), info);
  auto driver =
      CgroupV1::Open(tmp.path(), "mycel", std::make_unique<FakeCgroupFs>(),
                     tmp.Sub("mountinfo"));
  REQUIRE(absl::IsFailedPrecondition(driver.status()));
  CHECK(
      Contains(driver.status().message(),
               "cgroup v1 controller pids is not mounted below " + tmp.path()));
}

TEST_CASE("Create writes every limit to its v1 file") {
  V1Tree t;
  REQUIRE(t.driver->Create("web", AllLimits()).ok());
  // The kernel's default period, which Create leaves alone.
  CHECK(FileContent(t.Cell("cpu", "web", "cpu.cfs_period_us")) == "100000\n");
  CHECK(FileContent(t.Cell("cpu", "web", "cpu.cfs_quota_us")) == "50000");
  CHECK(FileContent(t.Cell("cpu", "web", "cpu.shares")) == "2048");
  CHECK(FileContent(t.Cell("memory", "web", "memory.limit_in_bytes")) ==
        "33554432");
  CHECK(FileContent(t.Cell("memory", "web", "memory.memsw.limit_in_bytes")) ==
        "33554432");  // memory_max + 0 bytes of swap
  CHECK(FileContent(t.Cell("memory", "web", "memory.soft_limit_in_bytes")) ==
        "16777216");
  CHECK(FileContent(t.Cell("pids", "web", "pids.max")) == "20");
  CHECK(FileContent(t.Cell("cpuset", "web", "cpuset.cpus")) == "1");
  CHECK(FileContent(t.Cell("cpuset", "web", "cpuset.mems")) == "0");
  for (const char* c :
       {"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}) {
    CHECK_MESSAGE(t.CellExistsIn(c, "web"), c);
  }
}

TEST_CASE("Create writes only the limits that are set") {
  V1Tree t;
  CgroupLimits limits;
  limits.memory_max = 64 << 20;
  limits.pids_max = 100;
  size_t before = t.fake->writes().size();
  REQUIRE(t.driver->Create("web", limits).ok());
  std::vector<std::string> written = t.fake->WritesSince(before);
  // Everything else already holds the kernel's default in a new cgroup.
  CHECK(written == std::vector<std::string>{"memory.limit_in_bytes=67108864",
                                            "pids.max=100"});
  CHECK(FileContent(t.Cell("memory", "web", "memory.memsw.limit_in_bytes")) ==
        "9223372036854771712\n");  // the kernel's unlimited
  // The cpuset comes from mycel's cgroup through clone_children.
  CHECK(FileContent(t.mounts["cpuset"] + "/mycel/cgroup.clone_children") ==
        "1");
  CHECK(FileContent(t.Cell("cpuset", "web", "cpuset.cpus")) == "0-1");
  CHECK(FileContent(t.Cell("cpuset", "web", "cpuset.mems")) == "0");
  // ApplyToNew on a cell made without limits writes the same two files.
  REQUIRE(t.driver->Create("blank", {}).ok());
  before = t.fake->writes().size();
  REQUIRE(t.driver->ApplyToNew("blank", limits).ok());
  CHECK(t.fake->WritesSince(before) == written);
  CHECK_FALSE(t.driver->ApplyToNew("nothing", limits).ok());
  // Update writes every field: the cell's files may hold anything by then.
  before = t.fake->writes().size();
  REQUIRE(t.driver->Update("web", limits).ok());
  CHECK(t.fake->writes().size() - before >= 8);
  CHECK(FileContent(t.Cell("cpu", "web", "cpu.shares")) == "1024");
}

TEST_CASE("Rename moves a cell in every hierarchy, or changes nothing") {
  V1Tree t;
  REQUIRE(t.driver->Create("web", AllLimits()).ok());
  REQUIRE(t.driver->AddProcess("web", 4242).ok());
  REQUIRE(t.driver->Rename("web", ".deleted-web-1").ok());
  for (const char* c :
       {"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}) {
    CHECK_MESSAGE(!t.CellExistsIn(c, "web"), c);
    CHECK_MESSAGE(t.CellExistsIn(c, ".deleted-web-1"), c);
  }
  // Limits and processes go with it; the name is free for a new cell.
  CHECK(FileContent(t.Cell("pids", ".deleted-web-1", "pids.max")) == "20");
  CHECK(t.driver->Pids(".deleted-web-1").value() == std::vector<pid_t>{4242});
  CHECK(t.driver->Create("web", {}).ok());

  CHECK(absl::IsNotFound(t.driver->Rename("nothing", "other")));
  // A clash in one hierarchy undoes the others.
  REQUIRE(t.driver->Create("a", {}).ok());
  testing::MakeFakeCgroup(absl::StrCat(t.mounts["pids"], "/mycel/b"),
                          testing::V1CgroupFiles({"pids"}));
  absl::Status clash = t.driver->Rename("a", "b");
  CHECK(absl::IsAlreadyExists(clash));
  for (const char* c :
       {"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}) {
    CHECK_MESSAGE(t.CellExistsIn(c, "a"), c);
  }
  CHECK(!t.CellExistsIn("memory", "b"));
  CHECK(absl::IsInvalidArgument(t.driver->Rename("a", "../x")));
}

TEST_CASE("memory and memsw are written in the order the kernel accepts") {
  V1Tree t;
  // Lowering from unlimited: limit first, then memsw (memsw >= limit).
  REQUIRE(t.driver->Create("web", AllLimits()).ok());
  std::vector<std::string> order;
  for (const auto& w : t.fake->writes()) {
    if (Contains(w.path, "/web/memory.limit_in_bytes") ||
        Contains(w.path, "/web/memory.memsw.limit_in_bytes")) {
      order.push_back(absl::StrCat(
          Contains(w.path, "memsw") ? "memsw=" : "limit=", w.value));
    }
  }
  CHECK(order == std::vector<std::string>{"limit=33554432", "memsw=33554432"});

  // Raising: memsw first, then the limit.
  CgroupLimits more = AllLimits();
  more.memory_max = 64 << 20;
  more.memory_swap_max = 16 << 20;
  size_t before = t.fake->writes().size();
  REQUIRE(t.driver->Update("web", more).ok());
  order.clear();
  auto writes = t.fake->writes();
  for (size_t i = before; i < writes.size(); ++i) {
    if (Contains(writes[i].path, "/web/memory.limit_in_bytes") ||
        Contains(writes[i].path, "/web/memory.memsw.limit_in_bytes")) {
      order.push_back(
          absl::StrCat(Contains(writes[i].path, "memsw") ? "memsw=" : "limit=",
                       writes[i].value));
    }
  }
  CHECK(order == std::vector<std::string>{"memsw=83886080", "limit=67108864"});

  // Back to unlimited: memsw -1 first (a limit of -1 above memsw is EINVAL).
  before = t.fake->writes().size();
  REQUIRE(t.driver->Update("web", {}).ok());
  order.clear();
  writes = t.fake->writes();
  for (size_t i = before; i < writes.size(); ++i) {
    if (Contains(writes[i].path, "/web/memory.limit_in_bytes") ||
        Contains(writes[i].path, "/web/memory.memsw.limit_in_bytes")) {
      order.push_back(
          absl::StrCat(Contains(writes[i].path, "memsw") ? "memsw=" : "limit=",
                       writes[i].value));
    }
  }
  CHECK(order == std::vector<std::string>{"memsw=-1", "limit=-1"});
}

TEST_CASE("unset limits are written as the kernel's defaults") {
  V1Tree t;
  REQUIRE(t.driver->Create("web", AllLimits()).ok());
  REQUIRE(t.driver->Update("web", {}).ok());
  CHECK(FileContent(t.Cell("cpu", "web", "cpu.cfs_quota_us")) == "-1");
  CHECK(FileContent(t.Cell("cpu", "web", "cpu.cfs_period_us")) == "100000");
  CHECK(FileContent(t.Cell("cpu", "web", "cpu.shares")) == "1024");
  CHECK(FileContent(t.Cell("memory", "web", "memory.limit_in_bytes")) == "-1");
  CHECK(FileContent(t.Cell("memory", "web", "memory.memsw.limit_in_bytes")) ==
        "-1");
  CHECK(FileContent(t.Cell("memory", "web", "memory.soft_limit_in_bytes")) ==
        "-1");
  CHECK(FileContent(t.Cell("pids", "web", "pids.max")) == "max");
  // An empty cpuset inherits mycel's (a v1 cpuset cannot be empty).
  CHECK(FileContent(t.Cell("cpuset", "web", "cpuset.cpus")) == "0-1");
  CHECK(FileContent(t.Cell("cpuset", "web", "cpuset.mems")) == "0");
}

TEST_CASE("swap limits need memsw files and memory_max on v1") {
  V1Tree t;
  CgroupLimits no_max;
  no_max.memory_swap_max = 0;
  absl::Status status = t.driver->Create("a", no_max);
  CHECK(absl::IsInvalidArgument(status));
  CHECK(Contains(status.message(),
                 "memory_swap_max: cgroup v1 limits memory "
                 "and swap together"));
  CHECK_FALSE(t.driver->Exists("a").value());  // rolled back everywhere

  // A kernel without swap accounting has no memsw files.
  REQUIRE(t.driver->Create("b", {}).ok());
  REQUIRE(
      unlink(t.Cell("memory", "b", "memory.memsw.limit_in_bytes").c_str()) ==
      0);
  CgroupLimits swap = AllLimits();
  status = t.driver->Update("b", swap);
  CHECK(absl::IsFailedPrecondition(status));
  CHECK(Contains(status.message(),
                 "memory_swap_max: " +
                     t.Cell("memory", "b", "memory.memsw.limit_in_bytes") +
                     " does not exist"));
  // Without a swap limit only memory.limit_in_bytes is written.
  swap.memory_swap_max.reset();
  size_t before = t.fake->writes().size();
  REQUIRE(t.driver->Update("b", swap).ok());
  CHECK(FileContent(t.Cell("memory", "b", "memory.limit_in_bytes")) ==
        "33554432");
  auto writes = t.fake->writes();
  for (size_t i = before; i < writes.size(); ++i) {
    CHECK_FALSE(Contains(writes[i].path, "memsw"));
  }
}

TEST_CASE("cpuset limits without a cpuset hierarchy are refused") {
  V1Tree t(/*cpu_cpuacct_together=*/false, /*with_cpuset=*/false);
  CHECK(t.driver->roots().cpuset.empty());
  REQUIRE(t.driver->Create("plain", {}).ok());
  CgroupLimits l;
  l.cpuset_cpus = "0";
  absl::Status status = t.driver->Create("pinned", l);
  CHECK(absl::IsFailedPrecondition(status));
  CHECK(Contains(status.message(),
                 "cpuset_cpus: the cpuset controller is not mounted"));
}

TEST_CASE("a kernel error names the file and value, and Create rolls back") {
  V1Tree t;
  t.fake->FailWrite(t.Cell("pids", "web", "pids.max"), EINVAL);
  absl::Status status = t.driver->Create("web", AllLimits());
  CHECK(absl::IsInvalidArgument(status));
  CHECK(status.message() == "create cell web: write " +
                                t.Cell("pids", "web", "pids.max") +
                                " \"20\": Invalid argument (EINVAL)");
  for (const char* c :
       {"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}) {
    CHECK_MESSAGE(!t.CellExistsIn(c, "web"), c);
  }
  CHECK(t.driver->List().value().empty());
}

TEST_CASE("Create refuses an existing cell, even one left in one hierarchy") {
  V1Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  CHECK(absl::IsAlreadyExists(t.driver->Create("web", {})));
  testing::MakeFakeCgroup(t.mounts["pids"] + "/mycel/stray",
                          testing::V1CgroupFiles({"pids"}));
  absl::Status stray = t.driver->Create("stray", {});
  CHECK(absl::IsAlreadyExists(stray));
  CHECK(Contains(stray.message(), t.mounts["pids"] + "/mycel/stray"));
  CHECK(t.driver->Exists("stray").value());
  // A partial cell cannot be updated, but it is listed and can be destroyed.
  CHECK(absl::IsNotFound(t.driver->Update("stray", {})));
  CHECK(t.driver->List().value() == std::vector<std::string>{"stray", "web"});
  REQUIRE(t.driver->Destroy("stray").ok());
  CHECK_FALSE(t.driver->Exists("stray").value());
  for (const char* bad : {"", ".", "..", "a/b"}) {
    CHECK_MESSAGE(absl::IsInvalidArgument(t.driver->Create(bad, {})), bad);
  }
}

TEST_CASE("Stats parses the kernel's v1 files") {
  V1Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  SetFile(t.Cell("cpuacct", "web", "cpuacct.usage"), "1234567890\n");
  SetFile(t.Cell("memory", "web", "memory.usage_in_bytes"), "33316864\n");
  SetFile(t.Cell("memory", "web", "memory.max_usage_in_bytes"), "33554432\n");
  SetFile(t.Cell("memory", "web", "memory.oom_control"),
          "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  SetFile(t.Cell("memory", "web", "memory.stat"),
          "cache 270336\nrss 32768000\nrss_huge 0\nshmem 0\nmapped_file 0\n"
          "dirty 0\nwriteback 0\nswap 0\npgpgin 9000\npgpgout 800\n"
          "pgfault 9100\npgmajfault 0\ninactive_anon 32768000\n"
          "active_anon 0\ninactive_file 135168\nactive_file 135168\n"
          "unevictable 0\nhierarchical_memory_limit 33554432\n"
          "hierarchical_memsw_limit 33554432\ntotal_cache 274432\n"
          "total_rss 32772096\ntotal_rss_huge 0\ntotal_shmem 0\n");
  SetFile(t.Cell("pids", "web", "pids.current"), "4\n");
  auto stats = t.driver->Stats("web");
  REQUIRE_MESSAGE(stats.ok(), stats.status().ToString());
  CHECK(stats->cpu_usage_usec == 1234567);  // ns → µs
  CHECK(stats->memory_current == 33316864);
  CHECK(stats->memory_peak == 33554432);
  CHECK(stats->oom_kills == 3);
  CHECK(stats->memory_anon == 32772096);  // total_: includes child cgroups
  CHECK(stats->memory_file == 274432);
  CHECK(stats->pids_current == 4);

  // Kernels before 4.13 have no oom_kill line.
  SetFile(t.Cell("memory", "web", "memory.oom_control"),
          "oom_kill_disable 0\nunder_oom 0\n");
  CHECK(t.driver->Stats("web")->oom_kills == 0);
  SetFile(t.Cell("memory", "web", "memory.oom_control"), "oom_kill many\n");
  absl::Status bad = t.driver->Stats("web").status();
  CHECK(absl::IsInvalidArgument(bad));
  CHECK(Contains(bad.message(), "memory.oom_control"));
}

TEST_CASE("Pids is the union over hierarchies and nested cgroups") {
  V1Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  SetFile(t.Cell("memory", "web", "cgroup.procs"), "10\n");
  SetFile(t.Cell("pids", "web", "cgroup.procs"), "11\n10\n");
  REQUIRE(t.fake->MakeDir(t.Cell("freezer", "web", "inner")).ok());
  SetFile(t.Cell("freezer", "web", "inner/cgroup.procs"), "12\n");
  CHECK(t.driver->Pids("web").value() == std::vector<pid_t>{10, 11, 12});
  CHECK(absl::IsNotFound(t.driver->Pids("nope").status()));
}

TEST_CASE("AddProcess and OpenJoin cover every hierarchy once") {
  V1Tree t(/*cpu_cpuacct_together=*/true);
  CHECK(t.driver->roots().cpu == t.driver->roots().cpuacct);
  REQUIRE(t.driver->Create("web", {}).ok());
  REQUIRE(t.driver->AddProcess("web", 4242).ok());
  for (const char* c : {"cpu", "memory", "pids", "freezer", "cpuset"}) {
    CHECK_MESSAGE(FileContent(t.Cell(c, "web", "cgroup.procs")) == "4242\n", c);
  }
  REQUIRE(t.driver->Create("join", {}).ok());
  auto join = t.driver->OpenJoin("join");
  REQUIRE_MESSAGE(join.ok(), join.status().ToString());
  // memory, cpu+cpuacct, pids, freezer, cpuset.
  CHECK(join->procs_fds.size() == 5);
  CHECK_FALSE(join->dir_fd.valid());
  for (const UniqueFd& fd : join->procs_fds) {
    REQUIRE(write(fd.get(), "0", 1) == 1);
  }
  for (const char* c : {"cpu", "memory", "pids", "freezer", "cpuset"}) {
    CHECK_MESSAGE(FileContent(t.Cell(c, "join", "cgroup.procs")) == "0", c);
  }
}

TEST_CASE("Destroy refuses a cell with processes, then removes it all") {
  V1Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  REQUIRE(t.fake->MakeDir(t.Cell("memory", "web", "inner")).ok());
  SetFile(t.Cell("memory", "web", "inner/cgroup.procs"), "77\n");
  absl::Status busy = t.driver->Destroy("web");
  CHECK(absl::IsFailedPrecondition(busy));
  CHECK(Contains(busy.message(), "cell web still holds 1 processes (pids 77)"));
  SetFile(t.Cell("memory", "web", "inner/cgroup.procs"), "");
  REQUIRE(t.driver->Destroy("web").ok());
  for (const char* c :
       {"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}) {
    CHECK_MESSAGE(!t.CellExistsIn(c, "web"), c);
  }
  CHECK(absl::IsNotFound(t.driver->Destroy("web")));
}

TEST_CASE("KillAll freezes, kills, always thaws, and reports survivors") {
  V1Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  t.driver->set_kill_timeout(absl::Milliseconds(300));

  // An empty cell needs no freezing at all.
  REQUIRE(t.driver->KillAll("web").ok());
  CHECK(t.fake->WritesTo("/web/freezer.state").empty());

  // A real process, so the SIGKILL is observable; the fake cannot drop it
  // from cgroup.procs, so the cell never empties: after a plain SIGKILL
  // pass KillAll falls back to freeze, kill, thaw rounds.
  auto spawn_sleeper = [] {
    pid_t child = fork();
    if (child == 0) {
      pause();
      _exit(0);
    }
    return child;
  };
  pid_t child = spawn_sleeper();
  REQUIRE(child >= 0);
  SetFile(t.Cell("memory", "web", "cgroup.procs"),
          std::to_string(child) + "\n");
  absl::Status status = t.driver->KillAll("web");
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  CHECK(WIFSIGNALED(wstatus));
  CHECK(WTERMSIG(wstatus) == SIGKILL);
  CHECK(absl::IsDeadlineExceeded(status));
  CHECK(Contains(status.message(), "cell web: 1 processes survived SIGKILL"));
  std::vector<std::string> writes = t.fake->WritesTo("/web/freezer.state");
  REQUIRE(writes.size() >= 2);
  CHECK(writes[0] == "FROZEN");
  CHECK(writes.back() == "THAWED");
  CHECK(FileContent(t.Cell("freezer", "web", "freezer.state")) == "THAWED");

  // A freezer write error is reported with the file and value.
  child = spawn_sleeper();
  REQUIRE(child >= 0);
  SetFile(t.Cell("memory", "web", "cgroup.procs"),
          std::to_string(child) + "\n");
  t.fake->FailWrite(t.Cell("freezer", "web", "freezer.state"), EIO);
  status = t.driver->KillAll("web");
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  CHECK(Contains(
      status.message(),
      "write " + t.Cell("freezer", "web", "freezer.state") + " \"FROZEN\""));
  CHECK(absl::IsNotFound(t.driver->KillAll("nope")));
}

}  // namespace
}  // namespace mycel
