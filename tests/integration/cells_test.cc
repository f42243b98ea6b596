// Cells and executables against a real myceld, as root on the real kernel:
// limits the kernel applies, namespaces, seccomp, restart policies, logs,
// adoption after kill -9, and the errors a client sees for bad input.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"
#include "tests/testing/requires.h"

namespace mycel {
namespace {

using testing::CommandResult;
using testing::DaemonProcess;
using testing::TempDir;

MYCEL_TEST_REQUIRES(testing::Root("cells: cgroups and namespaces"));

std::unique_ptr<grpc::ClientContext> Call() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(30));
  return ctx;
}

// Polls `mycel -o json ps` until `pred(executable json)` holds for CELL/EXE.
mycel::v1::Executable WaitFor(
    const DaemonProcess& d, const std::string& cell, const std::string& name,
    const std::function<bool(const mycel::v1::Executable&)>& pred,
    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  mycel::v1::Executable exe;
  auto stub = mycel::v1::Executables::NewStub(grpc::CreateChannel(
      "unix:" + d.socket(), grpc::InsecureChannelCredentials()));
  while (std::chrono::steady_clock::now() < deadline) {
    mycel::v1::ExecutableRef ref;
    ref.set_cell(cell);
    ref.set_name(name);
    if (stub->Get(Call().get(), ref, &exe).ok() && pred(exe)) return exe;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("timed out waiting for ", cell, "/", name, ": ", exe.ShortDebugString());
  return exe;
}

class Node {
 public:
  explicit Node(std::vector<std::string> extra = {})
      : d_(dir_.path(), std::move(extra)) {
    REQUIRE(d_.Start());
  }
  DaemonProcess& d() { return d_; }
  CommandResult Cli(std::vector<std::string> args) {
    return d_.Cli(std::move(args));
  }
  std::shared_ptr<grpc::Channel> Channel() {
    return grpc::CreateChannel("unix:" + d_.socket(),
                               grpc::InsecureChannelCredentials());
  }

 private:
  TempDir dir_;
  DaemonProcess d_;
};

TEST_CASE("two nodes on one host keep same-named cells apart by subtree") {
  const std::string sub_a = absl::StrCat("mycel-test-a-", getpid());
  const std::string sub_b = absl::StrCat("mycel-test-b-", getpid());
  // Where the kernel keeps a cell's memory limit: v1 per controller, v2 in
  // the one tree.
  auto limit = [](const std::string& sub) {
    absl::StatusOr<std::string> v1 = ReadFile(absl::StrCat(
        "/sys/fs/cgroup/memory/", sub, "/same/memory.limit_in_bytes"));
    if (v1.ok()) return *v1;
    return ReadFile(absl::StrCat("/sys/fs/cgroup/", sub, "/same/memory.max"))
        .value_or("");
  };
  {
    Node a({"--cgroup-subtree", sub_a});
    Node b({"--cgroup-subtree", sub_b});
    CHECK(a.Cli({"cell", "create", "same", "--memory-max", "32M"}).exit_code ==
          0);
    CHECK(b.Cli({"cell", "create", "same", "--memory-max", "48M"}).exit_code ==
          0);
    CHECK(limit(sub_a) == absl::StrCat(32 << 20, "\n"));
    CHECK(limit(sub_b) == absl::StrCat(48 << 20, "\n"));
    // Deleting one leaves the other whole.
    CHECK(a.Cli({"cell", "rm", "same"}).exit_code == 0);
    CHECK(limit(sub_a).empty());
    CHECK(limit(sub_b) == absl::StrCat(48 << 20, "\n"));
    CommandResult run = b.Cli({"exec", "same", "--", "/bin/true"});
    CHECK_MESSAGE(run.exit_code == 0, run.err);
    CHECK(b.Cli({"cell", "rm", "--force", "same"}).exit_code == 0);
  }
  // The subtrees themselves are the test's to remove.
  for (const std::string& sub : {sub_a, sub_b}) {
    rmdir(absl::StrCat("/sys/fs/cgroup/", sub).c_str());
    for (const char* c :
         {"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}) {
      rmdir(absl::StrCat("/sys/fs/cgroup/", c, "/", sub).c_str());
    }
  }
}

TEST_CASE("bad cell input is INVALID_ARGUMENT naming the field") {
  Node n;
  auto cells = mycel::v1::Cells::NewStub(n.Channel());
  auto create = [&](const std::string& text) {
    mycel::v1::CreateCellRequest req;
    REQUIRE(
        google::protobuf::util::JsonStringToMessage(text, req.mutable_spec())
            .ok());
    mycel::v1::Cell out;
    return cells->Create(Call().get(), req, &out);
  };
  struct Case {
    const char* spec;
    const char* want;
  } cases[] = {
      {R"({"name": "../etc"})", "name:"},
      {R"({"name": "Upper"})", "name:"},
      {R"({"name": ""})", "name: must not be empty"},
      {R"({"name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})",
       "name:"},
      {R"({"name": "c1", "limits": {"cpu_max": 0}})", "cpu_max"},
      {R"({"name": "c1", "limits": {"memory_max": 4096}})", "memory_max"},
      {R"({"name": "c1", "limits": {"pids_max": 0}})", "pids_max"},
      {R"({"name": "c1", "seccomp": "lax"})", "seccomp"},
      {R"({"name": "c1", "seccomp_deny": ["nosuchcall"]})", "seccomp_deny"},
      {R"({"name": "c1", "capabilities": ["CAP_NOPE"]})", "capabilities"},
      {R"({"name": "c1", "rootfs": "/tmp"})", "rootfs"},
  };
  for (const Case& c : cases) {
    grpc::Status st = create(c.spec);
    CHECK_MESSAGE(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT,
                  c.spec);
    CHECK_MESSAGE(st.error_message().find(c.want) != std::string::npos, c.spec,
                  " -> ", st.error_message());
  }
  // Nothing was created along the way.
  CHECK(n.Cli({"cell", "ls"}).out ==
        "NAME  ISOLATE  LIMITS  SECCOMP  RUNNING\n");

  REQUIRE(n.Cli({"cell", "create", "c1"}).exit_code == 0);
  auto dup = n.Cli({"cell", "create", "c1"});
  CHECK(dup.exit_code == 1);
  CHECK(dup.err == "mycel: cell \"c1\" already exists\n");
  auto missing = n.Cli({"exec", "c1", "--", "/no/such/program"});
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("command") != std::string::npos);
  auto nocell = n.Cli({"exec", "nope", "--", "/bin/true"});
  CHECK(nocell.err == "mycel: cell \"nope\" not found\n");
  auto env = n.Cli({"exec", "c1", "-e", "NOEQUALS", "--", "/bin/true"});
  CHECK(env.err.find("env[0]") != std::string::npos);
  CHECK(n.Cli({"cell", "create", "c2", "--memory-max", "lots"}).exit_code == 2);
}

