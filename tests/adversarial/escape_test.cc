// The adversarial tier, ways out of a cell: every one that once worked,
// tried with many combinations of cell flags. A workload must not keep the
// daemon's ids, leave its cgroup, raise its own limits, write the host's
// kernel knobs, or reach the admin API.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/fs.h"
#include "runtime/landlock.h"
#include "tests/adversarial/adversarial.h"

namespace mycel {
namespace {

using testing::CommandResult;
using testing::DaemonProcess;
using testing::TempDir;

MYCEL_TEST_REQUIRES(adversarial::NeedsRoot());

// Cell flag sets that do not ask for writable system paths; each must
// confine the kernel's knobs whatever else it lacks.
const std::vector<std::vector<std::string>>& Combinations() {
  static const auto* combos = new std::vector<std::vector<std::string>>{
      {},
      {"--isolate", "pid"},
      {"--isolate", "pid,mount"},
      {"--isolate", "pid,mount,uts,ipc"},
      {"--isolate", "all"},
      {"--isolate", "cgroup"},
      {"--isolate", "uts,ipc,net"},
      {"--isolate", "user,pid,mount"},
      {"--isolate", "user"},
      // The host's root mapped into a user namespace: confined by the
      // mount namespace it must have.
      {"--isolate", "user,mount", "--uid-map", "0 0 1000", "--gid-map",
       "0 0 1000"},
      {"--seccomp", "none"},
      {"--isolate", "pid,mount", "--cap", "all"},
  };
  return *combos;
}

std::string Describe(const std::vector<std::string>& flags) {
  return flags.empty() ? "(no flags)" : absl::StrJoin(flags, " ");
}

// The host's cgroup files as a cell would reach them: v1 has a hierarchy
// per controller, v2 one tree.
struct HostCgroups {
  bool v1 = access("/sys/fs/cgroup/memory/cgroup.procs", F_OK) == 0;

  std::string Root(const char* controller) const {
    return v1 ? absl::StrCat("/sys/fs/cgroup/", controller) : "/sys/fs/cgroup";
  }
  std::string MemoryLimit(const std::string& subtree,
                          const std::string& cell) const {
    return absl::StrCat(Root("memory"), "/", subtree, "/", cell,
                        v1 ? "/memory.limit_in_bytes" : "/memory.max");
  }
  std::string PidsLimit(const std::string& subtree,
                        const std::string& cell) const {
    return absl::StrCat(Root("pids"), "/", subtree, "/", cell, "/pids.max");
  }
};

// A shell script that tries every write the issue found, and says which
// ones worked. The cgroup paths are the host's: a cell sees them where it
// shares the host's files.
std::string EscapeScript(const std::string& subtree, const std::string& cell) {
  const HostCgroups host;
  return absl::StrCat(
      // Leave the cell's cgroup for the hierarchy's root.
      "echo $$ > ", host.Root("memory"),
      "/cgroup.procs 2>/dev/null && echo escaped-memory;", "echo $$ > ",
      host.Root("pids"), "/cgroup.procs 2>/dev/null && echo escaped-pids;",
      // Raise its own limits.
      "echo 9999999999 > ", host.MemoryLimit(subtree, cell),
      " 2>/dev/null && echo raised-memory;", "echo max > ",
      host.PidsLimit(subtree, cell), " 2>/dev/null && echo raised-pids;",
      // A kernel setting, written back unchanged.
      "v=$(cat /proc/sys/vm/swappiness); echo $v > /proc/sys/vm/swappiness "
      "2>/dev/null && echo sysctl-written;",
      "[ -w /proc/sysrq-trigger ] && echo sysrq-writable;",
      "[ -w /sys/kernel/mm/transparent_hugepage/enabled ] && echo "
      "sysfs-writable;",
      // What the kernel keeps from it.
      "[ -s /proc/kcore ] && echo kcore-visible;",
      "[ -n \"$(ls /sys/firmware 2>/dev/null)\" ] && echo firmware-visible;",
      "echo done");
}

TEST_CASE("no flag combination lets a cell leave its cgroup or write knobs") {
  // Defect 2: with --isolate pid,mount,uts,ipc --memory-max 32M, `echo $$
  // > /sys/fs/cgroup/memory/cgroup.procs` moved the workload to the root
  // cgroup, and it raised its memory and pids limits (64M to 9.3 GB, 50
  // to 100000).
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  int n = 0;
  for (const std::vector<std::string>& flags : Combinations()) {
    const std::string cell = absl::StrCat("esc", n++);
    std::vector<std::string> args = {"run", "--name",     cell, "--memory-max",
                                     "32M", "--pids-max", "50"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(),
                {"--", "sh", "-c", EscapeScript(d.cgroup_subtree(), cell)});
    CommandResult r = d.Cli(args);
    CHECK_MESSAGE(r.exit_code == 0, Describe(flags), ": ", r.err);
    // A user namespace without a mount namespace keeps the cell an
    // unprivileged host user in the host's mount table: it sees what any
    // user of the host sees (the list of firmware tables), and no more.
    const bool unprivileged =
        flags == std::vector<std::string>{"--isolate", "user"};
    CHECK_MESSAGE(
        r.out == (unprivileged ? "firmware-visible\ndone\n" : "done\n"),
        Describe(flags), " -> ", r.out);
  }
  // A cell that asks for writable system paths by name gets them: that is
  // the only way.
  REQUIRE(d.Cli({"cell", "create", "priv", "--memory-max", "32M",
                 "--writable-system-paths"})
              .exit_code == 0);
  const std::string limit =
      HostCgroups().MemoryLimit(d.cgroup_subtree(), "priv");
  CommandResult r = d.Cli({"exec", "priv", "--name", "w", "--", "sh", "-c",
                           absl::StrCat("echo 67108864 > ", limit)});
  REQUIRE(r.exit_code == 0);
  CHECK(d.Cli({"wait", "priv/w"}).exit_code == 0);
  CHECK(*ReadFile(limit) == "67108864\n");
  // And it says it is not a security boundary.
  CommandResult get = d.Cli({"cell", "get", "priv"});
  CHECK(get.out.find("not a boundary") != std::string::npos);
  CHECK(get.out.find("system paths") != std::string::npos);
}

TEST_CASE("a uid or gid of -1 never keeps the daemon's ids") {
  // Defect 1: `mycel run --isolate user -u 4294967295` read /etc/shadow
  // and created a root-owned file; `mycel run -u 4294967295 -- id` printed
  // uid=0.
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  const std::string probe = "/etc/mycel-adversarial-probe";
  unlink(probe.c_str());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"run", "--isolate", "user", "-u", "4294967295", "--", "sh", "-c",
            "head -c 20 /etc/shadow; touch " + probe},
           {"run", "-u", "4294967295", "--", "id"},
           {"run", "-u", "0:4294967295", "--", "id"},
           {"run", "--isolate", "user", "-u", "70000", "--", "id"}}) {
    CommandResult r = d.Cli(args);
    CHECK_MESSAGE(r.exit_code == 125, absl::StrJoin(args, " "), " -> ", r.out);
    CHECK(r.out.empty());
    const bool names_the_field = r.err.find("uid:") != std::string::npos ||
                                 r.err.find("gid:") != std::string::npos;
    CHECK_MESSAGE(names_the_field, r.err);
  }
  CHECK(access(probe.c_str(), F_OK) != 0);
  // The same through exec into an existing cell.
  REQUIRE(d.Cli({"cell", "create", "u", "--isolate", "user"}).exit_code == 0);
  CommandResult e = d.Cli({"exec", "u", "-u", "4294967295", "--", "id"});
  CHECK(e.exit_code == 1);
  CHECK(e.err.find("uid: 4294967295") != std::string::npos);
}

