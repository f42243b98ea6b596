// Spawn, Child and ResolveCommand without privileges: exec, exit statuses,
// stdio, environment, step errors, pre-exec steps, adoption, concurrency.
#include "runtime/spawn/spawn.h"

#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/spawn/internal/clone_vm.h"
#include "runtime/syscalls.h"
#include "tests/testing/process.h"
#include "tests/testing/spawn_test_util.h"

namespace mycel {
namespace {

using spawn_test::Capture;
using spawn_test::ShellRequest;
using spawn_test::SpawnAndWait;
using spawn_test::UnreapedChildren;

SpawnRequest Command(std::vector<std::string> argv) {
  SpawnRequest request;
  request.argv = std::move(argv);
  return request;
}

int CountOpenFds() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (struct dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

TEST_CASE("exit codes and signals come back through Wait") {
  auto ok = SpawnAndWait(Command({"/bin/true"}));
  REQUIRE(ok.ok());
  CHECK(ok->status.exited);
  CHECK(ok->status.code == 0);
  CHECK_FALSE(ok->status.signaled);

  auto fails = SpawnAndWait(Command({"/bin/false"}));
  REQUIRE(fails.ok());
  CHECK(fails->status.exited);
  CHECK(fails->status.code == 1);

  auto killed = SpawnAndWait(ShellRequest("kill -9 $$"));
  REQUIRE(killed.ok());
  CHECK_FALSE(killed->status.exited);
  CHECK(killed->status.signaled);
  CHECK(killed->status.signal == SIGKILL);
  CHECK(UnreapedChildren().empty());
}

TEST_CASE("stdout and stderr reach the given fds byte for byte") {
  auto result = SpawnAndWait(ShellRequest(
      "printf 'out\\000\\377line\\n'; printf 'err\\n' >&2; printf tail"));
  REQUIRE(result.ok());
  CHECK(result->status.code == 0);
  CHECK(result->out == std::string("out\0\377line\ntail", 14));
  CHECK(result->err == "err\n");
}

TEST_CASE("stdin comes from the given fd, and /dev/null by default") {
  Capture in;
  REQUIRE(write(in.fd(), "from stdin", 10) == 10);
  REQUIRE(lseek(in.fd(), 0, SEEK_SET) == 0);
  SpawnRequest request = Command({"/bin/cat"});
  request.stdin_fd = in.fd();
  auto fed = SpawnAndWait(request);
  REQUIRE(fed.ok());
  CHECK(fed->out == "from stdin");

  auto empty = SpawnAndWait(Command({"/bin/cat"}));
  REQUIRE(empty.ok());
  CHECK(empty->status.code == 0);
  CHECK(empty->out.empty());
}

TEST_CASE("a stdio fd that is itself 0, 1 or 2 of the parent is not lost") {
  // Swapping: the child's stdout is the parent's fd 2 and vice versa needs
  // the sources moved out of the way before dup2.
  Capture out, err;
  UniqueFd saved1(fcntl(1, F_DUPFD_CLOEXEC, 3));
  UniqueFd saved2(fcntl(2, F_DUPFD_CLOEXEC, 3));
  REQUIRE(dup2(out.fd(), 2) == 2);
  REQUIRE(dup2(err.fd(), 1) == 1);
  SpawnRequest request = ShellRequest("echo to-out; echo to-err >&2");
  request.stdout_fd = 2;
  request.stderr_fd = 1;
  auto child = Spawn(request);
  dup2(saved1.get(), 1);
  dup2(saved2.get(), 2);
  REQUIRE(child.ok());
  REQUIRE(child->Wait().ok());
  CHECK(out.Read() == "to-out\n");
  CHECK(err.Read() == "to-err\n");
}

TEST_CASE("the environment is exactly the one given") {
  SpawnRequest request = Command({"/usr/bin/env"});
  request.env = {"A=1", "B=two words", "EMPTY="};
  auto result = SpawnAndWait(request);
  REQUIRE(result.ok());
  CHECK(result->out == "A=1\nB=two words\nEMPTY=\n");

  auto none = SpawnAndWait(Command({"/usr/bin/env"}));
  REQUIRE(none.ok());
  CHECK(none->out.empty());
}

TEST_CASE("cwd applies, and defaults to /") {
  testing::TempDir dir;
  SpawnRequest request = Command({"/bin/pwd"});
  request.cwd = dir.path();
  auto in_dir = SpawnAndWait(request);
  REQUIRE(in_dir.ok());
  CHECK(in_dir->out == dir.path() + "\n");

  auto root = SpawnAndWait(Command({"/bin/pwd"}));
  REQUIRE(root.ok());
  CHECK(root->out == "/\n");
}

TEST_CASE("a failed chdir names the step and leaves no child behind") {
  SpawnRequest request = Command({"/bin/true"});
  request.cwd = "/nope";
  auto child = Spawn(request);
  REQUIRE_FALSE(child.ok());
  CHECK(child.status().code() == absl::StatusCode::kNotFound);
  CHECK(child.status().message() ==
        "chdir(/nope): No such file or directory (ENOENT)");
  CHECK(UnreapedChildren().empty());
}

TEST_CASE("exec of a file that is not executable fails with execve(") {
  testing::TempDir dir;
  std::string path = dir.Sub("script");
  REQUIRE(WriteFile(path, "#!/bin/sh\nexit 0\n", 0644).ok());
  auto child = Spawn(Command({path}));
  REQUIRE_FALSE(child.ok());
  CHECK(child.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(child.status().message() ==
        absl::StrCat("execve(", path, "): Permission denied (EACCES)"));

  auto missing = Spawn(Command({dir.Sub("missing")}));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(absl::StartsWith(missing.status().message(), "execve("));
  CHECK(UnreapedChildren().empty());
}

TEST_CASE("oom_score_adj is the child's own, written before anything else") {
  // Raising it needs no privilege; the daemon lowers its own and gives its
  // workloads back the value it started with (a privileged case is in
  // cells_integration_test).
  auto parent = ReadFile("/proc/self/oom_score_adj");
  REQUIRE(parent.ok());
  auto kept = SpawnAndWait(ShellRequest("cat /proc/self/oom_score_adj"));
  REQUIRE(kept.ok());
  CHECK(kept->out == *parent);
  SpawnRequest raised = ShellRequest("cat /proc/self/oom_score_adj");
  raised.oom_score_adj = 500;
  auto out = SpawnAndWait(raised);
  REQUIRE(out.ok());
  CHECK(out->status.code == 0);
  CHECK(out->out == "500\n");
  SpawnRequest bad = Command({"/bin/true"});
  bad.oom_score_adj = 1001;
  auto refused = Spawn(bad);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(refused.status().message(), "oom_score_adj"));
}

TEST_CASE("setns errors name the namespace and follow errno") {
  UniqueFd self(sys::PidfdOpen(getpid(), 0));
  REQUIRE(self.valid());

  // Our own user namespace cannot be re-entered (the kernel says EINVAL);
  // the network namespace, the same as ours, could be.
  SpawnRequest request = Command({"/bin/true"});
  request.join_pidfd = self.get();
  request.join_namespaces = CLONE_NEWNET | CLONE_NEWUSER;
  auto child = Spawn(request);
  REQUIRE_FALSE(child.ok());
  CHECK(child.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(child.status().message() == "setns(user): Invalid argument (EINVAL)");

  // Not a pidfd at all.
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  request.join_pidfd = devnull.get();
  request.join_namespaces = CLONE_NEWNET;
  child = Spawn(request);
  REQUIRE_FALSE(child.ok());
  CHECK(child.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(child.status().message() == "setns(net): Invalid argument (EINVAL)");

  // A descriptor that is not open.
  constexpr int kClosed = 1000;
  REQUIRE(fcntl(kClosed, F_GETFD) == -1);
  request.join_pidfd = kClosed;
  child = Spawn(request);
  REQUIRE_FALSE(child.ok());
  CHECK(absl::StartsWith(child.status().message(),
                         "setns(net): Bad file descriptor (EBADF)"));
  CHECK(UnreapedChildren().empty());
}

struct Mark {
  char byte;
  int error;
};

int WriteMark(const void* arg) noexcept {
  const Mark* mark = static_cast<const Mark*>(arg);
  if (write(1, &mark->byte, 1) != 1) return errno;
  return mark->error;
}

TEST_CASE("pre_exec steps run in order, after stdio, and can fail the spawn") {
  static const Mark kA = {'a', 0}, kB = {'b', 0}, kFail = {'x', EPERM};
  SpawnRequest request = Command({"/bin/echo", "c"});
  request.pre_exec = {{"first", WriteMark, &kA}, {"second", WriteMark, &kB}};
  auto ran = SpawnAndWait(request);
  REQUIRE(ran.ok());
  CHECK(ran->out == "abc\n");

  Capture out;
  request.stdout_fd = out.fd();
  request.pre_exec = {{"first", WriteMark, &kA},
                      {"seccomp", WriteMark, &kFail},
                      {"never", WriteMark, &kB}};
  auto failed = Spawn(request);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(failed.status().message() ==
        "seccomp: Operation not permitted (EPERM)");
  CHECK(out.Read() == "ax");
  CHECK(UnreapedChildren().empty());
}

TEST_CASE("descriptors without O_CLOEXEC do not leak into the child") {
  int leaky = open("/dev/null", O_RDONLY);  // deliberately without CLOEXEC
  REQUIRE(leaky >= 3);
  auto result = SpawnAndWait(
      ShellRequest(absl::StrCat("if [ -e /proc/self/fd/", leaky,
                                " ]; then echo open; else echo closed; fi")));
  close(leaky);
  REQUIRE(result.ok());
  CHECK(result->out == "closed\n");
}

TEST_CASE("the child starts with default dispositions and no blocked signal") {
  // A shell cannot un-ignore a signal that was ignored when it started, so
  // this only dies if Spawn reset the disposition.
  struct sigaction ignore = {}, saved_term = {};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(sigaction(SIGTERM, &ignore, &saved_term) == 0);
  sigset_t usr1, saved_mask;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &usr1, &saved_mask) == 0);

  auto term = SpawnAndWait(ShellRequest("kill -TERM $$; echo survived"));
  auto usr = SpawnAndWait(ShellRequest("kill -USR1 $$; echo survived"));
  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  sigaction(SIGTERM, &saved_term, nullptr);

  REQUIRE(term.ok());
  CHECK(term->status.signaled);
  CHECK(term->status.signal == SIGTERM);
  CHECK(term->out.empty());
  REQUIRE(usr.ok());
  CHECK(usr->status.signaled);
  CHECK(usr->status.signal == SIGUSR1);
}

TEST_CASE("Signal, TryWait and the start time of a running child") {
  auto child = Spawn(Command({"/bin/sleep", "30"}));
  REQUIRE(child.ok());
  CHECK(child->pid() > 0);
  CHECK(child->pidfd() >= 0);
  auto start = ProcessStartTime(child->pid());
  REQUIRE(start.ok());
  CHECK(*start == child->start_time());
  CHECK(child->start_time() > 0);

  auto running = child->TryWait();
  REQUIRE(running.ok());
  CHECK_FALSE(running->has_value());

  REQUIRE(child->Signal(SIGTERM).ok());
  auto status = child->Wait();
  REQUIRE(status.ok());
  CHECK(status->signaled);
  CHECK(status->signal == SIGTERM);
  // Reaped: the status stays, and the process cannot be signalled any more.
  auto again = child->TryWait();
  REQUIRE(again.ok());
  REQUIRE(again->has_value());
  CHECK((*again)->signal == SIGTERM);
  absl::Status gone = child->Signal(SIGTERM);
  CHECK(gone.code() == absl::StatusCode::kNotFound);
}

TEST_CASE("Adopt checks the start time, and a reaped pid is NOT_FOUND") {
  auto child = Spawn(Command({"/bin/sleep", "30"}));
  REQUIRE(child.ok());
  const pid_t pid = child->pid();
  const uint64_t start = child->start_time();

  auto adopted = Child::Adopt(pid, start);
  REQUIRE(adopted.ok());
  CHECK(adopted->pid() == pid);
  CHECK(adopted->start_time() == start);

  auto reused = Child::Adopt(pid, start + 1);
  REQUIRE_FALSE(reused.ok());
  CHECK(reused.status().code() == absl::StatusCode::kFailedPrecondition);

  // The adopted handle signals the same process.
  REQUIRE(adopted->Signal(SIGKILL).ok());
  auto status = child->Wait();
  REQUIRE(status.ok());
  CHECK(status->signal == SIGKILL);

  auto gone = Child::Adopt(pid, start);
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.status().code() == absl::StatusCode::kNotFound);
  CHECK(ProcessStartTime(pid).status().code() == absl::StatusCode::kNotFound);
}

// What an nsfs fd or /proc/PID/ns link names: "mnt:[4026531841]".
std::string NamespaceLink(const std::string& path) {
  char buf[64];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST_CASE("OpenMountNamespace: the child's, through the pidfd or /proc") {
  auto child = Spawn(Command({"/bin/sleep", "30"}));
  REQUIRE(child.ok());
  const std::string ours = NamespaceLink("/proc/self/ns/mnt");
  REQUIRE(absl::StartsWith(ours, "mnt:["));
  auto ns = child->OpenMountNamespace();
  REQUIRE(ns.ok());
  CHECK(NamespaceLink(absl::StrCat("/proc/self/fd/", ns->get())) == ours);
  auto via_proc =
      spawn_internal::OpenMountNamespaceFromProc(child->pid(), child->pidfd());
  REQUIRE(via_proc.ok());
  CHECK(NamespaceLink(absl::StrCat("/proc/self/fd/", via_proc->get())) == ours);

  REQUIRE(child->Signal(SIGKILL).ok());
  REQUIRE(child->Wait().ok());
  CHECK(child->OpenMountNamespace().status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(spawn_internal::OpenMountNamespaceFromProc(child->pid(), child->pidfd())
            .status()
            .code() == absl::StatusCode::kNotFound);
  UniqueFd released = child->ReleasePidfd();
  CHECK(child->OpenMountNamespace().status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("ReleasePidfd hands the descriptor over") {
  auto child = Spawn(Command({"/bin/true"}));
  REQUIRE(child.ok());
  UniqueFd pidfd = child->ReleasePidfd();
  CHECK(pidfd.valid());
  CHECK(child->pidfd() == -1);
  CHECK(child->Wait().status().code() == absl::StatusCode::kFailedPrecondition);
  siginfo_t info = {};
  REQUIRE(waitid(P_PIDFD, static_cast<id_t>(pidfd.get()), &info, WEXITED) == 0);
  CHECK(info.si_status == 0);
}

// PIDFD_INFO_EXIT: a reaped process's exit status is kept for its pidfds.
bool KernelKeepsExitStatus() { return testing::KernelAtLeast(6, 15); }

TEST_CASE("ReapedExitStatus: unavailable until reaped, then the status") {
  struct Case {
    const char* script;
    bool exited;
    int value;  // the exit code, or the signal
  };
  for (const Case& c :
       {Case{"exit 7", true, 7}, Case{"kill -TERM $$", false, SIGTERM}}) {
    const std::string script = c.script;
    const bool exited = c.exited;
    const int value = c.value;
    CAPTURE(script);
    auto child = Spawn(ShellRequest(script));
    REQUIRE(child.ok());
    // Exited (its pidfd turns readable) but not reaped: a zombie.
    pollfd exited_fd = {child->pidfd(), POLLIN, 0};
    REQUIRE(poll(&exited_fd, 1, 10000) == 1);
    CHECK(ReapedExitStatus(child->pidfd()).status().code() ==
          absl::StatusCode::kUnavailable);
    REQUIRE(child->Wait().ok());
    absl::StatusOr<ExitStatus> status = ReapedExitStatus(child->pidfd());
    if (!KernelKeepsExitStatus()) {
      CHECK(status.status().code() == absl::StatusCode::kUnimplemented);
      continue;
    }
    REQUIRE(status.ok());
    CHECK(status->exited == exited);
    CHECK(status->signaled == !exited);
    CHECK((exited ? status->code : status->signal) == value);
  }
  // A process that still runs has no exit status yet.
  auto running = Spawn(Command({"/bin/sleep", "30"}));
  REQUIRE(running.ok());
  CHECK(ReapedExitStatus(running->pidfd()).status().code() ==
        absl::StatusCode::kUnavailable);
  REQUIRE(running->Signal(SIGKILL).ok());
  REQUIRE(running->Wait().ok());
}

TEST_CASE("ReapedExitStatus read while another thread reaps the process") {
  if (!KernelKeepsExitStatus()) {
    MESSAGE("skipped: this kernel keeps no exit status for pidfds (< 6.15)");
    return;
  }
  // The kernel reads a pidfd's exit record before it looks the task up: a
  // reap between the two used to read as "no exit status kept", and an
  // adopted executable's end as unknown. Every read must be UNAVAILABLE (not
  // reaped yet) or the status.
  int unexpected = 0;
  std::string first_unexpected;
  for (int round = 0; round < 300; ++round) {
    auto child = Spawn(ShellRequest("exit 3"));
    REQUIRE(child.ok());
    pollfd exited_fd = {child->pidfd(), POLLIN, 0};
    REQUIRE(poll(&exited_fd, 1, 10000) == 1);
    std::atomic<bool> go{false};
    std::thread reaper([&] {
      while (!go.load()) {
      }
      REQUIRE(child->Wait().ok());
    });
    go.store(true);
    for (;;) {
      absl::StatusOr<ExitStatus> s = ReapedExitStatus(child->pidfd());
      if (absl::IsUnavailable(s.status())) continue;
      if (!s.ok() || !s->exited || s->code != 3) {
        if (unexpected++ == 0) first_unexpected = s.status().ToString();
      }
      break;
    }
    reaper.join();
  }
  CAPTURE(first_unexpected);
  CHECK(unexpected == 0);
}

TEST_CASE("malformed requests are INVALID_ARGUMENT naming the field") {
  auto relative = Spawn(Command({"true"}));
  REQUIRE_FALSE(relative.ok());
  CHECK(relative.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(relative.status().message(), "argv[0]: "));

  CHECK(Spawn(SpawnRequest{}).status().code() ==
        absl::StatusCode::kInvalidArgument);

  // Options that would change the host's own namespaces are refused.
  SpawnRequest host = Command({"/bin/true"});
  host.hostname = "renamed";
  auto renamed = Spawn(host);
  CHECK(renamed.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(renamed.status().message(), "hostname: "));

  host = Command({"/bin/true"});
  host.readonly_rootfs = true;
  CHECK(Spawn(host).status().code() == absl::StatusCode::kInvalidArgument);

  host = Command({"/bin/true"});
  host.new_namespaces = CLONE_NEWNET;
  host.join_namespaces = CLONE_NEWNET;
  host.join_pidfd = 0;
  CHECK(Spawn(host).status().code() == absl::StatusCode::kInvalidArgument);

  host = Command({"/bin/true"});
  host.new_namespaces = CLONE_VM;
  CHECK(Spawn(host).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a cgroup fd that is not a cgroup is named in the error") {
  UniqueFd not_a_cgroup(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(not_a_cgroup.valid());
  SpawnRequest request = Command({"/bin/true"});
  request.cgroup_dir_fd = not_a_cgroup.get();
  // The child shares the parent's memory. With CloneVm it is born in the
  // cgroup, and clone3 refuses the fd; without, it would join by
  // cgroup.procs, which does not open.
  auto child = Spawn(request);
  REQUIRE_FALSE(child.ok());
  if constexpr (spawn_internal::kHaveCloneVm) {
    CHECK(child.status().message() ==
          absl::StrCat("clone3 into cgroup fd ", not_a_cgroup.get(),
                       ": Bad file descriptor (EBADF)"));
  } else {
    CHECK(absl::StartsWith(child.status().message(),
                           absl::StrCat("open cgroup.procs of cgroup fd ",
                                        not_a_cgroup.get(), ": ")));
  }
  CHECK(UnreapedChildren().empty());

  // A new user namespace takes clone3 with CLONE_INTO_CGROUP, whose error
  // names what it was asked to create.
  request.new_namespaces = CLONE_NEWUSER;
  child = Spawn(request);
  REQUIRE_FALSE(child.ok());
  CHECK(absl::StartsWith(
      child.status().message(),
      absl::StrCat("clone3 new namespaces user into cgroup fd ",
                   not_a_cgroup.get(), ": ")));
  CHECK(UnreapedChildren().empty());
}

TEST_CASE("8 threads spawning at once: all succeed, no fd leaks") {
  const int fds_before = CountOpenFds();
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50;
  std::atomic<int> succeeded{0};
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto child = Spawn(Command({"/bin/true"}));
        if (!child.ok()) {
          errors[t] = child.status().ToString();
          return;
        }
        auto status = child->Wait();
        if (!status.ok() || !status->exited || status->code != 0) {
          errors[t] = status.ok() ? "bad exit" : status.status().ToString();
          return;
        }
        succeeded.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors) CHECK(error.empty());
  CHECK(succeeded.load() == kThreads * kPerThread);
  CHECK(CountOpenFds() == fds_before);
}

TEST_CASE("ResolveCommand searches PATH the way execvp does") {
  auto found = ResolveCommand("sh", {"PATH=/usr/bin:/bin"}, "");
  REQUIRE(found.ok());
  CHECK(*found == "/usr/bin/sh");
  auto by_default = ResolveCommand("true", {}, "");
  REQUIRE(by_default.ok());
  CHECK(*by_default == "/usr/bin/true");
  auto absolute = ResolveCommand("/bin/true", {}, "");
  REQUIRE(absolute.ok());
  CHECK(*absolute == "/bin/true");

  testing::TempDir dir;
  REQUIRE(MakeDirs(dir.Sub("a"), 0755).ok());
  REQUIRE(MakeDirs(dir.Sub("b"), 0755).ok());
  REQUIRE(WriteFile(dir.Sub("a/tool"), "data", 0644).ok());
  REQUIRE(WriteFile(dir.Sub("b/tool"), "#!/bin/sh\n", 0755).ok());
  const std::string path =
      absl::StrCat("PATH=relative:", dir.Sub("a"), "::", dir.Sub("b"));
  auto second = ResolveCommand("tool", {path}, "");
  REQUIRE(second.ok());
  CHECK(*second == dir.Sub("b/tool"));

  auto only_plain =
      ResolveCommand("tool", {absl::StrCat("PATH=", dir.Sub("a"))}, "");
  REQUIRE_FALSE(only_plain.ok());
  CHECK(only_plain.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(only_plain.status().message() ==
        absl::StrCat("command: ", dir.Sub("a/tool"), " is not executable"));

  auto plain_absolute = ResolveCommand(dir.Sub("a/tool"), {}, "");
  CHECK(plain_absolute.status().code() == absl::StatusCode::kPermissionDenied);
  auto directory = ResolveCommand(dir.path(), {}, "");
  CHECK(directory.status().code() == absl::StatusCode::kPermissionDenied);

  auto missing = ResolveCommand("no-such-tool-xyz", {path}, "");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(missing.status().message() ==
        "command: \"no-such-tool-xyz\" not found in PATH");
  CHECK(ResolveCommand("/no/such/tool", {}, "").status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(ResolveCommand("./tool", {}, "").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ResolveCommand("", {}, "").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ResolveCommand inside a rootfs resolves symlinks within it") {
  testing::TempDir dir;
  const std::string root = dir.Sub("root");
  REQUIRE(MakeDirs(root + "/bin", 0755).ok());
  REQUIRE(WriteFile(root + "/bin/busybox", "#!/bin/sh\n", 0755).ok());
  REQUIRE(symlink("/bin/busybox", (root + "/bin/sh").c_str()) == 0);
  // Exists on the host but not in the rootfs: must not be found.
  REQUIRE(symlink("/usr/bin/env", (root + "/bin/env").c_str()) == 0);

  auto sh = ResolveCommand("sh", {"PATH=/bin"}, root);
  REQUIRE(sh.ok());
  CHECK(*sh == "/bin/sh");
  auto env = ResolveCommand("env", {"PATH=/bin"}, root);
  REQUIRE_FALSE(env.ok());
  CHECK(env.status().code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(env.status().message(), root));
  CHECK(ResolveCommand("/bin/env", {}, root).status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(ResolveCommand("sh", {}, dir.Sub("missing")).status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("a child reaped before Spawn returns is still spawned") {
  // myceld's reaper does not hold spawns back: a child that execs and
  // exits at once can be collected before Spawn has read its start time.
  // A thread here reaps every child the moment it exits.
  std::atomic<bool> stop{false};
  std::atomic<int> reaped{0};
  std::thread reaper([&] {
    while (!stop.load()) {
      siginfo_t info = {};
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG) == 0 && info.si_pid != 0) {
        ++reaped;
      } else {
        std::this_thread::yield();
      }
    }
  });
  int gone = 0;
  for (int i = 0; i < 300; ++i) {
    absl::StatusOr<Child> child = Spawn(Command({"/bin/true"}));
    REQUIRE_MESSAGE(child.ok(), child.status());
    if (child->start_time() == 0) ++gone;
  }
  stop = true;
  reaper.join();
  for (;;) {  // any left over
    siginfo_t info = {};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG) != 0 || info.si_pid == 0) {
      break;
    }
  }
  MESSAGE(gone, " of 300 children were reaped before Spawn returned");
  CHECK(reaped.load() > 0);
}

}  // namespace
}  // namespace mycel