TEST_CASE("deleting a cell with running executables needs --force") {
  Node n;
  REQUIRE(n.Cli({"cell", "create", "busy"}).exit_code == 0);
  REQUIRE(
      n.Cli({"exec", "busy", "--name", "s", "--", "sleep", "60"}).exit_code ==
      0);
  auto rm = n.Cli({"cell", "rm", "busy"});
  CHECK(rm.exit_code == 1);
  CHECK(rm.err.find("running executable") != std::string::npos);
  CHECK(n.Cli({"ps", "busy"}).out.find("running") != std::string::npos);
  CHECK(n.Cli({"cell", "rm", "--force", "busy"}).exit_code == 0);
  CHECK(n.Cli({"cell", "get", "busy"}).err ==
        "mycel: cell \"busy\" not found\n");
  CHECK(
      access(
          ("/sys/fs/cgroup/memory/" + n.d().cgroup_subtree() + "/busy").c_str(),
          F_OK) != 0);
}

// The directories below a v1 hierarchy's (or the v2) mycel subtree.
std::vector<std::string> CgroupsBelow(const std::string& subtree) {
  std::vector<std::string> names;
  for (const std::string& root :
       {absl::StrCat("/sys/fs/cgroup/memory/", subtree),
        absl::StrCat("/sys/fs/cgroup/", subtree)}) {
    auto ls = testing::Shell(absl::StrCat("ls -A ", root, " 2>/dev/null"));
    for (absl::string_view line : absl::StrSplit(ls.out, '\n')) {
      struct stat st;
      std::string path = absl::StrCat(root, "/", line);
      if (!line.empty() && stat(path.c_str(), &st) == 0 &&
          S_ISDIR(st.st_mode)) {
        names.emplace_back(line);
      }
    }
    if (!names.empty()) break;
  }
  return names;
}

// Polls `pred` every 25 ms until it holds or `limit` has passed.
bool WaitUntil(const std::function<bool()>& pred,
               std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return pred();
}

// For what the daemon leaves to its background queue: removing a deleted
// cell's cgroup, making and removing pooled blanks. That thread runs at
// nice 19 by design, and beside a busy test suite on two CPUs (a QEMU guest
// under TCG takes one whole) it can wait seconds for a CPU. The wait ends
// as soon as the work is done, so a long limit costs a passing run
// nothing. (A CI run saw a dead blank's cgroup stay for good: the init
// was killed while that thread was still making the blank, which then
// entered the pool dead; BlankPool::Make now drops such a blank.)
constexpr std::chrono::milliseconds kBackgroundWait = std::chrono::seconds(60);

// A pooled blank below `subtree` whose init runs in its cgroup (v1), or "".
std::string ReadyBlank(const std::string& subtree) {
  for (const std::string& c : CgroupsBelow(subtree)) {
    if (absl::StartsWith(c, ".pool-") &&
        !ReadFile(absl::StrCat("/sys/fs/cgroup/memory/", subtree, "/", c,
                               "/cgroup.procs"))
             .value_or("")
             .empty()) {
      return c;
    }
  }
  return "";
}

