// The cgroup driver against the real kernel: limits are enforced, not just
// written. One source, built twice: cgroup_v1_kernel_test
// (MYCEL_CGROUP_WANT="v1") runs on v1/hybrid hosts and cgroup_v2_kernel_test
// ("v2") on pure cgroup2 hosts (the QEMU guest). A binary whose host does
// not match, or that is not root, is skipped (tests/testing/requires.h) and
// says why.
//
// Every test works in its own subtree /sys/fs/cgroup/[<hierarchy>/]
// mycel-test-<pid> and removes it, processes included, even when an
// assertion fails.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/cgroup/cgroup_v1.h"
#include "runtime/cgroup/cgroup_v2.h"
#include "runtime/host_info.h"
#include "tests/testing/requires.h"

#ifndef MYCEL_CGROUP_WANT
#error "build with -DMYCEL_CGROUP_WANT=\"v1\" or \"v2\""
#endif

namespace mycel {
namespace {

constexpr char kMountRoot[] = "/sys/fs/cgroup";
constexpr int64_t kMiB = int64_t{1} << 20;

// Named after the test process; computed once, so forked children that
// call it still name their parent's subtree.
const std::string& Subtree() {
  static const std::string* const subtree =
      new std::string(absl::StrCat("mycel-test-", getpid()));
  return *subtree;
}

CgroupMode HostMode() {
  std::string unified;
  return DetectCgroupMode(kMountRoot, &unified);
}

bool ModeMatches(CgroupMode mode) {
  absl::string_view want = MYCEL_CGROUP_WANT;
  if (want == "v2") return mode == CgroupMode::kV2;
  return mode == CgroupMode::kV1 || mode == CgroupMode::kHybrid;
}

// rmdir of the test subtree in every hierarchy (cells must be gone).
void RemoveSubtree() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> candidates = {
      absl::StrCat(kMountRoot, "/", Subtree())};
  for (const auto& entry : fs::directory_iterator(kMountRoot, ec)) {
    if (entry.is_directory(ec)) {
      candidates.push_back(absl::StrCat(entry.path().string(), "/", Subtree()));
    }
  }
  for (const std::string& dir : candidates) {
    if (rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      fprintf(stderr, "cleanup: rmdir %s: %s\n", dir.c_str(), strerror(errno));
    }
  }
}

void ReapChildren() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// Why this host cannot run these tests (not root, another cgroup mode, no
// usable hierarchy), or "" when it can. Making the driver once also shows
// that the subtree can be made; it is removed again.
std::string HostProblem() {
  if (geteuid() != 0) return "creating cgroups needs root";
  CgroupMode mode = HostMode();
  if (!ModeMatches(mode)) {
    return absl::StrCat("this host's cgroup mode is ", CgroupModeName(mode),
                        "; the ", MYCEL_CGROUP_WANT,
                        " driver's kernel tests need a ",
                        absl::string_view(MYCEL_CGROUP_WANT) == "v2"
                            ? "pure cgroup2 host (run them in the QEMU guest)"
                            : "cgroup v1 or hybrid host");
  }
  auto driver = NewCgroupDriver(mode, kMountRoot, Subtree());
  RemoveSubtree();
  if (absl::IsFailedPrecondition(driver.status())) {
    return std::string(driver.status().message());
  }
  return "";
}
MYCEL_TEST_REQUIRES(HostProblem());

// Makes the test process a child subreaper before any test starts, so
// orphans from the cells come back to it and are reaped.
struct Subreaper : public doctest::IReporter {
  explicit Subreaper(const doctest::ContextOptions&) {}
  void test_run_start() override { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }
  void report_query(const doctest::QueryData&) override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("cgroup_subreaper", 1, Subreaper);

// The host's driver on the test subtree; its destructor kills and removes
// every cell and the subtree, so a failed REQUIRE leaves nothing behind.
struct Cells {
  Cells() {
    auto made = NewCgroupDriver(HostMode(), kMountRoot, Subtree());
    REQUIRE_MESSAGE(made.ok(), made.status().ToString());
    driver = std::move(*made);
  }
  ~Cells() {
    auto cells = driver->List();
    for (const std::string& cell :
         cells.ok() ? *cells : std::vector<std::string>{}) {
      absl::Status killed = driver->KillAll(cell);
      ReapChildren();
      absl::Status destroyed = driver->Destroy(cell);
      if (!killed.ok() || !destroyed.ok()) {
        fprintf(stderr, "cleanup of cell %s: %s / %s\n", cell.c_str(),
                killed.ToString().c_str(), destroyed.ToString().c_str());
      }
    }
    ReapChildren();
    RemoveSubtree();
  }

