// Helpers shared by the spawn tests: capture a child's output in memfds,
// make a cgroup by hand.
#ifndef MYCEL_TESTS_TESTING_SPAWN_TEST_UTIL_H_
#define MYCEL_TESTS_TESTING_SPAWN_TEST_UTIL_H_

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/spawn/spawn.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel::spawn_test {

// An anonymous file a child writes to, read back from the start.
class Capture final {
 public:
  Capture() : fd_(memfd_create("spawn-test", MFD_CLOEXEC)) {}
  int fd() const { return fd_.get(); }
  std::string Read() const {
    std::string out;
    char buf[4096];
    off_t offset = 0;
    for (;;) {
      ssize_t n = pread(fd_.get(), buf, sizeof(buf), offset);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
      offset += n;
    }
  }

 private:
  UniqueFd fd_;
};

struct Result {
  ExitStatus status;
  std::string out;
  std::string err;
};

// Spawns `request` with stdout and stderr captured, waits, returns both.
inline absl::StatusOr<Result> SpawnAndWait(SpawnRequest request) {
  Capture out, err;
  request.stdout_fd = out.fd();
  request.stderr_fd = err.fd();
  ASSIGN_OR_RETURN(Child child, Spawn(request));
  ASSIGN_OR_RETURN(ExitStatus status, child.Wait());
  return Result{status, out.Read(), err.Read()};
}

// A request running `script` with /bin/sh and a minimal environment.
inline SpawnRequest ShellRequest(const std::string& script) {
  SpawnRequest request;
  request.argv = {"/bin/sh", "-c", script};
  request.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  return request;
}

// A cgroup made by hand for a test, removed afterwards.
class TestCgroup final {
 public:
  explicit TestCgroup(std::string path) : path_(std::move(path)) {
    ok_ = mkdir(path_.c_str(), 0755) == 0;
  }
  ~TestCgroup() {
    if (ok_) rmdir(path_.c_str());
  }
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool ok_ = false;
};

// The pids of the calling thread's children that have not been reaped.
inline std::string UnreapedChildren() {
  absl::StatusOr<std::string> children =
      ReadFile(absl::StrCat("/proc/self/task/", gettid(), "/children"));
  return children.ok() ? *children : children.status().ToString();
}

}  // namespace mycel::spawn_test

#endif  // MYCEL_TESTS_TESTING_SPAWN_TEST_UTIL_H_