TEST_CASE("a deleted cell's name is free at once; its processes go soon") {
  const std::string sub = absl::StrCat("mycel-test-rm-", getpid());
  {
    Node n({"--cgroup-subtree", sub});
    REQUIRE(
        n.Cli({"cell", "create", "gone", "--isolate", "pid,mount"}).exit_code ==
        0);
    auto exec = n.Cli(
        {"-o", "json", "exec", "gone", "--name", "s", "--", "sleep", "60"});
    REQUIRE(exec.exit_code == 0);
    auto exe = WaitFor(n.d(), "gone", "s", [](const mycel::v1::Executable& e) {
      return e.status().pid() > 0;
    });
    const pid_t pid = static_cast<pid_t>(exe.status().pid());
    REQUIRE(n.Cli({"cell", "rm", "--force", "gone"}).exit_code == 0);
    // The same name again, at once, with a working executable.
    REQUIRE(
        n.Cli({"cell", "create", "gone", "--isolate", "pid,mount"}).exit_code ==
        0);
    auto run = n.Cli({"exec", "gone", "--name", "t", "--", "/bin/true"});
    CHECK_MESSAGE(run.exit_code == 0, run.err);
    WaitFor(n.d(), "gone", "t", [](const mycel::v1::Executable& e) {
      return e.status().state() == mycel::v1::EXECUTABLE_STATE_EXITED &&
             e.status().exit_code() == 0;
    });
    // The old cell's process is killed and its cgroup removed.
    CHECK(WaitUntil([&] {
      auto st = testing::Shell(
          absl::StrCat("awk '{print $3}' /proc/", pid, "/stat 2>/dev/null"));
      return st.out.empty() || st.out == "Z\n";
    }));
    CHECK(WaitUntil(
        [&] {
          std::vector<std::string> cells;
          for (const std::string& c : CgroupsBelow(sub)) {
            if (!absl::StartsWith(c, ".pool-")) cells.push_back(c);
          }
          return cells == std::vector<std::string>{"gone"};
        },
        kBackgroundWait));
    CHECK(n.Cli({"cell", "rm", "gone"}).exit_code == 0);
  }
  for (const char* c :
       {"", "cpu/", "cpuacct/", "memory/", "pids/", "freezer/", "cpuset/"}) {
    rmdir(absl::StrCat("/sys/fs/cgroup/", c, sub).c_str());
  }
}

TEST_CASE("a restarted myceld removes cgroups that a deleted cell left") {
  // On v1 a deleted cell's cgroup is renamed and removed in the background,
  // so a crash can leave a ".deleted-" cgroup; on v2 (no rename) one that a
  // crash left between making a cell's cgroup and recording it is the
  // same: a cgroup in the subtree that no cell record names.
  const bool v1 = access("/sys/fs/cgroup/memory", F_OK) == 0;
  const std::vector<std::string> hierarchies =
      v1 ? std::vector<std::string>{"cpu/",  "cpuacct/", "memory/",
                                    "pids/", "freezer/", "cpuset/"}
         : std::vector<std::string>{""};
  const std::string procs_in = v1 ? "memory/" : "";
  const std::string sub = absl::StrCat("mycel-test-left-", getpid());
  const std::string left = ".deleted-old-1-1";
  { Node n({"--cgroup-subtree", sub}); }  // makes the subtree
  // A crash between renaming a deleted cell's cgroup and removing it
  // leaves this: a ".deleted-" cgroup, perhaps with a process in it.
  std::string mkdirs;
  for (const std::string& h : hierarchies) {
    absl::StrAppend(&mkdirs, "mkdir /sys/fs/cgroup/", h, sub, "/", left, "; ");
  }
  auto made = testing::Shell(absl::StrCat(
      "set -e; ", mkdirs, "sh -c 'echo $$ > /sys/fs/cgroup/", procs_in, sub,
      "/", left, "/cgroup.procs; exec sleep 60' >/dev/null 2>&1 & echo $!"));
  REQUIRE_MESSAGE(made.exit_code == 0, made.err);
  pid_t pid = 0;
  REQUIRE(absl::SimpleAtoi(absl::StripAsciiWhitespace(made.out), &pid));
  REQUIRE(WaitUntil([&] {
    return ReadFile(absl::StrCat("/sys/fs/cgroup/", procs_in, sub, "/", left,
                                 "/cgroup.procs"))
               .value_or("") == absl::StrCat(pid, "\n");
  }));
  {
    Node n({"--cgroup-subtree", sub});
    CHECK(WaitUntil(
        [&] {
          std::vector<std::string> now = CgroupsBelow(sub);
          return std::find(now.begin(), now.end(), left) == now.end();
        },
        kBackgroundWait));
    CHECK(WaitUntil(
        [&] {
          auto st = testing::Shell(absl::StrCat("awk '{print $3}' /proc/", pid,
                                                "/stat 2>/dev/null"));
          return st.out.empty() || st.out == "Z\n";
        },
        kBackgroundWait));
  }
  kill(pid, SIGKILL);
  for (const std::string& h : hierarchies) {
    rmdir(absl::StrCat("/sys/fs/cgroup/", h, sub, "/", left).c_str());
    rmdir(absl::StrCat("/sys/fs/cgroup/", h, sub).c_str());
  }
}

