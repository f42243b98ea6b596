// CgroupV2 on a fake cgroup2 tree: the exact values it writes to the exact
// files, how it parses the kernel's files, and its errors.
#include "runtime/cgroup/cgroup_v2.h"

#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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

// A cgroup2 mount at <tmp>/cg whose root offers every controller, and a v2
// driver on <tmp>/cg/mycel prepared through Open.
struct V2Tree {
  V2Tree() : mount(tmp.Sub("cg")) {
    testing::CgroupFiles root = testing::V2CgroupFiles();
    root["cgroup.controllers"] =
        "cpuset cpu io memory hugetlb pids rdma misc\n";
    root.erase("cgroup.kill");  // the root cgroup has none
    testing::MakeFakeCgroup(mount, root);
    auto owned = std::make_unique<FakeCgroupFs>();
    fake = owned.get();
    fake->AddTemplate(mount, testing::V2CgroupFiles());
    auto opened = CgroupV2::Open(mount, "mycel", std::move(owned));
    REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
    driver = std::move(*opened);
  }
  std::string Cell(const std::string& name, const std::string& file) const {
    return mount + "/mycel/" + name + "/" + file;
  }

  testing::TempDir tmp;
  std::string mount;
  FakeCgroupFs* fake = nullptr;
  std::unique_ptr<CgroupV2> driver;
};

TEST_CASE("Open creates the subtree and enables controllers down the chain") {
  V2Tree t;
  CHECK(t.driver->name() == "v2");
  CHECK(t.driver->root() == t.mount + "/mycel");
  struct stat st;
  CHECK(stat((t.mount + "/mycel").c_str(), &st) == 0);
  // Only controllers the kernel offers, in one write per level.
  CHECK(t.fake->WritesTo(t.mount + "/cgroup.subtree_control") ==
        std::vector<std::string>{"+cpu +cpuset +io +memory +pids"});
  CHECK(t.fake->WritesTo(t.mount + "/mycel/cgroup.subtree_control") ==
        std::vector<std::string>{"+cpu +cpuset +io +memory +pids"});
}

TEST_CASE("Open on a nested subtree enables each level and skips done ones") {
  testing::TempDir tmp;
  std::string mount = tmp.Sub("cg");
  testing::CgroupFiles root = testing::V2CgroupFiles();
  root["cgroup.controllers"] = "cpu memory pids\n";
  root["cgroup.subtree_control"] = "cpu memory\n";
  testing::MakeFakeCgroup(mount, root);
  auto owned = std::make_unique<FakeCgroupFs>();
  FakeCgroupFs* fake = owned.get();
  testing::CgroupFiles child = testing::V2CgroupFiles();
  child["cgroup.controllers"] = "cpu memory pids\n";
  fake->AddTemplate(mount, child);
  auto driver = CgroupV2::Open(mount, "a/b", std::move(owned));
  REQUIRE_MESSAGE(driver.ok(), driver.status().ToString());
  CHECK((*driver)->root() == mount + "/a/b");
  CHECK(fake->WritesTo(mount + "/cgroup.subtree_control") ==
        std::vector<std::string>{"+pids"});
  CHECK(fake->WritesTo(mount + "/a/cgroup.subtree_control") ==
        std::vector<std::string>{"+cpu +memory +pids"});
  CHECK(fake->WritesTo(mount + "/a/b/cgroup.subtree_control") ==
        std::vector<std::string>{"+cpu +memory +pids"});
  CHECK(FileContent(mount + "/a/b/cgroup.subtree_control") ==
        "cpu memory pids\n");

  // Opening again finds everything in place and writes nothing more.
  auto again_fs = std::make_unique<FakeCgroupFs>();
  FakeCgroupFs* again_fake = again_fs.get();
  auto again = CgroupV2::Open(mount, "a/b", std::move(again_fs));
  REQUIRE(again.ok());
  CHECK(again_fake->writes().empty());
}