TEST_CASE("the admin socket is hidden from cells, and refuses them anyway") {
  // Defect 3: from a cell with pid,mount,uts,ipc,net, `mycel --socket SOCK
  // run --seccomp none --cap CAP_SYS_ADMIN -- cat /proc/1/comm` printed the
  // host's PID 1 from a nested, privileged cell.
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  const std::string mycel = testing::Binary("mycel");
  const std::string nested = absl::StrCat(
      mycel, " --socket ", d.socket(),
      " run --seccomp none --cap CAP_SYS_ADMIN -- cat /proc/1/comm");
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{
           {"--isolate", "pid,mount,uts,ipc,net"},
           {"--isolate", "pid"},
           {},
           {"--isolate", "all"}}) {
    CommandResult r = d.Cli([&] {
      std::vector<std::string> args = {"run"};
      args.insert(args.end(), flags.begin(), flags.end());
      args.insert(
          args.end(),
          {"--", "sh", "-c",
           absl::StrCat("test -S ", d.socket(), " && echo socket-visible; ls ",
                        d.state_dir(), " 2>/dev/null | head -3; ", nested,
                        " && echo nested-ran")});
      return args;
    }());
    CHECK_MESSAGE(r.out.find("socket-visible") == std::string::npos,
                  Describe(flags));
    CHECK_MESSAGE(r.out.find("mycel.db") == std::string::npos, Describe(flags));
    CHECK_MESSAGE(r.out.find("nested-ran") == std::string::npos,
                  Describe(flags), ": ", r.out);
  }
  // A cell that shares the host's mounts (writable system paths) sees the
  // socket; the socket itself still refuses it.
  CommandResult r =
      d.Cli({"run", "--writable-system-paths", "--", "sh", "-c",
             absl::StrCat("test -S ", d.socket(), " && echo socket-visible; ",
                          nested, " && echo nested-ran")});
  CHECK(r.out.find("socket-visible") != std::string::npos);
  CHECK(r.out.find("nested-ran") == std::string::npos);
  CHECK(d.Log().find("runs in cell cgroup") != std::string::npos);
}