TEST_CASE("memory.max is enforced: the process is OOM-killed and says so") {
  Node n;
  auto r = n.Cli(
      {"run", "--memory-max", "32M", "--memory-swap-max", "0", "--", "sh", "-c",
       "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived"});
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK(r.out.find("survived") == std::string::npos);
  CHECK(r.err.find("OOM") != std::string::npos);

  REQUIRE(n.Cli({"cell", "create", "mem", "--memory-max", "32M"}).exit_code ==
          0);
  REQUIRE(n.Cli({"exec", "mem", "--name", "hog", "--", "sh", "-c",
                 "x=$(head -c 200000000 /dev/zero | tr '\\0' a)"})
              .exit_code == 0);
  auto exe = WaitFor(n.d(), "mem", "hog", [](const mycel::v1::Executable& e) {
    return e.status().state() == mycel::v1::EXECUTABLE_STATE_EXITED;
  });
  CHECK(exe.status().oom_killed());
  CHECK(exe.status().signal() == SIGKILL);
  auto stats = n.Cli({"-o", "json", "cell", "stats", "mem"});
  CHECK(stats.out.find("\"oom_kills\": \"0\"") == std::string::npos);
}

TEST_CASE("pids.max contains a fork bomb") {
  Node n;
  REQUIRE(n.Cli({"cell", "create", "bomb", "--pids-max", "20"}).exit_code == 0);
  REQUIRE(
      n.Cli({"exec", "bomb", "--name", "b", "--", "sh", "-c",
             "i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; wait"})
          .exit_code == 0);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto stats = n.Cli({"-o", "json", "cell", "stats", "bomb"});
  REQUIRE(stats.exit_code == 0);
  mycel::v1::CellStats s;
  REQUIRE(google::protobuf::util::JsonStringToMessage(stats.out, &s).ok());
  CHECK(s.pids_current() <= 20);
  CHECK(s.pids_current() >= 10);  // it did fork, up to the limit
  CHECK(n.Cli({"cell", "rm", "--force", "bomb"}).exit_code == 0);
}

TEST_CASE("in a pid namespace the cell's own init is PID 1") {
  Node n;
  auto r =
      n.Cli({"run", "--isolate", "pid,mount,uts,ipc", "--name", "pidns", "--",
             "sh", "-c",
             // The init's argv is visible once its exec is done,
             // which may be a moment after the command starts.
             "for i in $(seq 500); do c=$(tr -d '\\0' < /proc/1/cmdline); "
             "[ -n \"$c\" ] && break; done; echo \"$c\"; echo $$; hostname; "
             "ls /proc | grep -c '^[0-9]'"});
  CHECK(r.exit_code == 0);
  std::vector<std::string> lines =
      absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "mycel-cell-init");
  CHECK(lines[1] != "1");
  CHECK(lines[2] == "pidns");
  int procs = 0;
  REQUIRE(absl::SimpleAtoi(lines[3], &procs));
  CHECK(procs <= 4);  // init, sh, ls, grep: not the host's processes
}