TEST_CASE("Open refuses a host without a required controller") {
  testing::TempDir tmp;
  std::string mount = tmp.Sub("cg");
  testing::CgroupFiles root = testing::V2CgroupFiles();
  root["cgroup.controllers"] = "cpu memory io\n";
  testing::MakeFakeCgroup(mount, root);
  auto driver =
      CgroupV2::Open(mount, "mycel", std::make_unique<FakeCgroupFs>());
  REQUIRE(absl::IsFailedPrecondition(driver.status()));
  CHECK(driver.status().message() ==
        "cgroup v2 at " + mount +
            " lacks the pids controller (available: cpu io memory)");
}

TEST_CASE("Open explains EBUSY from the no-internal-processes rule") {
  testing::TempDir tmp;
  std::string mount = tmp.Sub("cg");
  testing::MakeFakeCgroup(mount, testing::V2CgroupFiles());
  testing::CgroupFiles busy = testing::V2CgroupFiles();
  busy["cgroup.procs"] = "42\n43\n";
  testing::MakeFakeCgroup(mount + "/svc", busy);
  auto owned = std::make_unique<FakeCgroupFs>();
  owned->AddTemplate(mount, testing::V2CgroupFiles());
  owned->FailWrite(mount + "/svc/cgroup.subtree_control", EBUSY);
  auto driver = CgroupV2::Open(mount, "svc/mycel", std::move(owned));
  REQUIRE(absl::IsUnavailable(driver.status()));
  std::string msg(driver.status().message());
  CHECK(Contains(msg, mount + "/svc holds processes (42, 43)"));
  CHECK(Contains(msg, "write " + mount + "/svc/cgroup.subtree_control \"+cpu"));
  CHECK(Contains(msg, "(EBUSY)"));
}

TEST_CASE("Open refuses bad subtrees") {
  for (const char* bad : {"", "/mycel", "mycel/", "a/../b", ".", "a//b"}) {
    auto driver =
        CgroupV2::Open("/nonexistent", bad, std::make_unique<FakeCgroupFs>());
    CHECK_MESSAGE(absl::IsInvalidArgument(driver.status()), bad);
  }
}

TEST_CASE("Create writes every limit to its v2 file") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", AllLimits()).ok());
  CHECK(FileContent(t.Cell("web", "cpu.max")) == "50000 100000");
  CHECK(FileContent(t.Cell("web", "cpu.weight")) == "200");
  CHECK(FileContent(t.Cell("web", "memory.max")) == "33554432");
  CHECK(FileContent(t.Cell("web", "memory.high")) == "16777216");
  CHECK(FileContent(t.Cell("web", "memory.swap.max")) == "0");
  CHECK(FileContent(t.Cell("web", "pids.max")) == "20");
  CHECK(FileContent(t.Cell("web", "cpuset.cpus")) == "1");
  CHECK(FileContent(t.Cell("web", "cpuset.mems")) == "0");
  CHECK(t.driver->Exists("web").value());
}

TEST_CASE("Create writes only the limits that are set") {
  V2Tree t;
  CgroupLimits limits;
  limits.memory_max = 64 << 20;
  limits.pids_max = 100;
  size_t before = t.fake->writes().size();
  REQUIRE(t.driver->Create("web", limits).ok());
  std::vector<std::string> written = t.fake->WritesSince(before);
  // Everything else already holds the kernel's default in a new cgroup.
  CHECK(written ==
        std::vector<std::string>{"memory.max=67108864", "pids.max=100"});
  // ApplyToNew on a cell made without limits writes the same two files.
  REQUIRE(t.driver->Create("blank", {}).ok());
  before = t.fake->writes().size();
  REQUIRE(t.driver->ApplyToNew("blank", limits).ok());
  CHECK(t.fake->WritesSince(before) == written);
  CHECK_FALSE(t.driver->ApplyToNew("nothing", limits).ok());
  // Update writes every field: the cell's files may hold anything by then.
  before = t.fake->writes().size();
  REQUIRE(t.driver->Update("web", limits).ok());
  CHECK(t.fake->writes().size() - before >= 6);
}

