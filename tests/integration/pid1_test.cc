// myceld as PID 1 of a pid namespace (a container's init): it reaps every
// orphan, a supervised executable's status still reaches its supervisor,
// and SIGTERM is a graceful stop with exit 0.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "mycel/v1/cells.pb.h"
#include "mycel/v1/node.pb.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"
#include "tests/testing/requires.h"

namespace mycel {
namespace {

using testing::DaemonProcess;
using testing::TempDir;

MYCEL_TEST_REQUIRES(testing::Root("pid namespaces"));

// The host pid of the single child of `parent` (myceld under unshare).
pid_t ChildOf(pid_t parent) {
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<std::string> kids =
        ReadFile(absl::StrCat("/proc/", parent, "/task/", parent, "/children"));
    int pid = 0;
    if (kids.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*kids), &pid))
      return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return -1;
}

// Zombie children of `pid`, by scanning /proc.
int ZombieChildren(pid_t pid) {
  auto r = testing::Shell(absl::StrCat(
      "ps -eo stat=,ppid= | awk '$1 ~ /^Z/ && $2 == ", pid, "' | wc -l"));
  int n = -1;
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(r.out), &n) ? n : -1;
}

mycel::v1::NodeInfo Info(DaemonProcess& d) {
  mycel::v1::NodeInfo info;
  auto r = d.Cli({"-o", "json", "node", "info"});
  REQUIRE(r.exit_code == 0);
  REQUIRE(google::protobuf::util::JsonStringToMessage(r.out, &info).ok());
  return info;
}

struct Pid1Node {
  Pid1Node() : d(dir.path()) {
    d.set_wrapper({"/usr/bin/unshare", "--pid", "--fork", "--mount-proc"});
  }
  TempDir dir;
  DaemonProcess d;
};

TEST_CASE(
    "as PID 1 of a pid namespace: orphans reaped, statuses kept, SIGTERM") {
  Pid1Node n;
  REQUIRE(n.d.Start());
  pid_t myceld = ChildOf(n.d.pid());
  REQUIRE(myceld > 0);
  auto info = Info(n.d);
  CHECK(info.pid() == 1);
  CHECK(info.pid1());
  CHECK(info.init_role() == "container");

  REQUIRE(n.d.Cli({"cell", "create", "orphans"}).exit_code == 0);
  // 100 grandchildren lose their parent at once and are re-parented to
  // myceld; the executable itself exits 42 at the same moment.
  REQUIRE(n.d.Cli({"exec", "orphans", "--name", "maker", "--", "sh", "-c",
                   "i=0; while [ $i -lt 100 ]; do (sleep 0.5 &); i=$((i+1)); "
                   "done; exit 42"})
              .exit_code == 0);
  auto wait = n.d.Cli({"-o", "json", "wait", "orphans/maker"});
  CHECK(wait.exit_code == 42);  // the supervisor got the status
  mycel::v1::Executable exe;
  REQUIRE(google::protobuf::util::JsonStringToMessage(wait.out, &exe).ok());
  CHECK(exe.status().exit_code() == 42);
  CHECK_FALSE(exe.status().exit_status_unknown());

  // All 100 sleeps end and are reaped: none is left as a zombie.
  uint64_t reaped = 0;
  for (int i = 0; i < 100 && reaped < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    reaped = Info(n.d).orphans_reaped();
  }
  CHECK(reaped >= 100);
  CHECK(ZombieChildren(myceld) == 0);

  // Several supervised executables exiting together while orphans churn.
  for (int i = 0; i < 5; ++i) {
    auto exec = n.d.Cli(
        {"exec", "orphans", "--name", absl::StrCat("e", i), "--", "sh", "-c",
         absl::StrCat("(sleep 0.2 &); (sleep 0.2 &); exit ", 10 + i)});
    REQUIRE_MESSAGE(exec.exit_code == 0, exec.err);
  }
  for (int i = 0; i < 5; ++i) {
    CHECK(n.d.Cli({"wait", absl::StrCat("orphans/e", i)}).exit_code == 10 + i);
  }

  // A long-running workload is stopped gracefully by SIGTERM to PID 1.
  REQUIRE(n.d.Cli({"exec", "orphans", "--name", "server", "--", "sh", "-c",
                   "trap 'echo got-term; exit 0' TERM; while true; do sleep "
                   "0.1; done"})
              .exit_code == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(myceld, SIGTERM);
  CHECK(n.d.Wait(std::chrono::seconds(30)) == 0);  // unshare passes on the exit
  std::string log = n.d.Log();
  CHECK(log.find("msg=stopping reason=SIGTERM") != std::string::npos);
  CHECK(log.find("init_role=container") != std::string::npos);
  CHECK(log.find("msg=\"stopping workloads\" executables=1") !=
        std::string::npos);
  CHECK(log.find("msg=\"myceld stopped\"") != std::string::npos);
  CHECK(*ReadFile(n.dir.path() + "/state/logs/orphans/server.log") ==
        "got-term\n");
  // The daemon is gone and its cell's (now empty) cgroup stays, as cells
  // are persistent; remove it so the test leaves the host as it found it.
  const std::string& sub = n.d.cgroup_subtree();
  testing::Shell("rmdir /sys/fs/cgroup/*/" + sub + "/orphans /sys/fs/cgroup/" +
                 sub + "/orphans 2>/dev/null");
}

TEST_CASE("as PID 1, a startup error is a safe mode that keeps serving") {
  Pid1Node n;
  REQUIRE(MakeDirs(n.dir.path() + "/state", 0700).ok());
  REQUIRE(
      WriteFile(n.dir.path() + "/state/mycel.db", std::string(4096, 'z')).ok());
  REQUIRE(n.d.Start());  // "ready": the API is up despite the error
  auto info = Info(n.d);
  CHECK(info.pid() == 1);
  CHECK(info.safe_mode().find("file is not a database") != std::string::npos);
  CHECK(n.d.Log().find("entering safe mode") != std::string::npos);
  auto table = n.d.Cli({"node", "info"});
  CHECK(table.out.find("SAFE MODE: ") != std::string::npos);
  // Cells are unavailable, with the reason, rather than half-working.
  auto cells = n.d.Cli({"cell", "ls"});
  CHECK(cells.exit_code == 1);
  CHECK(cells.err == "mycel: cells are not running on this node (safe mode)\n");
  // And it still stops cleanly.
  CHECK(n.d.Cli({"node", "shutdown"}).exit_code == 0);
  CHECK(n.d.Wait(std::chrono::seconds(20)) == 0);
}

}  // namespace
}  // namespace mycel
