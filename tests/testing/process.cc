#include "tests/testing/process.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace mycel::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<char*> Argv(const std::vector<std::string>& args) {
  std::vector<char*> v;
  for (const auto& a : args) v.push_back(const_cast<char*>(a.c_str()));
  v.push_back(nullptr);
  return v;
}

int DecodeWait(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

CommandResult Run(const std::vector<std::string>& argv) {
  CommandResult r;
  char out_path[] = "/tmp/mycel-test-out-XXXXXX";
  char err_path[] = "/tmp/mycel-test-err-XXXXXX";
  int out_fd = mkstemp(out_path);
  int err_fd = mkstemp(err_path);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  pid_t pid;
  auto args = Argv(argv);
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out_fd);
  close(err_fd);
  if (rc == 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  } else {
    r.err = std::string("posix_spawn failed: ") + strerror(rc);
  }
  r.out = Slurp(out_path);
  r.err += Slurp(err_path);
  unlink(out_path);
  unlink(err_path);
  return r;
}

CommandResult Shell(const std::string& script) {
  return Run({"/bin/sh", "-c", script});
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/mycel-test-XXXXXX";
  path_ = mkdtemp(tmpl);
}

TempDir::~TempDir() {
  // Unmount anything a test left mounted below (deepest first), then
  // remove the tree. Done in-process: a shell per test case adds up.
  std::vector<std::string> mounts;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string f[5];
    for (auto& x : f) fields >> x;
    if (f[4] == path_ || f[4].rfind(path_ + "/", 0) == 0)
      mounts.push_back(f[4]);
  }
  for (auto it = mounts.rbegin(); it != mounts.rend(); ++it) {
    umount2(it->c_str(), MNT_DETACH);
  }
  // MYCEL_TEST_KEEP_DIRS=1 leaves the tree (daemon logs, databases) for a
  // look after a failure.
  const char* keep = getenv("MYCEL_TEST_KEEP_DIRS");
  if (keep != nullptr && *keep != '\0' && *keep != '0') {
    fprintf(stderr, "kept test directory %s\n", path_.c_str());
    return;
  }
  nftw(
      path_.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        return remove(p);
      },
      64, FTW_DEPTH | FTW_PHYS);
}

std::string Binary(const std::string& name) {
  // MYCEL_TEST_BINARY_DIR runs the tests against another build's daemon
  // and CLI (an older commit, to show that a test fails there).
  const char* other = getenv("MYCEL_TEST_BINARY_DIR");
  const std::string dir =
      other != nullptr && *other ? other : std::string(MYCEL_BINARY_DIR);
  if (name == "myceld") return dir + "/daemon/myceld";
  if (name == "mycel") return dir + "/cli/mycel";
  return dir + "/" + name;
}

bool KernelAtLeast(int major, int minor) {
  struct utsname u;
  int have_major = 0, have_minor = 0;
  if (uname(&u) != 0 ||
      sscanf(u.release, "%d.%d", &have_major, &have_minor) != 2) {
    return false;
  }
  return have_major > major || (have_major == major && have_minor >= minor);
}

DaemonProcess::DaemonProcess(std::string dir, std::vector<std::string> extra)
    : dir_(std::move(dir)), extra_(std::move(extra)) {
  for (size_t i = 0; i + 1 < extra_.size(); ++i) {
    if (extra_[i] == "--cgroup-subtree") subtree_ = extra_[i + 1];
  }
  if (subtree_.empty()) {
    // The same directory gives the same subtree, so that a daemon started
    // again on it (after a kill -9, say) finds its cells.
    subtree_ = "mycel-" + dir_.substr(dir_.rfind('/') + 1);
    own_subtree_ = true;
    extra_.insert(extra_.end(), {"--cgroup-subtree", subtree_});
  }
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    // Leave no cells behind on the host: their cgroups (and anything still
    // running in them) would outlive the test.
    CommandResult ls = Cli({"cell", "ls"});
    if (ls.exit_code == 0) {
      std::istringstream lines(ls.out);
      std::string line;
      std::getline(lines, line);  // the header
      while (std::getline(lines, line)) {
        std::string name = line.substr(0, line.find(' '));
        if (!name.empty()) Cli({"cell", "rm", "--force", name});
      }
    }
    // A clean stop, so that the daemon finishes removing what the deletes
    // left to its background thread; SIGKILL if it hangs.
    kill(pid_, SIGTERM);
    bool exited = false;
    for (int i = 0; i < 200 && !exited; ++i) {
      exited = waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!exited) usleep(50 * 1000);
    }
    if (!exited) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    // The log keeper outlives a daemon on purpose (and ends by itself once
    // it serves no stream); a test that is done with the node ends it.
    // One that killed its daemon to start another on the same directory
    // keeps it for that one.
    const pid_t keeper_pid = static_cast<pid_t>(
        strtol(Slurp(state_dir() + "/logkeeper.lock").c_str(), nullptr, 10));
    if (keeper_pid > 0 &&
        Slurp("/proc/" + std::to_string(keeper_pid) + "/cmdline")
                .find("--log-keeper") != std::string::npos) {
      kill(keeper_pid, SIGKILL);
    }
  }
  if (own_subtree_) {
    // Fails (harmlessly) while cells are left, as after a kill -9 that
    // the next daemon on this directory adopts.
    for (const char* h : {"", "cpu/", "cpuacct/", "memory/", "pids/",
                          "freezer/", "cpuset/", "systemd/", "unified/"}) {
      rmdir(("/sys/fs/cgroup/" + std::string(h) + subtree_).c_str());
    }
  }
}

bool DaemonProcess::Start(std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {Binary("myceld"), "--state-dir", state_dir(),
                                   "--socket", socket()};
  // The harness names the node unless the test sets the name itself, or
  // wants it to come from a config file.
  bool named = false;
  for (const auto& a : extra_) named |= a == "--node-name" || a == "--config";
  if (!named) argv.insert(argv.end(), {"--node-name", "test-node"});
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  argv.insert(argv.begin(), wrapper_.begin(), wrapper_.end());
  log_offset_ = Slurp(dir_ + "/myceld.log").size();
  int log_fd = stderr_fd_ >= 0
                   ? fcntl(stderr_fd_, F_DUPFD_CLOEXEC, 3)
                   : open((dir_ + "/myceld.log").c_str(),
                          O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
  auto args = Argv(argv);
  int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(log_fd);
  if (rc != 0) {
    pid_ = -1;
    return false;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    if (stderr_fd_ >= 0) {
      if (Cli({"--timeout", "1", "node", "health"}).exit_code == 0) return true;
    } else if (Log().find("myceld ready") != std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int DaemonProcess::Signal(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  return Wait(timeout);
}

int DaemonProcess::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return DecodeWait(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string DaemonProcess::Log() const {
  std::string all = Slurp(dir_ + "/myceld.log");
  return all.size() >= log_offset_ ? all.substr(log_offset_) : all;
}

CommandResult DaemonProcess::Cli(std::vector<std::string> args) const {
  args.insert(args.begin(), {Binary("mycel"), "--socket", socket()});
  return Run(args);
}

}  // namespace mycel::testing