TEST_CASE("Rename is UNIMPLEMENTED: cgroup v2 refuses rename(2)") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  CHECK(absl::IsUnimplemented(t.driver->Rename("web", ".deleted-web-1")));
  CHECK(t.driver->Exists("web").value());
}

TEST_CASE("unset limits are written as the kernel's defaults") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", AllLimits()).ok());
  REQUIRE(t.driver->Update("web", CgroupLimits{}).ok());
  CHECK(FileContent(t.Cell("web", "cpu.max")) == "max 100000");
  CHECK(FileContent(t.Cell("web", "cpu.weight")) == "100");
  CHECK(FileContent(t.Cell("web", "memory.max")) == "max");
  CHECK(FileContent(t.Cell("web", "memory.high")) == "max");
  CHECK(FileContent(t.Cell("web", "memory.swap.max")) == "max");
  CHECK(FileContent(t.Cell("web", "pids.max")) == "max");
  // An empty cpuset list (a newline: the kernel ignores empty writes)
  // makes the cell inherit its parent's CPUs.
  CHECK(FileContent(t.Cell("web", "cpuset.cpus")) == "\n");
  CHECK(FileContent(t.Cell("web", "cpuset.mems")) == "\n");
}

TEST_CASE("Update changes limits in place") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  CgroupLimits l;
  l.cpu_max = 1.5;
  l.memory_max = 64 << 20;
  REQUIRE(t.driver->Update("web", l).ok());
  CHECK(FileContent(t.Cell("web", "cpu.max")) == "150000 100000");
  CHECK(FileContent(t.Cell("web", "memory.max")) == "67108864");
  absl::Status missing = t.driver->Update("nope", l);
  CHECK(absl::IsNotFound(missing));
  CHECK(Contains(missing.message(), "cell nope"));
}

TEST_CASE("Create refuses an existing cell and bad names") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  absl::Status again = t.driver->Create("web", {});
  CHECK(absl::IsAlreadyExists(again));
  CHECK(Contains(again.message(), "cell web already exists"));
  for (const char* bad : {"", ".", "..", "a/b", "/web"}) {
    CHECK_MESSAGE(absl::IsInvalidArgument(t.driver->Create(bad, {})), bad);
    CHECK_MESSAGE(absl::IsInvalidArgument(t.driver->Exists(bad).status()), bad);
    CHECK_MESSAGE(absl::IsInvalidArgument(t.driver->Destroy(bad)), bad);
  }
}

TEST_CASE("a kernel error names the file and value, and Create rolls back") {
  V2Tree t;
  t.fake->FailWrite(t.Cell("web", "memory.max"), EINVAL);
  absl::Status status = t.driver->Create("web", AllLimits());
  CHECK(absl::IsInvalidArgument(status));
  CHECK(status.message() == "create cell web: write " +
                                t.Cell("web", "memory.max") +
                                " \"33554432\": Invalid argument (EINVAL)");
  CHECK_FALSE(t.driver->Exists("web").value());
}

TEST_CASE("optional controllers: absent files are errors only when asked") {
  V2Tree t;
  testing::CgroupFiles lean = testing::V2CgroupFiles();
  for (const char* f : {"memory.swap.max", "cpuset.cpus", "cpuset.mems"}) {
    lean.erase(f);
  }
  // A second driver on a root whose cells lack swap and cpuset files.
  std::string root = t.tmp.Sub("lean");
  testing::MakeFakeCgroup(root, testing::V2CgroupFiles());
  auto owned = std::make_unique<FakeCgroupFs>();
  owned->AddTemplate(root, lean);
  CgroupV2 driver(root, std::move(owned));

  CHECK(driver.Create("plain", {}).ok());

  CgroupLimits swap;
  swap.memory_max = 32 << 20;
  swap.memory_swap_max = 0;
  absl::Status status = driver.Create("swap", swap);
  CHECK(absl::IsFailedPrecondition(status));
  CHECK(Contains(status.message(), "memory_swap_max: " + root +
                                       "/swap/memory.swap.max does not exist"));

  CgroupLimits cpus;
  cpus.cpuset_cpus = "0";
  status = driver.Create("cpus", cpus);
  CHECK(absl::IsFailedPrecondition(status));
  CHECK(Contains(status.message(), "cpuset_cpus: "));
  CHECK(Contains(status.message(), "cpuset controller is not enabled"));
  CHECK(driver.List().value() == std::vector<std::string>{"plain"});
}

