// What a whole test binary needs from the host: root, a cgroup mode, a
// kernel feature. A binary whose every case needs something says so once,
// at namespace scope:
//
//   MYCEL_TEST_REQUIRES(testing::Root("mounts a tmpfs"));
//
// tests/doctest_main.cc evaluates every requirement before doctest runs;
// the first one the host does not meet makes the binary print
// "skipped: <why>" and exit 77, which ctest reports as Skipped (mycel_test
// sets SKIP_RETURN_CODE 77), never as Passed. A case that only some hosts
// can run goes in a binary of its own with its requirement, or asserts what
// the host does instead; it never returns early as if it had passed.
//
// Header-only: doctest_main.cc is compiled into every test binary,
// including those that do not link mycel_testing.
#ifndef MYCEL_TESTS_TESTING_REQUIRES_H_
#define MYCEL_TESTS_TESTING_REQUIRES_H_

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mycel::testing {

// A requirement returns why the host does not meet it, or "" when it does.
using Requirement = std::function<std::string()>;

inline std::vector<Requirement>& Requirements() {
  static auto* const requirements = new std::vector<Requirement>;
  return *requirements;
}

inline bool RegisterRequirement(Requirement requirement) {
  Requirements().push_back(std::move(requirement));
  return true;
}

// Why the first unmet requirement is not met, or "" when all are.
inline std::string UnmetRequirement() {
  for (const Requirement& requirement : Requirements()) {
    if (std::string why = requirement(); !why.empty()) return why;
  }
  return "";
}

// Met when the test runs as root; `what` says what needs it.
inline std::string Root(std::string_view what) {
  if (geteuid() == 0) return "";
  return "needs root (" + std::string(what) + ")";
}

// Met when a child of this process may unshare `clone_flags` (root
// without CAP_SYS_ADMIN, in a container, may not).
inline std::string CanUnshare(int clone_flags) {
  pid_t pid = fork();
  if (pid == 0) _exit(unshare(clone_flags) == 0 ? 0 : errno);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    return "cannot fork to probe unshare";
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return "unshare of the namespaces these tests make fails here: " +
         std::string(strerror(WIFEXITED(status) ? WEXITSTATUS(status) : 0));
}

}  // namespace mycel::testing

#define MYCEL_TEST_REQUIRES_CONCAT_INNER_(a, b) a##b
#define MYCEL_TEST_REQUIRES_CONCAT_(a, b) \
  MYCEL_TEST_REQUIRES_CONCAT_INNER_(a, b)

// Registers a requirement of the whole binary: `expr` is evaluated before
// any case runs and yields "" when the host meets it, else why not.
#define MYCEL_TEST_REQUIRES(expr)                                 \
  [[maybe_unused]] static const bool MYCEL_TEST_REQUIRES_CONCAT_( \
      mycel_test_requires_, __LINE__) =                           \
      ::mycel::testing::RegisterRequirement([] { return std::string(expr); })

#endif  // MYCEL_TESTS_TESTING_REQUIRES_H_