  // The kernel file `file` of `cell` for `controller` (ignored on v2).
  std::string File(const std::string& controller, const std::string& cell,
                   const std::string& file) const {
    if (auto* v1 = dynamic_cast<CgroupV1*>(driver.get())) {
      return absl::StrCat(v1->CellDir(controller, cell), "/", file);
    }
    auto* v2 = dynamic_cast<CgroupV2*>(driver.get());
    return absl::StrCat(v2->CellDir(cell), "/", file);
  }
  bool v2() const { return driver->name() == "v2"; }

  std::unique_ptr<CgroupDriver> driver;
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Forks a child that joins the cell through `join` (async-signal-safe
// writes, as the spawn layer will do) and exits with body()'s result;
// 120+i if joining v1 hierarchy i failed, 119 if joining the v2 cgroup did. The
// test binary is single-threaded, so the child may run ordinary code.
pid_t ForkInCell(const CgroupJoin& join, const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  for (size_t i = 0; i < join.procs_fds.size(); ++i) {
    if (write(join.procs_fds[i].get(), "0", 1) != 1) _exit(120 + i);
  }
  if (join.dir_fd.valid()) {
    int procs = openat(join.dir_fd.get(), "cgroup.procs", O_WRONLY);
    if (procs < 0 || write(procs, "0", 1) != 1) _exit(119);
  }
  _exit(body());
}

// Waits for `pid` at most `timeout`; returns its wait status, or -1 after
// killing it on timeout.
int WaitFor(pid_t pid, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (absl::Now() < deadline) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    absl::SleepFor(absl::Milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

bool SwapActive() {
  std::vector<std::string> lines =
      absl::StrSplit(Read("/proc/swaps"), '\n', absl::SkipEmpty());
  return lines.size() > 1;  // a header line, then one per swap area
}

// How many of `pid`'s cgroup memberships are the cell (v2: one line; v1:
// one per hierarchy mycel uses).
int MembershipsIn(pid_t pid, const std::string& cell) {
  std::string suffix = absl::StrCat(":/", Subtree(), "/", cell);
  int n = 0;
  for (absl::string_view line :
       absl::StrSplit(Read(absl::StrCat("/proc/", pid, "/cgroup")), '\n')) {
    if (absl::EndsWith(line, suffix)) ++n;
  }
  return n;
}

TEST_CASE("memory_max is enforced by the OOM killer") {
  Cells t;
  CgroupLimits limits;
  limits.memory_max = 32 * kMiB;
  limits.memory_swap_max = 0;
  absl::Status created = t.driver->Create("oom", limits);
  // Without swap accounting the driver refuses a swap limit, naming it,
  // rather than pretend to apply it; a memory limit alone still forces the
  // OOM kill when there is no swap to spill into.
  const bool no_swap_accounting = absl::IsFailedPrecondition(created);
  if (no_swap_accounting) {
    CHECK(absl::StartsWith(created.message(), "memory_swap_max: "));
    limits.memory_swap_max.reset();
    created = t.driver->Create("oom", limits);
  }
  REQUIRE_MESSAGE(created.ok(), created.ToString());
  if (t.v2()) {
    CHECK(Read(t.File("memory", "oom", "memory.max")) == "33554432\n");
  } else {
    CHECK(Read(t.File("memory", "oom", "memory.limit_in_bytes")) ==
          "33554432\n");
  }
  // With swap on and no swap accounting the cell swaps instead of being
  // killed: the refusal and the memory limit above are what this host
  // can show.
  if (no_swap_accounting && SwapActive()) return;

  auto join = t.driver->OpenJoin("oom");
  REQUIRE_MESSAGE(join.ok(), join.status().ToString());
  pid_t child = ForkInCell(*join, [] {
    // 256 MiB in 1 MiB mappings: a single large mapping could be refused
    // by the overcommit heuristic on a small machine (a 256 MiB guest)
    // before the cgroup limit is ever reached.
    for (int chunk = 0; chunk < 256; ++chunk) {
      void* mem = mmap(nullptr, kMiB, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED) return 2;
      char* bytes = static_cast<char*>(mem);
      for (size_t i = 0; i < kMiB; i += 4096) bytes[i] = 1;
    }
    return 0;  // the limit was not enforced
  });
  REQUIRE(child > 0);
  int status = WaitFor(child, absl::Seconds(60));
  REQUIRE(status != -1);
  CHECK_MESSAGE(WIFSIGNALED(status), "exit code " << WEXITSTATUS(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  auto stats = t.driver->Stats("oom");
  REQUIRE_MESSAGE(stats.ok(), stats.status().ToString());
  CHECK(stats->oom_kills >= 1);
  CHECK(stats->memory_peak > 16 * kMiB);
  CHECK(stats->memory_peak <= 32 * kMiB);
}

TEST_CASE("pids_max contains a fork bomb") {
  Cells t;
  CgroupLimits limits;
  limits.pids_max = 20;
  REQUIRE(t.driver->Create("forks", limits).ok());
  auto join = t.driver->OpenJoin("forks");
  REQUIRE(join.ok());

  // Forks for 2 s; exit 0 if fork failed with EAGAIN (and nothing else).
  pid_t child = ForkInCell(*join, [] {
    absl::Time end = absl::Now() + absl::Seconds(2);
    int eagain = 0, other = 0;
    while (absl::Now() < end) {
      pid_t p = fork();
      if (p == 0) {
        pause();
        _exit(0);
      }
      if (p < 0) (errno == EAGAIN ? eagain : other)++;
    }
    return other > 0 ? 2 : eagain > 0 ? 0 : 1;
  });
  REQUIRE(child > 0);
  // The processes in the cell, and pids.current. The kernel charges a fork
  // first and takes the charge back when it passes the limit
  // (pids_try_charge), so a read can see pids.current at the limit plus
  // the one fork being refused; the processes never pass it.
  int64_t max_seen = 0;
  size_t max_procs = 0;
  int status = 0;
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (waitpid(child, &status, WNOHANG) == 0 && absl::Now() < deadline) {
    auto stats = t.driver->Stats("forks");
    REQUIRE(stats.ok());
    max_seen = std::max(max_seen, stats->pids_current);
    auto procs = t.driver->Pids("forks");
    REQUIRE(procs.ok());
    max_procs = std::max(max_procs, procs->size());
    absl::SleepFor(absl::Milliseconds(5));
  }
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0,
                "1: fork never failed; 2: it failed with another errno");
  CHECK(max_procs <= 20);
  CHECK(max_seen <= 21);  // one fork forks at a time
  CHECK(max_seen >= 15);  // the bomb did run into the limit

  auto pids = t.driver->Pids("forks");
  REQUIRE(pids.ok());
  CHECK(pids->size() >= 15);  // the paused grandchildren
  CHECK(pids->size() <= 20);

  REQUIRE(t.driver->KillAll("forks").ok());
  CHECK(t.driver->Pids("forks")->empty());
  ReapChildren();
  REQUIRE(t.driver->Destroy("forks").ok());
  CHECK_FALSE(t.driver->Exists("forks").value());
}

TEST_CASE("cpu_max and cpu_weight reach the kernel and bound the usage") {
  Cells t;
  CgroupLimits limits;
  limits.cpu_max = 0.5;
  limits.cpu_weight = 200;
  REQUIRE(t.driver->Create("cpu", limits).ok());
  if (t.v2()) {
    CHECK(Read(t.File("cpu", "cpu", "cpu.max")) == "50000 100000\n");
    CHECK(Read(t.File("cpu", "cpu", "cpu.weight")) == "200\n");
  } else {
    CHECK(Read(t.File("cpu", "cpu", "cpu.cfs_quota_us")) == "50000\n");
    CHECK(Read(t.File("cpu", "cpu", "cpu.cfs_period_us")) == "100000\n");
    CHECK(Read(t.File("cpu", "cpu", "cpu.shares")) == "2048\n");
  }

  // Enforcement: two busy processes against a tenth of a core. Their
  // demand stays far above the quota even on a loaded host, so the kernel
  // must throttle them; without a quota they would use several times more.
  CgroupLimits tight;
  tight.cpu_max = 0.1;
  REQUIRE(t.driver->Update("cpu", tight).ok());
  if (t.v2()) {
    CHECK(Read(t.File("cpu", "cpu", "cpu.max")) == "10000 100000\n");
  } else {
    CHECK(Read(t.File("cpu", "cpu", "cpu.cfs_quota_us")) == "10000\n");
  }
  auto join = t.driver->OpenJoin("cpu");
  REQUIRE(join.ok());
  absl::Time start = absl::Now();
  pid_t child = ForkInCell(*join, [] {
    pid_t twin = fork();  // inherits the cell
    absl::Time end = absl::Now() + absl::Seconds(2);
    volatile uint64_t spin = 0;
    while (absl::Now() < end) spin = spin + 1;
    if (twin == 0) _exit(0);
    if (twin > 0) waitpid(twin, nullptr, 0);
    return twin > 0 ? 0 : 1;
  });
  REQUIRE(child > 0);
  int status = WaitFor(child, absl::Seconds(60));
  absl::Duration elapsed = absl::Now() - start;
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  auto stats = t.driver->Stats("cpu");
  REQUIRE(stats.ok());
  // A tenth of a core over the run, plus room for the kernel's accounting
  // granularity (QEMU TCG overshoots by up to ~0.1 core).
  uint64_t allowed =
      static_cast<uint64_t>(absl::ToInt64Microseconds(elapsed) / 4);
  std::string cpu_stat = Read(t.File("cpu", "cpu", "cpu.stat"));
  int64_t throttled = -1;
  for (absl::string_view line : absl::StrSplit(cpu_stat, '\n')) {
    if (absl::ConsumePrefix(&line, "nr_throttled ")) {
      CHECK(absl::SimpleAtoi(line, &throttled));
    }
  }
  MESSAGE("busy for " << absl::FormatDuration(elapsed) << ", used "
                      << stats->cpu_usage_usec << " us of CPU (allowed "
                      << allowed << "), throttled in " << throttled
                      << " periods");
  CHECK(stats->cpu_usage_usec >= 50000);    // Stats sees the usage
  CHECK(stats->cpu_usage_usec <= allowed);  // about a tenth of a core
  CHECK(throttled >= 1);                    // the quota did the limiting

  REQUIRE(t.driver->Update("cpu", {}).ok());
  if (t.v2()) {
    CHECK(Read(t.File("cpu", "cpu", "cpu.max")) == "max 100000\n");
  } else {
    CHECK(Read(t.File("cpu", "cpu", "cpu.cfs_quota_us")) == "-1\n");
    CHECK(Read(t.File("cpu", "cpu", "cpu.shares")) == "1024\n");
  }
}

TEST_CASE("cpuset_cpus pins the cell's processes") {
  Cells t;
  int cpu = sysconf(_SC_NPROCESSORS_ONLN) >= 2 ? 1 : 0;
  CgroupLimits limits;
  limits.cpuset_cpus = std::to_string(cpu);
  absl::Status created = t.driver->Create("pinned", limits);
  if (absl::IsFailedPrecondition(created)) {
    // No cpuset controller on this host: the driver refuses the limit and
    // names it, rather than leave the cell unpinned.
    CHECK(absl::StartsWith(created.message(), "cpuset_cpus: "));
    return;
  }
  REQUIRE_MESSAGE(created.ok(), created.ToString());
  CHECK(Read(t.File("cpuset", "pinned", "cpuset.cpus")) ==
        limits.cpuset_cpus + "\n");

  auto join = t.driver->OpenJoin("pinned");
  REQUIRE(join.ok());
  pid_t child = ForkInCell(*join, [cpu] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 2;
    return CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set) ? 0 : 1;
  });
  REQUIRE(child > 0);
  int status = WaitFor(child, absl::Seconds(30));
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0,
                "the child's affinity is not exactly CPU " << cpu);
}

TEST_CASE("AddProcess moves a running process into every hierarchy") {
  Cells t;
  REQUIRE(t.driver->Create("moved", {}).ok());
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  REQUIRE(t.driver->AddProcess("moved", child).ok());
  CHECK(t.driver->Pids("moved").value() == std::vector<pid_t>{child});
  auto join = t.driver->OpenJoin("moved");
  REQUIRE(join.ok());
  // One membership per v1 hierarchy, or the one v2 cgroup.
  CHECK(MembershipsIn(child, "moved") ==
        static_cast<int>(join->procs_fds.size()) + (join->dir_fd.valid()));
  REQUIRE(t.driver->KillAll("moved").ok());
  int status = WaitFor(child, absl::Seconds(10));
  CHECK(WIFSIGNALED(status));
}

TEST_CASE("KillAll kills a process tree, orphans included") {
  Cells t;
  REQUIRE(t.driver->Create("tree", {}).ok());
  auto join = t.driver->OpenJoin("tree");
  REQUIRE(join.ok());
  pid_t child = ForkInCell(*join, [] {
    if (fork() == 0) {  // a sleeping child
      pause();
      _exit(0);
    }
    pid_t middle = fork();
    if (middle == 0) {  // double fork: the grandchild is orphaned
      if (fork() == 0) {
        pause();
        _exit(0);
      }
      _exit(0);
    }
    waitpid(middle, nullptr, 0);
    pause();
    return 0;
  });
  REQUIRE(child > 0);

  std::vector<pid_t> pids;
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    pids = t.driver->Pids("tree").value();
    if (pids.size() == 3) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  REQUIRE(pids.size() == 3);  // the child, its child, the orphan

  absl::Status busy = t.driver->Destroy("tree");
  CHECK(absl::IsFailedPrecondition(busy));
  CHECK(absl::StrContains(busy.message(), "cell tree"));

  REQUIRE(t.driver->KillAll("tree").ok());
  CHECK(t.driver->Pids("tree")->empty());
  int status = WaitFor(child, absl::Seconds(5));
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  for (pid_t pid : pids) {
    // Dead: gone already, or a zombie that this subreaper now collects.
    bool dead = kill(pid, 0) != 0 || waitpid(pid, nullptr, WNOHANG) == pid;
    CHECK_MESSAGE(dead, "pid " << pid << " survived");
  }
  ReapChildren();
  REQUIRE(t.driver->Destroy("tree").ok());
  CHECK_FALSE(t.driver->Exists("tree").value());
  CHECK(t.driver->List()->empty());
}

TEST_CASE("cells are listed for adoption by the next driver; one at a time") {
  Cells t;
  REQUIRE(t.driver->Create("b", {}).ok());
  REQUIRE(t.driver->Create("a", {}).ok());
  // While a driver holds the subtree, a second one is refused: two daemons
  // given the same subtree would take each other's cells.
  auto second = NewCgroupDriver(HostMode(), kMountRoot, Subtree());
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(second.status().message().find("in use by another myceld") !=
        absl::string_view::npos);
  // Once it is gone (a daemon that exited or was killed), the next one
  // finds the cells.
  t.driver.reset();
  auto again = NewCgroupDriver(HostMode(), kMountRoot, Subtree());
  REQUIRE(again.ok());
  t.driver = *std::move(again);
  CHECK(t.driver->List().value() == std::vector<std::string>{"a", "b"});
  CHECK(absl::IsAlreadyExists(t.driver->Create("a", {})));
}

TEST_CASE("clone3 CLONE_INTO_CGROUP starts a child in the cell (v2)") {
  Cells t;
  REQUIRE(t.driver->Create("into", {}).ok());
  auto join = t.driver->OpenJoin("into");
  REQUIRE(join.ok());
  if (!t.v2()) {
    // v1 has no CLONE_INTO_CGROUP: the join is by cgroup.procs fds only.
    CHECK_FALSE(join->dir_fd.valid());
    CHECK_FALSE(join->procs_fds.empty());
    return;
  }
  REQUIRE(join->dir_fd.valid());
  struct clone_args args = {};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(join->dir_fd.get());
  long pid = syscall(SYS_clone3, &args, sizeof(args));
  // clone3 is in every kernel since 5.3; ENOSYS here would be a seccomp
  // filter around the test (runtime/spawn falls back to clone(2) then, and
  // spawn_cgroup_v2_test covers that).
  REQUIRE_MESSAGE(pid >= 0, "clone3: ", strerror(errno));
  if (pid == 0) {
    // Already in the cell before running a single instruction of its own.
    _exit(MembershipsIn(getpid(), "into") == 1 ? 0 : 1);
  }
  int status = WaitFor(static_cast<pid_t>(pid), absl::Seconds(10));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace mycel