TEST_CASE("a cell made from the pool is the cell it was asked for") {
  const std::string sub = absl::StrCat("mycel-test-pool-", getpid());
  {
    Node n({"--cgroup-subtree", sub});
    // The first cell of these namespaces is made from scratch and asks for
    // a blank; the next ones take blanks, each with its own name, limits,
    // hostname and namespaces.
    for (int i = 0; i < 4; ++i) {
      const std::string name = absl::StrCat("pooled-", i);
      // The pool refills in the background; on a loaded machine it needs a
      // moment (without one every run may find it empty and make its own).
      // A blank is ready once its init runs in its cgroup.
      if (i > 0) {
        CHECK(WaitUntil([&] { return !ReadyBlank(sub).empty(); },
                        kBackgroundWait));
        // The init is in its cgroup before the pool holds the blank.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      auto r = n.Cli(
          {"run", "--isolate", "pid,mount,uts,ipc", "--name", name,
           "--memory-max", absl::StrCat(32 + i, "M"), "--pids-max", "50", "--",
           "sh", "-c",
           "cat /proc/1/cmdline | tr -d '\\0'; echo; hostname; "
           "ls /proc | grep -c '^[0-9]'; "
           "m=$(grep -E '^[0-9]+:memory:' /proc/self/cgroup | cut -d: -f3); "
           "echo \"$m\"; cat /sys/fs/cgroup/memory$m/memory.limit_in_bytes "
           "2>/dev/null || cat /sys/fs/cgroup$m/memory.max; "
           "ipcmk -M 4096 >/dev/null && ipcs -m | grep -c '^0x'; "
           "cut -d' ' -f19 /proc/1/stat"});
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      std::vector<std::string> lines =
          absl::StrSplit(r.out, '\n', absl::SkipEmpty());
      REQUIRE_MESSAGE(lines.size() == 7, r.out);
      CHECK(lines[0] == "mycel-cell-init");
      CHECK(lines[1] == name);
      int procs = 0;
      REQUIRE(absl::SimpleAtoi(lines[2], &procs));
      CHECK(procs <= 5);
      CHECK(lines[3] == absl::StrCat("/", sub, "/", name));
      CHECK(lines[4] == absl::StrCat((32 + i) << 20));
      CHECK(lines[5] == "1");  // its own IPC namespace: only its segment
      CHECK(lines[6] == "0");  // the init's nice value: not the pool's 19
    }
    CHECK(n.d().Log().find("from_pool=true") != std::string::npos);
  }
  // A stopped daemon leaves no blanks behind.
  CHECK(CgroupsBelow(sub).empty());
  {
    // A blank whose init died while it waited is not used: the next cell
    // is made from scratch, and the dead blank's cgroup goes.
    Node n({"--cgroup-subtree", sub});
    REQUIRE(
        n.Cli({"cell", "create", "first", "--isolate", "pid,uts"}).exit_code ==
        0);
    std::string blank;
    REQUIRE(WaitUntil(
        [&] {
          blank = ReadyBlank(sub);
          return !blank.empty();
        },
        kBackgroundWait));
    std::string procs = ReadFile(absl::StrCat("/sys/fs/cgroup/memory/", sub,
                                              "/", blank, "/cgroup.procs"))
                            .value_or("");
    pid_t init = 0;
    REQUIRE(absl::SimpleAtoi(absl::StripAsciiWhitespace(procs), &init));
    REQUIRE(kill(init, SIGKILL) == 0);
    CHECK(WaitUntil([&] {
      auto st = testing::Shell(
          absl::StrCat("awk '{print $3}' /proc/", init, "/stat 2>/dev/null"));
      return st.out.empty() || st.out == "Z\n";
    }));
    auto r = n.Cli(
        {"run", "--isolate", "pid,uts", "--name", "second", "--", "hostname"});
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out == "second\n");
    CHECK(WaitUntil(
        [&] {
          std::vector<std::string> now = CgroupsBelow(sub);
          return std::find(now.begin(), now.end(), blank) == now.end();
        },
        kBackgroundWait));
    // Limits the kernel refuses fail a pooled cell as they fail any other,
    // and leave nothing of it behind.
    REQUIRE(WaitUntil(
        [&] {
          for (const std::string& c : CgroupsBelow(sub)) {
            if (absl::StartsWith(c, ".pool-")) return true;
          }
          return false;
        },
        kBackgroundWait));
    // Memory nodes are left to the kernel to check: one past the last.
    std::string possible =
        ReadFile("/sys/devices/system/node/possible").value_or("0");
    int last_node = 0;
    std::string tail = possible.substr(possible.find_last_of("-,") + 1);
    if (possible.find_first_of("-,") == std::string::npos) tail = possible;
    REQUIRE(absl::SimpleAtoi(absl::StripAsciiWhitespace(tail), &last_node));
    auto bad = n.Cli({"cell", "create", "bad", "--isolate", "pid,uts",
                      "--cpuset-mems", absl::StrCat(last_node + 1)});
    CHECK(bad.exit_code == 1);
    CHECK_MESSAGE(bad.err.find("limits: cpuset_mems: ") != std::string::npos,
                  bad.err);
    CHECK(n.Cli({"cell", "get", "bad"}).exit_code == 1);
    CHECK(WaitUntil(
        [&] {
          std::vector<std::string> now = CgroupsBelow(sub);
          return std::find(now.begin(), now.end(), "bad") == now.end();
        },
        kBackgroundWait));
    CHECK(n.Cli({"cell", "rm", "first"}).exit_code == 0);
  }
  CHECK(CgroupsBelow(sub).empty());
  {
    // --cell-pool 0: no blanks, every cell made from scratch.
    Node n({"--cgroup-subtree", sub, "--cell-pool", "0"});
    for (const char* name : {"a", "b"}) {
      REQUIRE(n.Cli({"cell", "create", name, "--isolate", "pid,mount,uts"})
                  .exit_code == 0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(CgroupsBelow(sub) == std::vector<std::string>{"a", "b"});
    CHECK(n.d().Log().find("from_pool=true") == std::string::npos);
  }
  for (const char* c :
       {"", "cpu/", "cpuacct/", "memory/", "pids/", "freezer/", "cpuset/"}) {
    rmdir(absl::StrCat("/sys/fs/cgroup/", c, sub).c_str());
  }
}

TEST_CASE("a user namespace makes the cell's root an unprivileged host uid") {
  Node n;
  TempDir host;
  REQUIRE(chmod(host.path().c_str(), 0755) == 0);
  // Inside, the workload is root; outside, it is uid 100000 (the default
  // map), so the host's root-only files are closed to it.
  auto r = n.Cli({"run", "--isolate", "user,pid,mount", "--", "sh", "-c",
                  "id -u; grep -E '^(Uid|Gid):' /proc/self/status | cut -f2; "
                  "cat /etc/shadow >/dev/null 2>&1 || echo shadow-denied; "
                  "touch " +
                      host.Sub("made-by-cell") +
                      " 2>/dev/null || echo write-denied"});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "0\n0\n0\nshadow-denied\nwrite-denied\n");
  CHECK(access(host.Sub("made-by-cell").c_str(), F_OK) != 0);
  // Seen from the host: the long-running executable of such a cell.
  REQUIRE(
      n.Cli({"cell", "create", "u", "--isolate", "user,pid,mount"}).exit_code ==
      0);
  REQUIRE(n.Cli({"exec", "u", "--name", "s", "--", "sleep", "30"}).exit_code ==
          0);
  auto s = WaitFor(n.d(), "u", "s", [](const mycel::v1::Executable& e) {
    return e.status().state() == mycel::v1::EXECUTABLE_STATE_RUNNING;
  });
  auto status =
      testing::Shell(absl::StrCat("grep -E '^(Uid|Gid|Groups):' /proc/",
                                  s.status().pid(), "/status | sed 's/ *$//'"));
  CHECK(status.out ==
        "Uid:\t100000\t100000\t100000\t100000\n"
        "Gid:\t100000\t100000\t100000\t100000\n"
        "Groups:\t\n");
  CHECK(n.Cli({"cell", "rm", "--force", "u"}).exit_code == 0);
}

