// Spawn with privileges: credentials, namespaces, rootfs and the cell init.
// Needs root (else the binary is skipped). Joining cgroups is
// spawn_cgroup_v1_test.cc and spawn_cgroup_v2_test.cc, each skipped on
// hosts without that hierarchy.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/fs.h"
#include "runtime/spawn/cell_init.h"
#include "runtime/spawn/spawn.h"
#include "tests/testing/process.h"
#include "tests/testing/requires.h"
#include "tests/testing/spawn_test_util.h"

namespace mycel {
namespace {

using spawn_test::ShellRequest;
using spawn_test::SpawnAndWait;
using spawn_test::UnreapedChildren;

constexpr int kCellNamespaces =
    CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC;

MYCEL_TEST_REQUIRES(testing::Root("namespaces, cgroups, credentials"));

// The static busybox these tests put in a rootfs or a network namespace
// comes with packaging/install-deps.sh; without it they fail, saying so.
void RequireBusybox() {
  REQUIRE_MESSAGE(access("/bin/busybox", X_OK) == 0,
                  "/bin/busybox is missing: install busybox-static "
                  "(packaging/install-deps.sh)");
}

// Polls `done` for up to `timeout`.
template <typename F>
bool Eventually(F done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

std::string ReadOr(const std::string& path) {
  absl::StatusOr<std::string> data = ReadFile(path);
  return data.ok() ? *data : "";
}

// The value of `key:` in /proc/PID/status.
std::string StatusField(pid_t pid, absl::string_view key) {
  for (absl::string_view line :
       absl::StrSplit(ReadOr(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (absl::ConsumePrefix(&line, key) && absl::ConsumePrefix(&line, ":")) {
      return std::string(absl::StripAsciiWhitespace(line));
    }
  }
  return "";
}

TEST_CASE("uid and gid switch, and supplementary groups are replaced") {
  SpawnRequest request = ShellRequest("id -u; id -g; id -G");
  request.uid = 65534;
  request.gid = 65534;
  auto plain = SpawnAndWait(request);
  REQUIRE(plain.ok());
  CHECK(plain->status.code == 0);
  CHECK(plain->out == "65534\n65534\n65534\n");

  request.supplementary_groups = {100, 200};
  auto grouped = SpawnAndWait(request);
  REQUIRE(grouped.ok());
  CHECK(grouped->out == "65534\n65534\n65534 100 200\n");
}

// A running cell: its init and a way to run executables inside it.
class Cell final {
 public:
  absl::Status Start() {
    SpawnRequest request;
    request.cell_init = true;
    request.new_namespaces = kCellNamespaces;
    request.mount_proc = true;
    request.hostname = "c1";
    ASSIGN_OR_RETURN(Child init, Spawn(request));
    init_.emplace(std::move(init));
    return absl::OkStatus();
  }
  Child& init() { return *init_; }
  SpawnRequest Exec(const std::string& script) {
    SpawnRequest request = ShellRequest(script);
    request.join_pidfd = init_->pidfd();
    request.join_namespaces = kCellNamespaces;
    return request;
  }
  ~Cell() {
    if (init_ && !init_->TryWait().value_or(std::nullopt)) {
      (void)init_->Signal(SIGKILL);
      (void)init_->Wait();
    }
  }

 private:
  std::optional<Child> init_;
};

TEST_CASE("an executable joining a cell init sees it as PID 1 of the cell") {
  Cell cell;
  REQUIRE(cell.Start().ok());
  // Spawn returns once the exec has begun: argv and then the name are the
  // init's as soon as it runs.
  CHECK(Eventually(
      [&] {
        return ReadOr(absl::StrCat("/proc/", cell.init().pid(), "/cmdline")) ==
               std::string(kCellInitArgv0, strlen(kCellInitArgv0) + 1);
      },
      std::chrono::seconds(5)));
  CHECK(Eventually(
      [&] {
        return ReadOr(absl::StrCat("/proc/", cell.init().pid(), "/comm")) ==
               absl::StrCat(kCellInitName, "\n");
      },
      std::chrono::seconds(5)));
  // The init keeps no descriptor of ours but stdio.
  CHECK(StatusField(cell.init().pid(), "NSpid") ==
        absl::StrCat(cell.init().pid(), "\t1"));

  auto joined =
      SpawnAndWait(cell.Exec("tr -d '\\0' < /proc/1/cmdline; echo; echo $$; "
                             "hostname; ls /proc/1/fd | wc -l; exit 7"));
  REQUIRE(joined.ok());
  // The exit status reaches us although the process lives in the cell's
  // pid namespace.
  CHECK(joined->status.exited);
  CHECK(joined->status.code == 7);
  std::vector<std::string> lines = absl::StrSplit(joined->out, '\n');
  REQUIRE(lines.size() >= 4);
  CHECK(lines[0] == kCellInitArgv0);
  CHECK(lines[1] != "1");
  CHECK(lines[1] != "");
  CHECK(lines[2] == "c1");
  CHECK(lines[3] == "3");  // only 0, 1, 2
  CHECK(joined->err.empty());
  CHECK(UnreapedChildren() == absl::StrCat(cell.init().pid(), " "));
}

TEST_CASE("the cell init reaps orphans") {
  Cell cell;
  REQUIRE(cell.Start().ok());
  const pid_t init = cell.init().pid();
  const std::string children =
      absl::StrCat("/proc/", init, "/task/", init, "/children");
  // The shell exits at once; its background sleep is reparented to the
  // init, which must reap it when it exits.
  auto orphaning = SpawnAndWait(cell.Exec("sleep 1 & exit 0"));
  REQUIRE(orphaning.ok());
  CHECK(orphaning->status.code == 0);
  std::string orphan = ReadOr(children);
  CHECK_FALSE(orphan.empty());
  CHECK(Eventually([&] { return ReadOr(children).empty(); },
                   std::chrono::seconds(5)));
  // Reaped, not a zombie: the pid is gone from /proc.
  std::string pid(absl::StripAsciiWhitespace(orphan));
  if (!pid.empty()) {
    CHECK(access(absl::StrCat("/proc/", pid).c_str(), F_OK) != 0);
  }
  // The init is still running.
  auto status = cell.init().TryWait();
  REQUIRE(status.ok());
  CHECK_FALSE(status->has_value());
}

TEST_CASE("SIGTERM to the cell init ends the cell") {
  Cell cell;
  REQUIRE(cell.Start().ok());
  auto polite = Spawn(cell.Exec("exec sleep 100"));
  REQUIRE(polite.ok());
  // Ignores SIGTERM (the exec keeps the ignored disposition): only the
  // kernel's SIGKILL, when the init exits, can end it.
  auto stubborn = Spawn(cell.Exec("trap '' TERM; exec sleep 100"));
  REQUIRE(stubborn.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  auto start = std::chrono::steady_clock::now();
  REQUIRE(cell.init().Signal(SIGTERM).ok());
  auto polite_status = polite->Wait();
  REQUIRE(polite_status.ok());
  CHECK(polite_status->signaled);
  CHECK(polite_status->signal == SIGTERM);
  // Executables are the daemon's children: reap them before the init, whose
  // exit completes only once they are gone.
  auto stubborn_status = stubborn->Wait();
  REQUIRE(stubborn_status.ok());
  CHECK(stubborn_status->signaled);
  CHECK(stubborn_status->signal == SIGKILL);
  auto init_status = cell.init().Wait();
  REQUIRE(init_status.ok());
  CHECK(init_status->exited);
  CHECK(init_status->code == 0);
  auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= std::chrono::milliseconds(kCellInitStopGraceMs - 100));
  CHECK(waited < std::chrono::milliseconds(kCellInitStopGraceMs + 3000));
}

// A field of /proc/PID/smaps_rollup, in kB; -1 if unreadable.
long SmapsKb(pid_t pid, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(
           ReadOr(absl::StrCat("/proc/", pid, "/smaps_rollup")), '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) {
      continue;
    }
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    long kb = -1;
    return absl::SimpleAtoi(line, &kb) ? kb : -1;
  }
  return -1;
}

TEST_CASE("the cell init keeps no copy of the daemon's memory") {
  constexpr size_t kHeap = 32 << 20;
  std::vector<char> heap(kHeap, 1);
  Cell cell;
  // From another thread, which spawns on its own pair of child stacks (and
  // has exited, stacks unmapped, before the init is used).
  absl::Status started;
  std::thread([&] { started = cell.Start(); }).join();
  REQUIRE(started.ok());
  const pid_t init = cell.init().pid();
  // The init is an exec of this binary, not a copy of this process.
  CHECK(Eventually(
      [&] {
        return ReadOr(absl::StrCat("/proc/", init, "/comm")) ==
               absl::StrCat(kCellInitName, "\n");
      },
      std::chrono::seconds(5)));
  CHECK(SmapsKb(init, "Rss") < 8 * 1024);
  // The daemon goes on writing its memory; none of it is copied for the
  // init.
  for (size_t i = 0; i < kHeap; i += 4096) heap[i] = 2;
  CHECK(SmapsKb(init, "Private_Dirty") >= 0);
  CHECK(SmapsKb(init, "Private_Dirty") < 4 * 1024);
  // And it still works.
  auto joined = SpawnAndWait(cell.Exec("cat /proc/1/comm"));
  REQUIRE(joined.ok());
  CHECK(joined->out == absl::StrCat(kCellInitName, "\n"));
  REQUIRE(cell.init().Signal(SIGTERM).ok());
  auto status = cell.init().Wait();
  REQUIRE(status.ok());
  CHECK(status->exited);
  CHECK(status->code == 0);
  CHECK(heap[kHeap - 4096] == 2);
}

// What a /proc namespace link names: "pid:[4026531836]".
std::string Link(const std::string& path) {
  char buf[64];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST_CASE("a joined pid namespace holds the child, not the spawning thread") {
  const std::string own = Link("/proc/self/ns/pid");
  const std::string for_children = "/proc/thread-self/ns/pid_for_children";
  REQUIRE(!own.empty());
  REQUIRE(Link(for_children) == own);
  Cell cell;
  REQUIRE(cell.Start().ok());
  const std::string cell_ns =
      Link(absl::StrCat("/proc/", cell.init().pid(), "/ns/pid"));
  REQUIRE(cell_ns != own);

  // The child is born in the cell's namespace, as our direct child.
  auto child = Spawn(cell.Exec("exec sleep 30"));
  REQUIRE(child.ok());
  CHECK(Link(absl::StrCat("/proc/", child->pid(), "/ns/pid")) == cell_ns);
  CHECK(StatusField(child->pid(), "PPid") == absl::StrCat(getpid()));
  CHECK(StatusField(child->pid(), "NSpid") ==
        absl::StrCat(child->pid(), "\t2"));
  // This thread is back in its own namespace: its next child is a host one.
  CHECK(Link(for_children) == own);
  auto plain = SpawnAndWait(ShellRequest("readlink /proc/self/ns/pid"));
  REQUIRE(plain.ok());
  CHECK(plain->out == own + "\n");
  REQUIRE(child->Signal(SIGKILL).ok());
  REQUIRE(child->Wait().ok());

  // A cell whose init is gone has no pid namespace to join; the error
  // names the step, and the thread is back all the same.
  REQUIRE(cell.init().Signal(SIGKILL).ok());
  REQUIRE(cell.init().Wait().ok());
  auto late = Spawn(cell.Exec("true"));
  REQUIRE_FALSE(late.ok());
  CHECK(late.status().code() == absl::StatusCode::kNotFound);
  CHECK(late.status().message() == "setns(pid): No such process (ESRCH)");
  CHECK(Link(for_children) == own);
  CHECK(UnreapedChildren().empty());
}

TEST_CASE("joining a cell's user namespace drops the host's ids") {
  SpawnRequest init_request;
  init_request.cell_init = true;
  init_request.new_namespaces = kCellNamespaces | CLONE_NEWUSER;
  init_request.mount_proc = true;
  init_request.uid_map = "0 100000 65536";
  init_request.gid_map = "0 100000 65536";
  auto init = Spawn(init_request);
  REQUIRE(init.ok());
  CHECK(Eventually(
      [&] {
        return ReadOr(absl::StrCat("/proc/", init->pid(), "/comm")) ==
               absl::StrCat(kCellInitName, "\n");
      },
      std::chrono::seconds(5)));
  // The init itself is the namespace's root, with no supplementary group.
  CHECK(StatusField(init->pid(), "Uid") == "100000\t100000\t100000\t100000");
  CHECK(StatusField(init->pid(), "Groups").empty());

  // No uid or gid asked for: the namespace's root, not the host's.
  SpawnRequest request = ShellRequest(
      "id -u; id -G; readlink /proc/self/ns/pid; cat /etc/shadow >/dev/null "
      "2>&1 || echo denied; exec sleep 30");
  request.join_pidfd = init->pidfd();
  request.join_namespaces = kCellNamespaces | CLONE_NEWUSER;
  spawn_test::Capture out;
  request.stdout_fd = out.fd();
  auto joined = Spawn(request);
  REQUIRE(joined.ok());
  const std::string expected = absl::StrCat(
      "0\n0\n", Link(absl::StrCat("/proc/", init->pid(), "/ns/pid")),
      "\ndenied\n");
  CHECK(Eventually([&] { return out.Read() == expected; },
                   std::chrono::seconds(5)));
  CHECK(out.Read() == expected);
  CHECK(StatusField(joined->pid(), "Uid") == "100000\t100000\t100000\t100000");
  CHECK(StatusField(joined->pid(), "Gid") == "100000\t100000\t100000\t100000");
  CHECK(StatusField(joined->pid(), "Groups").empty());
  CHECK(Link("/proc/thread-self/ns/pid_for_children") ==
        Link("/proc/self/ns/pid"));
  REQUIRE(joined->Signal(SIGKILL).ok());
  REQUIRE(joined->Wait().ok());

  // Other ids are those inside the namespace.
  request = ShellRequest("exec sleep 30");
  request.join_pidfd = init->pidfd();
  request.join_namespaces = kCellNamespaces | CLONE_NEWUSER;
  request.uid = 1000;
  request.gid = 1000;
  request.supplementary_groups = {5};
  auto other = Spawn(request);
  REQUIRE(other.ok());
  CHECK(StatusField(other->pid(), "Uid") == "101000\t101000\t101000\t101000");
  CHECK(StatusField(other->pid(), "Groups") == "100005");
  REQUIRE(other->Signal(SIGKILL).ok());
  REQUIRE(other->Wait().ok());
  REQUIRE(init->Signal(SIGKILL).ok());
  REQUIRE(init->Wait().ok());
}

TEST_CASE("joining only the uts namespace sees the cell's hostname") {
  Cell cell;
  REQUIRE(cell.Start().ok());
  SpawnRequest request = cell.Exec("cat /proc/sys/kernel/hostname");
  request.join_namespaces = CLONE_NEWUTS;
  auto joined = SpawnAndWait(request);
  REQUIRE(joined.ok());
  CHECK(joined->out == "c1\n");
}

TEST_CASE("errors in a child of a joined pid namespace name the step") {
  Cell cell;
  REQUIRE(cell.Start().ok());
  // The init shares our user namespace, which cannot be re-entered: the
  // child, already in the cell's pid namespace, fails to join it.
  SpawnRequest request = cell.Exec("true");
  request.join_namespaces = kCellNamespaces | CLONE_NEWUSER;
  auto first = Spawn(request);
  REQUIRE_FALSE(first.ok());
  CHECK(first.status().message() == "setns(user): Invalid argument (EINVAL)");
  const std::string only_init = absl::StrCat(cell.init().pid(), " ");
  CHECK(UnreapedChildren() == only_init);
  // Fails later in the child, inside the cell's pid namespace.
  request = cell.Exec("true");
  request.cwd = "/nope";
  auto second = Spawn(request);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kNotFound);
  CHECK(second.status().message() ==
        "chdir(/nope): No such file or directory (ENOENT)");
  CHECK(UnreapedChildren() == only_init);
}

TEST_CASE("a new network namespace has only lo, up when asked") {
  RequireBusybox();
  SpawnRequest request = ShellRequest(
      "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
      "/bin/busybox ip -o link show lo");
  request.new_namespaces = CLONE_NEWNET;
  request.loopback_up = true;
  auto up = SpawnAndWait(request);
  REQUIRE(up.ok());
  CHECK(up->status.code == 0);
  std::vector<std::string> lines =
      absl::StrSplit(up->out, '\n', absl::SkipEmpty());
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "lo");
  CHECK(absl::StrContains(lines[1], "<LOOPBACK,UP,LOWER_UP>"));

  request.loopback_up = false;
  auto down = SpawnAndWait(request);
  REQUIRE(down.ok());
  CHECK(absl::StrContains(down->out, "<LOOPBACK>"));
}

// A rootfs with a static busybox and a few applets.
std::string MakeBusyboxRoot(const testing::TempDir& dir) {
  const std::string root = dir.Sub("root");
  REQUIRE(MakeDirs(root + "/bin", 0755).ok());
  REQUIRE(MakeDirs(root + "/proc", 0555).ok());
  auto busybox = ReadFile("/bin/busybox");
  REQUIRE(busybox.ok());
  REQUIRE(WriteFile(root + "/bin/busybox", *busybox, 0755).ok());
  for (const char* applet : {"sh", "ls", "touch", "cat"}) {
    REQUIRE(symlink("busybox", absl::StrCat(root, "/bin/", applet).c_str()) ==
            0);
  }
  return root;
}

TEST_CASE("rootfs: pivot into it, read-only when asked") {
  RequireBusybox();
  testing::TempDir dir;
  const std::string root = MakeBusyboxRoot(dir);
  const std::string mounts_before = ReadOr("/proc/self/mountinfo");

  SpawnRequest request;
  request.argv = {"/bin/sh", "-c", "ls /; cat /proc/1/comm; touch /x"};
  request.env = {"PATH=/bin"};
  request.new_namespaces = CLONE_NEWNS | CLONE_NEWPID;
  request.rootfs = root;
  auto writable = SpawnAndWait(request);
  REQUIRE(writable.ok());
  CHECK(writable->status.code == 0);
  CHECK(writable->out == "bin\nproc\nsh\n");
  CHECK(writable->err.empty());
  CHECK(access((root + "/x").c_str(), F_OK) == 0);
  REQUIRE(unlink((root + "/x").c_str()) == 0);

  request.readonly_rootfs = true;
  auto readonly = SpawnAndWait(request);
  REQUIRE(readonly.ok());
  CHECK(readonly->status.exited);
  CHECK(readonly->status.code != 0);
  CHECK(absl::StrContains(readonly->err, "Read-only file system"));
  CHECK(access((root + "/x").c_str(), F_OK) != 0);

  // Nothing propagated back to the host's mount table.
  CHECK(ReadOr("/proc/self/mountinfo") == mounts_before);

  request.rootfs = dir.Sub("missing");
  auto missing = Spawn(request);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() ==
        absl::StrCat("mount(", dir.Sub("missing"),
                     ", MS_BIND|MS_REC): No such file or directory (ENOENT)"));
}

TEST_CASE("mount_proc without rootfs shows the new pid namespace") {
  SpawnRequest request = ShellRequest("echo $$; ls /proc | grep -c '^[0-9]'");
  request.new_namespaces = CLONE_NEWNS | CLONE_NEWPID;
  request.mount_proc = true;
  auto result = SpawnAndWait(request);
  REQUIRE(result.ok());
  std::vector<std::string> lines = absl::StrSplit(result->out, '\n');
  REQUIRE(lines.size() >= 2);
  CHECK(lines[0] == "1");
  // sh, ls and grep at most; the host has many more.
  CHECK(std::stoi(lines[1]) <= 3);
}

TEST_CASE("a held mount namespace outlives the cell init that made it") {
  SpawnRequest request;
  request.cell_init = true;
  request.new_namespaces = kCellNamespaces;
  request.mount_proc = true;
  auto init = Spawn(request);
  REQUIRE(init.ok());
  const std::string link = absl::StrCat("/proc/", init->pid(), "/ns/mnt");
  char buf[64];
  ssize_t n = readlink(link.c_str(), buf, sizeof(buf));
  REQUIRE(n > 0);
  const std::string cell_ns(buf, static_cast<size_t>(n));
  n = readlink("/proc/self/ns/mnt", buf, sizeof(buf));
  REQUIRE(n > 0);
  CHECK(cell_ns != std::string(buf, static_cast<size_t>(n)));

  auto ns = init->OpenMountNamespace();
  REQUIRE(ns.ok());
  REQUIRE(init->Signal(SIGKILL).ok());
  auto status = init->Wait();
  REQUIRE(status.ok());
  CHECK(status->signal == SIGKILL);

  // The init is gone; the namespace is not: same inode, still a mount
  // namespace, and it can be entered.
  const std::string held = absl::StrCat("/proc/self/fd/", ns->get());
  n = readlink(held.c_str(), buf, sizeof(buf));
  REQUIRE(n > 0);
  CHECK(std::string(buf, static_cast<size_t>(n)) == cell_ns);
  CHECK(ioctl(ns->get(), NS_GET_NSTYPE) == CLONE_NEWNS);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(setns(ns->get(), CLONE_NEWNS) == 0 ? 0 : errno);
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);  // else the errno of setns
}

TEST_CASE("user namespace: root inside, the mapped uid outside") {
  SpawnRequest request = ShellRequest("id -u; id -g; exec sleep 30");
  request.new_namespaces = CLONE_NEWUSER;
  request.uid_map = "0 100000 65536";
  request.gid_map = "0 100000 65536";
  spawn_test::Capture out;
  request.stdout_fd = out.fd();
  auto child = Spawn(request);
  REQUIRE(child.ok());
  CHECK(Eventually([&] { return out.Read() == "0\n0\n"; },
                   std::chrono::seconds(5)));
  CHECK(StatusField(child->pid(), "Uid") == "100000\t100000\t100000\t100000");
  CHECK(StatusField(child->pid(), "Gid") == "100000\t100000\t100000\t100000");
  // Maps written by root: setgroups stays allowed, and the child has
  // dropped the daemon's supplementary groups.
  CHECK(ReadOr(absl::StrCat("/proc/", child->pid(), "/setgroups")) ==
        "allow\n");
  CHECK(StatusField(child->pid(), "Groups").empty());
  REQUIRE(child->Signal(SIGKILL).ok());
  REQUIRE(child->Wait().ok());

  request.uid_map = "garbage";
  request.stdout_fd = -1;
  auto bad = Spawn(request);
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::StartsWith(bad.status().message(), "write /proc/"));
  CHECK(absl::StrContains(bad.status().message(), "/uid_map: "));
  CHECK(UnreapedChildren().empty());
}

