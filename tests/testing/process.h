// Test helpers: run a command and capture its output; start and stop a real
// myceld on a temp directory. For integration tests only.
#ifndef MYCEL_TESTS_TESTING_PROCESS_H_
#define MYCEL_TESTS_TESTING_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace mycel::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with `argv`, waits, and captures stdout and stderr.
CommandResult Run(const std::vector<std::string>& argv);

// Runs a command through /bin/sh -c.
CommandResult Shell(const std::string& script);

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Path of a built binary: Binary("myceld"), Binary("mycel"); from
// $MYCEL_TEST_BINARY_DIR when set, else from this build.
std::string Binary(const std::string& name);

// Whether the running kernel's release (uname -r) is at least major.minor.
bool KernelAtLeast(int major, int minor);

// One myceld process. Its stderr goes to <dir>/myceld.log.
class DaemonProcess {
 public:
  // `dir` holds state/, the socket and the log. `extra` flags are appended.
  DaemonProcess(std::string dir, std::vector<std::string> extra = {});
  ~DaemonProcess();  // SIGKILLs the daemon if it still runs

  // Starts the daemon and waits until its socket answers a health check, or
  // until it exits (returns false), or `timeout` passes (returns false).
  bool Start(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Sends `sig` and waits for the exit; returns the exit code, or 128+signal.
  int Signal(int sig,
             std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Waits for the daemon to exit on its own; returns the exit code or
  // 128+signal, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout = std::chrono::seconds(20));

  // Starts myceld through `wrapper` (e.g. {"/usr/bin/unshare", "--pid",
  // "--fork", "--mount-proc"}); pid() is then the wrapper's pid.
  void set_wrapper(std::vector<std::string> wrapper) {
    wrapper_ = std::move(wrapper);
  }
  // Sends the daemon's stdout and stderr to `fd` (the caller's) instead of
  // the log file; Start then waits for the socket to answer instead of the
  // log's "myceld ready", and Log() is empty.
  void set_stderr(int fd) { stderr_fd_ = fd; }

  pid_t pid() const { return pid_; }
  // The cgroup subtree of the daemon's cells: the test's --cgroup-subtree,
  // else one derived from `dir` (two daemons on a host may not share one),
  // removed when this object goes if no cell is left in it.
  const std::string& cgroup_subtree() const { return subtree_; }
  std::string socket() const { return dir_ + "/mycel.sock"; }
  std::string state_dir() const { return dir_ + "/state"; }
  // What this process wrote to the log (earlier runs in the same directory
  // are not included).
  std::string Log() const;
  // Runs the mycel CLI against this daemon's socket.
  CommandResult Cli(std::vector<std::string> args) const;

 private:
  std::string dir_;
  std::vector<std::string> extra_;
  std::vector<std::string> wrapper_;
  std::string subtree_;
  bool own_subtree_ = false;
  int stderr_fd_ = -1;
  pid_t pid_ = -1;
  size_t log_offset_ = 0;
};

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_TESTING_PROCESS_H_