TEST_CASE(
    "the default seccomp profile denies unshare and mount; programs run") {
  Node n;
  auto ok = n.Cli({"run", "--", "sh", "-c", "echo hi | cat"});
  CHECK(ok.exit_code == 0);
  CHECK(ok.out == "hi\n");
  auto un = n.Cli({"run", "--", "unshare", "--mount", "true"});
  CHECK(un.exit_code == 1);
  CHECK(un.err.find("Operation not permitted") != std::string::npos);
  auto mnt = n.Cli({"run", "--", "mount", "-t", "tmpfs", "x", "/mnt"});
  CHECK(mnt.exit_code != 0);
  CHECK(mnt.err.find("permission denied") != std::string::npos);
  // An extra deny rule on top of the profile.
  auto deny = n.Cli({"run", "--seccomp-deny", "mkdir,mkdirat", "--", "mkdir",
                     "/tmp/x-never"});
  CHECK(deny.exit_code == 1);
  CHECK(deny.err.find("Operation not permitted") != std::string::npos);
  CHECK(access("/tmp/x-never", F_OK) != 0);
}

TEST_CASE("a cell without a pid namespace cannot signal PID 1 or myceld") {
  Node n;
  // Signal 0 only checks permission: the filter answers EPERM before the
  // kernel would say yes.
  auto r = n.Cli({"run", "--", "sh", "-c",
                  absl::StrCat("kill -0 1; echo $?; kill -0 ", n.d().pid(),
                               "; echo $?; kill -0 -1; echo $?; "
                               "kill -0 $$; echo $?")});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "1\n1\n1\n0\n");
  size_t refusals = 0;
  for (size_t at = r.err.find("Operation not permitted");
       at != std::string::npos;
       at = r.err.find("Operation not permitted", at + 1)) {
    ++refusals;
  }
  CHECK_MESSAGE(refusals == 3, r.err);
  // In its own pid namespace, PID 1 is the cell's init.
  auto own = n.Cli({"run", "--isolate", "pid,mount", "--", "sh", "-c",
                    "kill -0 1; echo $?"});
  CHECK(own.exit_code == 0);
  CHECK(own.out == "0\n");
}

