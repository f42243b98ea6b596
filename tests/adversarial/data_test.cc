// The adversarial tier, data: nothing acknowledged may be lost, nothing
// unacknowledged may be left half-done, and bad input is refused with the
// field at fault before it touches anything.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "runtime/fs.h"
#include "tests/adversarial/adversarial.h"

namespace mycel {
namespace {

using adversarial::Channel;
using adversarial::Deadline;
using testing::CommandResult;
using testing::DaemonProcess;
using testing::TempDir;

// How many processes run `command` (as mycel runs it: by its absolute
// path, so that the client that asked for it, or the shell running pgrep,
// whose command lines merely contain `command`, do not count; the
// brackets keep the pattern from matching itself).
int CountProcesses(const std::string& command) {
  CommandResult r = testing::Shell("pgrep -fc '/[" + command.substr(0, 1) +
                                   "]" + command.substr(1) + "$'");
  return atoi(r.out.c_str());
}

bool ProcessRunning(const std::string& pattern) {
  return CountProcesses(pattern) > 0;
}

MYCEL_TEST_REQUIRES(adversarial::NeedsRoot());

TEST_CASE("on a full disk a start fails, and leaves nothing behind") {
  // Defect 9: with the state directory on a full 2 MB tmpfs, `mycel exec
  // f1 --name w2 -- echo hi` answered OK, the daemon logged "cannot record
  // executable status", and after a restart w2 did not exist.
  TempDir dir;
  const std::string state = dir.Sub("state");
  REQUIRE(MakeDirs(state, 0700).ok());
  REQUIRE(mount("tmpfs", state.c_str(), "tmpfs", 0, "size=2m,mode=0700") == 0);
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{state};
  {
    DaemonProcess d(dir.path());
    REQUIRE(d.Start());
    REQUIRE(d.Cli({"cell", "create", "f1"}).exit_code == 0);
    REQUIRE(d.Cli({"exec", "f1", "--name", "w1", "--", "true"}).exit_code == 0);
    // Fill the disk.
    testing::Shell("dd if=/dev/zero of=" + state +
                   "/fill bs=64k 2>/dev/null; sync");
    // Starts that cannot be recorded fail; the first one usually does at
    // once (SQLite's WAL must grow), and one must within a few.
    int failed_at = -1;
    for (int i = 2; i < 12 && failed_at < 0; ++i) {
      CommandResult r = d.Cli({"exec", "f1", "--name", absl::StrCat("w", i),
                               "--", "sleep", absl::StrCat("3000.", i)});
      if (r.exit_code != 0) {
        failed_at = i;
        CHECK_MESSAGE(r.err.find("full") != std::string::npos, r.err);
      }
    }
    REQUIRE(failed_at > 0);
    // Its process was killed before the error was answered.
    CHECK_FALSE(ProcessRunning(absl::StrCat("sleep 3000.", failed_at)));
    // A cell that cannot be recorded leaves no cgroup.
    CommandResult cell = d.Cli({"cell", "create", "f2"});
    if (cell.exit_code != 0) {
      CHECK(access(absl::StrCat("/sys/fs/cgroup/memory/", d.cgroup_subtree(),
                                "/f2")
                       .c_str(),
                   F_OK) != 0);
    }
    CHECK(d.Signal(SIGKILL) == 128 + SIGKILL);
    unlink((state + "/fill").c_str());
    DaemonProcess again(dir.path());
    REQUIRE(again.Start());
    // What failed does not exist; what succeeded does.
    CHECK(again.Cli({"-o", "json", "ps", "f1"})
              .out.find(absl::StrCat("\"w", failed_at, "\"")) ==
          std::string::npos);
    CHECK(again.Cli({"ps", "f1"}).out.find("w1") != std::string::npos);
    testing::Shell("pkill -f '[s]leep 3000\\.'");
  }
}

TEST_CASE("an empty mycel.db is refused, and the cells it forgot are kept") {
  // Defect 10: a 0-byte mycel.db was taken as a new, empty database, so 20
  // cells were forgotten and their cgroups left behind.
  TempDir dir;
  std::string subtree;
  {
    DaemonProcess d(dir.path());
    REQUIRE(d.Start());
    subtree = d.cgroup_subtree();
    for (int i = 0; i < 3; ++i) {
      REQUIRE(d.Cli({"cell", "create", absl::StrCat("kept", i)}).exit_code ==
              0);
    }
    CHECK(d.Signal(SIGKILL) == 128 + SIGKILL);
  }
  const std::string db = dir.Sub("state/mycel.db");
  REQUIRE(truncate(db.c_str(), 0) == 0);
  unlink((db + "-wal").c_str());
  DaemonProcess d(dir.path());
  CHECK_FALSE(d.Start());
  CHECK(d.Log().find("is empty (0 bytes)") != std::string::npos);
  struct stat st;
  REQUIRE(stat(db.c_str(), &st) == 0);
  CHECK(st.st_size == 0);
  // The cells' cgroups are still there for whoever restores the database.
  CHECK(
      access(absl::StrCat("/sys/fs/cgroup/memory/", subtree, "/kept0").c_str(),
             F_OK) == 0);
  for (int i = 0; i < 3; ++i) {
    for (const char* h :
         {"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}) {
      rmdir(
          absl::StrCat("/sys/fs/cgroup/", h, "/", subtree, "/kept", i).c_str());
    }
  }
}

TEST_CASE("throwaway cells of an interrupted mycel run go at the restart") {
  // Defect 11: 100 runs interrupted by kill -9 of the daemon left 15
  // run-* cells behind.
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  std::vector<pid_t> clients;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      execl(testing::Binary("mycel").c_str(), "mycel", "--socket",
            d.socket().c_str(), "run", "--isolate", i % 2 ? "pid,mount" : "",
            "--", "sleep", "3100.5", nullptr);
      _exit(127);
    }
    clients.push_back(pid);
  }
  // Wait until all eight run.
  bool running = false;
  for (int i = 0; i < 200 && !running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    running = CountProcesses("sleep 3100.5") >= 8;
  }
  REQUIRE(running);
  CHECK(d.Signal(SIGKILL) == 128 + SIGKILL);
  for (pid_t pid : clients) waitpid(pid, nullptr, 0);
  DaemonProcess again(dir.path());
  REQUIRE(again.Start());
  CHECK_MESSAGE(
      again.Log().find("removed a throwaway cell whose client is gone") !=
          std::string::npos,
      again.Log());
  CHECK(again.Cli({"cell", "ls"}).out.find("run-") == std::string::npos);
  // Their processes are gone, and so are their cgroups.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !ProcessRunning("sleep 3100.5");
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(gone);
  CommandResult left = testing::Shell(absl::StrCat(
      "ls /sys/fs/cgroup/memory/", again.cgroup_subtree(), " | grep -c run-"));
  CHECK(left.out == "0\n");
}

TEST_CASE("bad input is INVALID_ARGUMENT naming the field, through gRPC") {
  // The smaller input checks of the hardening issue: each reached the
  // kernel (or was silently truncated) instead of naming the field.
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto cells = mycel::v1::Cells::NewStub(Channel(d));
  auto exes = mycel::v1::Executables::NewStub(Channel(d));
  auto call = [] {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(Deadline(std::chrono::seconds(20)));
    return ctx;
  };
  struct CellCase {
    const char* json;
    const char* field;
  } cell_cases[] = {
      {R"({"name": "r1", "isolate": ["NAMESPACE_MOUNT"], "rootfs": "/"})",
       "rootfs:"},
      {R"({"name": "r2", "isolate": ["NAMESPACE_MOUNT"], "rootfs": "/tmp/.."})",
       "rootfs:"},
      {R"({"name": "c1", "limits": {"cpuset_mems": "9"}})",
       "limits: cpuset_mems:"},
      {R"({"name": "c2", "limits": {"cpuset_cpus": "0-99"}})",
       "limits: cpuset_cpus:"},
      {R"({"name": "u1", "isolate": ["NAMESPACE_USER"], "uid_map": "nonsense"})",
       "uid_map: line 1:"},
      {R"({"name": "u2", "uid_map": "0 100000 65536"})", "uid_map:"},
      {R"({"name": "u3", "isolate": ["NAMESPACE_USER"], "gid_map": "0 0 1"})",
       "gid_map:"},
      {R"({"name": "i1", "isolate": ["NAMESPACE_PID", "NAMESPACE_PID"]})",
       "isolate[1]:"},
  };
  for (const CellCase& c : cell_cases) {
    mycel::v1::CreateCellRequest req;
    REQUIRE(
        google::protobuf::util::JsonStringToMessage(c.json, req.mutable_spec())
            .ok());
    mycel::v1::Cell out;
    grpc::Status st = cells->Create(call().get(), req, &out);
    CHECK_MESSAGE(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT, c.json,
                  " -> ", st.error_message());
    CHECK_MESSAGE(absl::StartsWith(st.error_message(), c.field), c.json, " -> ",
                  st.error_message());
  }
  // Nothing was created along the way.
  CHECK(d.Cli({"cell", "ls"}).out ==
        "NAME  ISOLATE  LIMITS  SECCOMP  RUNNING\n");

  REQUIRE(d.Cli({"cell", "create", "x"}).exit_code == 0);
  auto start = [&](const mycel::v1::ExecutableSpec& spec) {
    mycel::v1::StartRequest req;
    *req.mutable_spec() = spec;
    mycel::v1::Executable out;
    return exes->Start(call().get(), req, &out);
  };
  mycel::v1::ExecutableSpec nul;
  nul.set_cell("x");
  nul.add_command("/bin/echo");
  nul.add_command(std::string("safe\0; rm -rf /", 15));
  grpc::Status st = start(nul);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(absl::StartsWith(st.error_message(), "command[1]:"));
  mycel::v1::ExecutableSpec env;
  env.set_cell("x");
  env.add_command("/bin/true");
  env.add_env(std::string("A=1\0LD_PRELOAD=/x.so", 20));
  st = start(env);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(absl::StartsWith(st.error_message(), "env[0]:"));
  mycel::v1::ExecutableSpec grace;
  grace.set_cell("x");
  grace.add_command("/bin/true");
  grace.mutable_stop_grace()->set_seconds(5);
  grace.mutable_stop_grace()->set_nanos(-1);
  st = start(grace);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(absl::StartsWith(st.error_message(), "stop_grace:"));
  // Stop's own grace, with negative nanos.
  REQUIRE(d.Cli({"exec", "x", "--name", "s", "--", "sleep", "60"}).exit_code ==
          0);
  mycel::v1::StopRequest stop;
  stop.set_cell("x");
  stop.set_name("s");
  stop.mutable_grace()->set_nanos(-5);
  mycel::v1::Executable out;
  st = exes->Stop(call().get(), stop, &out);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(absl::StartsWith(st.error_message(), "grace:"));
  CHECK(d.Cli({"ps", "x"}).out.find("running") != std::string::npos);
  CHECK(d.Cli({"cell", "rm", "--force", "x"}).exit_code == 0);
}

}  // namespace
}  // namespace mycel