TEST_CASE("a cell sharing the host's pids cannot signal PID 1 or myceld") {
  // Defect 5: a cell without a pid namespace could SIGSTOP the host's
  // processes and `kill -0` myceld and PID 1; docs/security.md claimed it
  // could see but not signal them.
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  // Every thread of the daemon, each of which stands for the whole process
  // as a kill(2) target.
  CommandResult tasks =
      testing::Shell(absl::StrCat("ls /proc/", d.pid(), "/task | tr '\n' ' '"));
  REQUIRE(!tasks.out.empty());
  const std::string script =
      absl::StrCat("for p in 1 ", d.pid(), " -1 ", tasks.out,
                   "; do kill -0 -- $p 2>/dev/null && echo signalled:$p; done; "
                   // Signalling itself still works.
                   "kill -0 $$ && echo self; "
                   // Another host process of the same uid: this test.
                   "kill -0 ",
                   getpid(), " 2>/dev/null && echo host-process");
  const bool scoped = LandlockAbi() >= kLandlockScopesAbi;
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{
           {}, {"--isolate", "mount,uts,ipc"}, {"--isolate", "net"}}) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "sh", "-c", script});
    CommandResult r = d.Cli(args);
    CHECK_MESSAGE(r.out.find("signalled:") == std::string::npos,
                  Describe(flags), " -> ", r.out);
    CHECK(r.out.find("self") != std::string::npos);
    // With Landlock's signal scope (Linux 6.12 and later), no host process
    // at all; without it, only PID 1 and myceld are out of reach.
    if (scoped) {
      CHECK_MESSAGE(r.out.find("host-process") == std::string::npos,
                    Describe(flags), " -> ", r.out);
    }
  }
  CHECK(kill(d.pid(), 0) == 0);
}

TEST_CASE("the state directory and database are the daemon's alone") {
  // Defect 4: a pre-existing 0755 state directory was not tightened, and
  // mycel.db was 0644, so any user could read executables' environments.
  TempDir dir;
  const std::string state = dir.Sub("state");
  REQUIRE(MakeDirs(state, 0755).ok());
  REQUIRE(chmod(state.c_str(), 0755) == 0);
  {
    DaemonProcess d(dir.path());
    REQUIRE(d.Start());
    REQUIRE(d.Cli({"cell", "create", "s"}).exit_code == 0);
    REQUIRE(
        d.Cli({"exec", "s", "-e", "API_TOKEN=secret-token-value", "--", "true"})
            .exit_code == 0);
    CHECK(d.Log().find("state directory was open to others") !=
          std::string::npos);
    struct stat st;
    REQUIRE(stat(state.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0700);
    REQUIRE(stat((state + "/mycel.db").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    REQUIRE(stat((state + "/mycel.db-wal").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    // An unprivileged user reads nothing of it.
    CommandResult nobody = testing::Shell(
        absl::StrCat("setpriv --reuid=65534 --regid=65534 --clear-groups "
                     "cat ",
                     state, "/mycel.db ", state, "/mycel.db-wal 2>&1"));
    CHECK(nobody.out.find("secret-token-value") == std::string::npos);
    CHECK(nobody.out.find("Permission denied") != std::string::npos);
  }
  // A database left readable (by hand, or an older myceld) is tightened
  // at the next start, with a log line.
  REQUIRE(chmod((state + "/mycel.db").c_str(), 0644) == 0);
  DaemonProcess again(dir.path());
  REQUIRE(again.Start());
  struct stat st;
  REQUIRE(stat((state + "/mycel.db").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(again.Log().find("readable by others; now 0600") != std::string::npos);
}

TEST_CASE("cell get says whether a cell is a security boundary, and why") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  REQUIRE(d.Cli({"cell", "create", "plain"}).exit_code == 0);
  CommandResult plain = d.Cli({"cell", "get", "plain"});
  CHECK(plain.out.find("not a boundary") != std::string::npos);
  for (const char* what : {"files:", "processes:", "network:", "ipc:"}) {
    CHECK_MESSAGE(plain.out.find(what) != std::string::npos, what);
  }
  // A rootfs and every namespace, default capabilities and seccomp: a
  // boundary.
  const std::string rootfs = dir.Sub("rootfs");
  REQUIRE(MakeDirs(rootfs + "/proc", 0755).ok());
  REQUIRE(
      d.Cli({"cell", "create", "boxed", "--isolate", "all", "--rootfs", rootfs})
          .exit_code == 0);
  CommandResult boxed = d.Cli({"-o", "json", "cell", "get", "boxed"});
  CHECK(boxed.out.find("\"security_boundary\": true") != std::string::npos);
  CommandResult text = d.Cli({"cell", "get", "boxed"});
  CHECK(text.out.find("boundary") != std::string::npos);
  CHECK(text.out.find("not a boundary") == std::string::npos);
  // A capability that reaches past the namespaces makes it one no longer.
  REQUIRE(d.Cli({"cell", "create", "admin", "--isolate", "all", "--rootfs",
                 rootfs, "--cap", "CAP_SYS_ADMIN"})
              .exit_code == 0);
  CommandResult admin = d.Cli({"cell", "get", "admin"});
  CHECK(admin.out.find("capability CAP_SYS_ADMIN") != std::string::npos);
}

}  // namespace
}  // namespace mycel