TEST_CASE("Stats parses the kernel's v2 files") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  SetFile(t.Cell("web", "cpu.stat"),
          "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n"
          "core_sched.force_idle_usec 0\nnr_periods 40\nnr_throttled 7\n"
          "throttled_usec 31337\nnr_bursts 0\nburst_usec 0\n");
  SetFile(t.Cell("web", "memory.current"), "33427456\n");
  SetFile(t.Cell("web", "memory.peak"), "33554432\n");
  SetFile(t.Cell("web", "memory.events"),
          "low 0\nhigh 12\nmax 96\noom 2\noom_kill 2\noom_group_kill 0\n");
  SetFile(t.Cell("web", "memory.stat"),
          "anon 30523392\nfile 2711552\nkernel 184320\nkernel_stack 16384\n"
          "pagetables 77824\nsec_pagetables 0\npercpu 0\nsock 0\nvmalloc 0\n"
          "shmem 0\nzswap 0\nzswapped 0\nfile_mapped 1200128\nfile_dirty 0\n"
          "file_writeback 0\nswapcached 0\nanon_thp 0\nfile_thp 0\n"
          "shmem_thp 0\ninactive_anon 30502912\nactive_anon 20480\n"
          "inactive_file 1511424\nactive_file 1200128\nunevictable 0\n"
          "slab_reclaimable 34624\nslab_unreclaimable 45496\npgfault 9000\n");
  SetFile(t.Cell("web", "pids.current"), "3\n");
  auto stats = t.driver->Stats("web");
  REQUIRE_MESSAGE(stats.ok(), stats.status().ToString());
  CHECK(stats->cpu_usage_usec == 1234567);
  CHECK(stats->memory_current == 33427456);
  CHECK(stats->memory_peak == 33554432);
  CHECK(stats->oom_kills == 2);
  CHECK(stats->memory_anon == 30523392);
  CHECK(stats->memory_file == 2711552);
  CHECK(stats->pids_current == 3);

  // Kernels before 5.19 have no memory.peak.
  REQUIRE(unlink(t.Cell("web", "memory.peak").c_str()) == 0);
  CHECK(t.driver->Stats("web")->memory_peak == 0);

  SetFile(t.Cell("web", "memory.current"), "lots\n");
  absl::Status bad = t.driver->Stats("web").status();
  CHECK(absl::IsInvalidArgument(bad));
  CHECK(Contains(bad.message(), t.Cell("web", "memory.current")));
  CHECK(absl::IsNotFound(t.driver->Stats("nope").status()));
}

TEST_CASE("Pids lists the cell and the cgroups below it") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  SetFile(t.Cell("web", "cgroup.procs"), "15\n12\n");
  REQUIRE(t.fake->MakeDir(t.Cell("web", "sub")).ok());
  SetFile(t.Cell("web", "sub/cgroup.procs"), "13\n12\n");
  CHECK(t.driver->Pids("web").value() == std::vector<pid_t>{12, 13, 15});
  SetFile(t.Cell("web", "cgroup.procs"), "x\n");
  CHECK(absl::IsInvalidArgument(t.driver->Pids("web").status()));
}