TEST_CASE("hostname in a new UTS namespace leaves the host's alone") {
  const std::string host = ReadOr("/proc/sys/kernel/hostname");
  SpawnRequest request = ShellRequest("cat /proc/sys/kernel/hostname");
  request.new_namespaces = CLONE_NEWUTS;
  request.hostname = "cell-host";
  auto result = SpawnAndWait(request);
  REQUIRE(result.ok());
  CHECK(result->out == "cell-host\n");
  CHECK(ReadOr("/proc/sys/kernel/hostname") == host);
}

TEST_CASE("InNamespaceOf runs in the cell's namespace and comes back") {
  const std::string host = ReadOr("/proc/sys/kernel/hostname");
  const std::string own = Link("/proc/thread-self/ns/uts");
  REQUIRE(!own.empty());
  Cell cell;
  REQUIRE(cell.Start().ok());
  const int pidfd = cell.init().pidfd();
  const std::string cell_ns =
      Link(absl::StrCat("/proc/", cell.init().pid(), "/ns/uts"));
  REQUIRE(cell_ns != own);

  std::string inside;
  absl::Status s = InNamespaceOf(pidfd, CLONE_NEWUTS, [&] {
    inside = Link("/proc/thread-self/ns/uts");
    const char kName[] = "renamed";
    if (sethostname(kName, sizeof(kName) - 1) != 0) {
      return absl::InternalError("sethostname");
    }
    return absl::OkStatus();
  });
  REQUIRE(s.ok());
  CHECK(inside == cell_ns);
  // The thread is back, the host's name untouched, the cell's changed: a
  // process that joins the cell sees it, and this thread's next child is
  // a host one.
  CHECK(Link("/proc/thread-self/ns/uts") == own);
  CHECK(ReadOr("/proc/sys/kernel/hostname") == host);
  SpawnRequest request = cell.Exec("cat /proc/sys/kernel/hostname");
  request.join_namespaces = CLONE_NEWUTS;
  auto joined = SpawnAndWait(request);
  REQUIRE(joined.ok());
  CHECK(joined->out == "renamed\n");
  auto plain = SpawnAndWait(ShellRequest("cat /proc/sys/kernel/hostname"));
  REQUIRE(plain.ok());
  CHECK(plain->out == host);

  // fn's error is the result, and the thread still comes back.
  s = InNamespaceOf(pidfd, CLONE_NEWUTS,
                    [] { return absl::AbortedError("from fn"); });
  CHECK(s == absl::AbortedError("from fn"));
  CHECK(Link("/proc/thread-self/ns/uts") == own);

  // Only namespaces a thread may join alone.
  s = InNamespaceOf(pidfd, CLONE_NEWNS, [] { return absl::OkStatus(); });
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);

  // A process that is gone has no namespace to enter; fn does not run.
  REQUIRE(cell.init().Signal(SIGKILL).ok());
  REQUIRE(cell.init().Wait().ok());
  bool ran = false;
  s = InNamespaceOf(pidfd, CLONE_NEWUTS, [&] {
    ran = true;
    return absl::OkStatus();
  });
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() == "setns(uts): No such process (ESRCH)");
  CHECK_FALSE(ran);
  CHECK(Link("/proc/thread-self/ns/uts") == own);
}

}  // namespace
}  // namespace mycel