TEST_CASE("mycel run: exit codes, 128+signal, stdout and stderr kept apart") {
  Node n;
  auto r = n.Cli({"run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(r.exit_code == 3);
  CHECK(r.out == "out\n");
  CHECK(r.err == "err\n");
  CHECK(n.Cli({"run", "--", "sh", "-c", "kill -TERM $$"}).exit_code ==
        128 + SIGTERM);
  auto nf = n.Cli({"run", "--", "no-such-program-xyz"});
  CHECK(nf.exit_code == 127);
  CHECK(n.Cli({"run", "--cpu-max", "0", "--", "true"}).exit_code == 125);
  // The throwaway cells are gone.
  CHECK(n.Cli({"cell", "ls"}).out ==
        "NAME  ISOLATE  LIMITS  SECCOMP  RUNNING\n");
}

TEST_CASE("restart policies restart as many times as they should") {
  Node n;
  REQUIRE(n.Cli({"cell", "create", "r"}).exit_code == 0);
  auto done = [](const mycel::v1::Executable& e) {
    return e.status().state() == mycel::v1::EXECUTABLE_STATE_EXITED ||
           e.status().state() == mycel::v1::EXECUTABLE_STATE_FAILED;
  };
  // on-failure, failing every time: 3 starts in the interval, then it gives up.
  REQUIRE(n.Cli({"exec", "r", "--name", "fails", "--restart", "on-failure",
                 "--restart-sec", "10ms", "--start-limit-burst", "3",
                 "--start-limit-interval", "30s", "--", "sh", "-c",
                 "echo run; exit 1"})
              .exit_code == 0);
  auto f = WaitFor(n.d(), "r", "fails", done);
  CHECK(f.status().state() == mycel::v1::EXECUTABLE_STATE_FAILED);
  CHECK(f.status().restarts() == 2);
  CHECK(f.status().exit_code() == 1);
  CHECK(f.status().message().find("start limit hit") != std::string::npos);
  CHECK(n.Cli({"logs", "r/fails"}).out == "run\nrun\nrun\n");
  // on-failure with success: no restart.
  REQUIRE(n.Cli({"exec", "r", "--name", "ok", "--restart", "on-failure", "--",
                 "true"})
              .exit_code == 0);
  auto ok = WaitFor(n.d(), "r", "ok", done);
  CHECK(ok.status().restarts() == 0);
  CHECK(ok.status().exit_code() == 0);
  // always: restarts clean exits too, up to the limit.
  REQUIRE(
      n.Cli({"exec", "r", "--name", "always", "--restart", "always",
             "--restart-sec", "10ms", "--start-limit-burst", "4", "--", "true"})
          .exit_code == 0);
  auto al = WaitFor(n.d(), "r", "always", done);
  CHECK(al.status().restarts() == 3);
  CHECK(al.status().state() == mycel::v1::EXECUTABLE_STATE_FAILED);
  // never: the exit code is recorded and that is all.
  REQUIRE(n.Cli({"exec", "r", "--name", "never", "--", "sh", "-c", "exit 4"})
              .exit_code == 0);
  auto nv = WaitFor(n.d(), "r", "never", done);
  CHECK(nv.status().restarts() == 0);
  CHECK(nv.status().exit_code() == 4);
  CHECK(n.Cli({"wait", "r/never"}).exit_code == 4);

  // The same through Executables.Wait, which sees each exit through the
  // pidfd before the reaper does: every exit still counts once, and the
  // restarts still happen.
  REQUIRE(n.Cli({"exec", "r", "--name", "waited", "--restart", "on-failure",
                 "--restart-sec", "10ms", "--start-limit-burst", "3",
                 "--start-limit-interval", "30s", "--", "sh", "-c",
                 "echo run; sleep 0.05; exit 3"})
              .exit_code == 0);
  CHECK(n.Cli({"wait", "r/waited"}).exit_code == 3);
  auto w = WaitFor(n.d(), "r", "waited", done);
  CHECK(w.status().state() == mycel::v1::EXECUTABLE_STATE_FAILED);
  CHECK(w.status().restarts() == 2);
  CHECK(n.Cli({"logs", "r/waited"}).out == "run\nrun\nrun\n");
}

TEST_CASE("stop: SIGTERM, then SIGKILL after the grace period") {
  Node n;
  REQUIRE(n.Cli({"cell", "create", "s"}).exit_code == 0);
  REQUIRE(
      n.Cli({"exec", "s", "--name", "polite", "--restart", "always", "--", "sh",
             "-c", "trap 'exit 7' TERM; while true; do sleep 0.1; done"})
          .exit_code == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto p = n.Cli({"-o", "json", "stop", "s/polite"});
  CHECK(p.exit_code == 0);
  CHECK(p.out.find("\"exit_code\": 7") != std::string::npos);
  CHECK(p.out.find("EXECUTABLE_STATE_EXITED") !=
        std::string::npos);  // not restarted
  REQUIRE(n.Cli({"exec", "s", "--name", "stubborn", "--", "sh", "-c",
                 "trap '' TERM; while true; do sleep 0.1; done"})
              .exit_code == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto start = std::chrono::steady_clock::now();
  auto k = n.Cli({"-o", "json", "stop", "s/stubborn", "--grace", "500ms"});
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(k.out.find("\"signal\": 9") != std::string::npos);
  CHECK(took >= std::chrono::milliseconds(450));
}

TEST_CASE("logs: files capture output; --tail and -f") {
  Node n;
  REQUIRE(n.Cli({"cell", "create", "l"}).exit_code == 0);
  REQUIRE(n.Cli({"exec", "l", "--name", "count", "--", "sh", "-c",
                 "for i in 1 2 3 4 5; do echo line$i; done; echo oops >&2; "
                 "sleep 0.5; "
                 "echo late"})
              .exit_code == 0);
  auto f = n.Cli({"logs", "-f", "l/count"});
  CHECK(f.exit_code == 0);
  CHECK(f.out == "line1\nline2\nline3\nline4\nline5\noops\nlate\n");
  CHECK(n.Cli({"logs", "--tail", "2", "l/count"}).out == "oops\nlate\n");
  std::string file = n.d().state_dir() + "/logs/l/count.log";
  CHECK(access(file.c_str(), R_OK) == 0);
  CHECK(n.Cli({"logs", "l/nope"}).exit_code == 1);

  // Deleting the cell takes its logs: a new cell of the same name starts
  // with none, and nothing is left on disk once the removal (which runs in
  // the background) is done.
  REQUIRE(n.Cli({"cell", "rm", "l"}).exit_code == 0);
  REQUIRE(n.Cli({"cell", "create", "l"}).exit_code == 0);
  CHECK(access(file.c_str(), F_OK) != 0);
  REQUIRE(n.Cli({"exec", "l", "--name", "count", "--", "true"}).exit_code == 0);
  WaitFor(n.d(), "l", "count", [](const mycel::v1::Executable& e) {
    return e.status().state() == mycel::v1::EXECUTABLE_STATE_EXITED;
  });
  CHECK(n.Cli({"logs", "l/count"}).out.empty());
  REQUIRE(n.Cli({"cell", "rm", "l"}).exit_code == 0);
  std::string logs = n.d().state_dir() + "/logs";
  auto empty = [&] {
    auto listing = testing::Shell("ls -A " + logs);
    return listing.exit_code == 0 && listing.out.empty();
  };
  for (int i = 0; i < 100 && !empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(empty());
}

TEST_CASE("executables are adopted after kill -9 of myceld, logs intact") {
  // This test process stands for what supervises myceld on a host
  // (systemd, say): the old daemon's workloads are reparented to it, and
  // it reaps them when they end.
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0);
  struct NoLongerSubreaper {
    ~NoLongerSubreaper() { prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); }
  } no_longer_subreaper;
  TempDir dir;
  std::string pid_before;
  {
    DaemonProcess d(dir.path());
    REQUIRE(d.Start());
    REQUIRE(
        d.Cli({"cell", "create", "keep", "--isolate", "pid,mount"}).exit_code ==
        0);
    REQUIRE(d.Cli({"exec", "keep", "--name", "long", "--", "sh", "-c",
                   "echo before; sleep 30"})
                .exit_code == 0);
    REQUIRE(d.Cli({"exec", "keep", "--name", "short", "--", "sh", "-c",
                   "echo quick; sleep 1"})
                .exit_code == 0);
    auto exe = WaitFor(d, "keep", "long", [](const mycel::v1::Executable& e) {
      return e.status().pid() > 0;
    });
    pid_before = absl::StrCat(exe.status().pid());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(d.Signal(SIGKILL) == 128 + SIGKILL);
  }
  // "short" ends while no daemon runs.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  CHECK(d.Log().find("executables_adopted=1") != std::string::npos);
  auto exe = WaitFor(d, "keep", "long", [](const mycel::v1::Executable& e) {
    return e.status().state() == mycel::v1::EXECUTABLE_STATE_RUNNING;
  });
  CHECK(absl::StrCat(exe.status().pid()) == pid_before);
  CHECK(kill(static_cast<pid_t>(exe.status().pid()), 0) == 0);
  CHECK(d.Cli({"logs", "keep/long"}).out == "before\n");
  CHECK(d.Cli({"logs", "keep/short"}).out == "quick\n");
  auto s = WaitFor(d, "keep", "short", [](const mycel::v1::Executable& e) {
    return e.status().state() == mycel::v1::EXECUTABLE_STATE_EXITED;
  });
  CHECK(s.status().exit_status_unknown());
  CHECK(s.status().message() == "exited while myceld was not running");
  // "short" is a zombie of ours since; nobody else will reap it.
  const pid_t short_pid = static_cast<pid_t>(s.status().pid());
  CHECK(waitpid(short_pid, nullptr, WNOHANG) == short_pid);

  // The adopted one can still be stopped. It is not the daemon's child, so
  // its parent (this process) reaps it; then a kernel that keeps exit
  // statuses for pidfds (6.15) tells the daemon how it ended.
  const pid_t long_pid = static_cast<pid_t>(exe.status().pid());
  int wait_status = 0;
  std::thread reaper([&] { waitpid(long_pid, &wait_status, 0); });
  auto stop = d.Cli({"-o", "json", "stop", "keep/long", "--grace", "2s"});
  reaper.join();
  CHECK(stop.exit_code == 0);
  CHECK(stop.out.find("EXECUTABLE_STATE_EXITED") != std::string::npos);
  REQUIRE(WIFSIGNALED(wait_status));
  CHECK(WTERMSIG(wait_status) == SIGTERM);
  auto ended = WaitFor(d, "keep", "long", [](const mycel::v1::Executable& e) {
    return e.status().state() == mycel::v1::EXECUTABLE_STATE_EXITED;
  });
  if (testing::KernelAtLeast(6, 15)) {
    CHECK_FALSE(ended.status().exit_status_unknown());
    CHECK(ended.status().signal() == SIGTERM);
    CHECK(ended.status().message().empty());
  } else {
    CHECK(ended.status().exit_status_unknown());
  }
  CHECK(d.Cli({"cell", "rm", "keep"}).exit_code == 0);
}

}  // namespace
}  // namespace mycel