TEST_CASE("AddProcess and OpenJoin target the cell's cgroup.procs") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  REQUIRE(t.driver->AddProcess("web", 4242).ok());
  CHECK(FileContent(t.Cell("web", "cgroup.procs")) == "4242\n");

  REQUIRE(t.driver->Create("join", {}).ok());
  auto join = t.driver->OpenJoin("join");
  REQUIRE_MESSAGE(join.ok(), join.status().ToString());
  // v2 joins through the directory alone: clone3 into it, or its
  // cgroup.procs opened from it.
  CHECK(join->procs_fds.empty());
  REQUIRE(join->dir_fd.valid());
  struct stat st;
  REQUIRE(fstat(join->dir_fd.get(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((fcntl(join->dir_fd.get(), F_GETFD) & FD_CLOEXEC) != 0);
  int procs = openat(join->dir_fd.get(), "cgroup.procs", O_WRONLY);
  REQUIRE(procs >= 0);
  REQUIRE(write(procs, "0", 1) == 1);
  close(procs);
  CHECK(FileContent(t.Cell("join", "cgroup.procs")) == "0");
  CHECK(absl::IsNotFound(t.driver->OpenJoin("nope").status()));
}

TEST_CASE("List shows cells only") {
  V2Tree t;
  REQUIRE(t.driver->Create("b", {}).ok());
  REQUIRE(t.driver->Create("a", {}).ok());
  CHECK(t.driver->List().value() == std::vector<std::string>{"a", "b"});
}

TEST_CASE("Destroy refuses a cell with processes and removes children first") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  REQUIRE(t.fake->MakeDir(t.Cell("web", "inner")).ok());
  SetFile(t.Cell("web", "inner/cgroup.procs"), "77\n");
  absl::Status busy = t.driver->Destroy("web");
  CHECK(absl::IsFailedPrecondition(busy));
  CHECK(Contains(busy.message(), "cell web still holds 1 processes (pids 77)"));
  CHECK(t.driver->Exists("web").value());

  SetFile(t.Cell("web", "inner/cgroup.procs"), "");
  REQUIRE(t.driver->Destroy("web").ok());
  CHECK_FALSE(t.driver->Exists("web").value());
  CHECK(absl::IsNotFound(t.driver->Destroy("web")));
}

TEST_CASE("KillAll uses cgroup.kill and waits for the cell to empty") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  SetFile(t.Cell("web", "cgroup.procs"), "999999\n");
  SetFile(t.Cell("web", "cgroup.events"), "populated 1\nfrozen 0\n");
  REQUIRE(t.driver->KillAll("web").ok());
  CHECK(t.fake->WritesTo("/web/cgroup.kill") == std::vector<std::string>{"1"});
  CHECK(t.driver->Pids("web").value().empty());
}

TEST_CASE("KillAll without cgroup.kill freezes, kills, thaws, and times out") {
  V2Tree t;
  REQUIRE(t.driver->Create("web", {}).ok());
  REQUIRE(unlink(t.Cell("web", "cgroup.kill").c_str()) == 0);
  t.driver->set_kill_timeout(absl::Milliseconds(300));
  // A real process is listed so the SIGKILL is observable; the fake cannot
  // drop it from cgroup.procs, so the cell never empties.
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  SetFile(t.Cell("web", "cgroup.procs"), std::to_string(child) + "\n");
  SetFile(t.Cell("web", "cgroup.events"), "populated 1\nfrozen 0\n");
  absl::Status status = t.driver->KillAll("web");
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  CHECK(WIFSIGNALED(wstatus));
  CHECK(WTERMSIG(wstatus) == SIGKILL);
  CHECK(absl::IsDeadlineExceeded(status));
  CHECK(Contains(status.message(), "cell web: 1 processes survived SIGKILL"));
  CHECK(Contains(status.message(), std::to_string(child)));
  std::vector<std::string> freezes = t.fake->WritesTo("/web/cgroup.freeze");
  REQUIRE(freezes.size() >= 2);
  CHECK(freezes.front() == "1");
  CHECK(freezes.back() == "0");  // never left frozen
  CHECK(FileContent(t.Cell("web", "cgroup.events")) ==
        "populated 1\nfrozen 0\n");
}

}  // namespace
}  // namespace mycel
