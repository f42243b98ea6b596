// Runs test code in a forked child, where a seccomp filter or a capability
// drop can be applied without touching the test process, and collects what
// the child wrote and how it ended.
#ifndef MYCEL_TESTS_INTEGRATION_RUNTIME_SECCOMP_CHILD_RUNNER_H_
#define MYCEL_TESTS_INTEGRATION_RUNTIME_SECCOMP_CHILD_RUNNER_H_

#include <functional>
#include <initializer_list>
#include <map>
#include <string>

namespace mycel::testing {

struct ChildResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;  // stdout and stderr, interleaved
};

// Forks. The child gets stdin from /dev/null and stdout/stderr on a pipe the
// parent drains, runs `body` and _exits with its return value (so no atexit
// handler or doctest state of the child runs). The test process must be
// single-threaded.
ChildResult RunInChild(const std::function<int()>& body);

// In a child: execv(argv[0], argv) with the test's environment. Returns 127
// (after reporting "exec=<errno>") if the exec fails.
int Exec(std::initializer_list<const char*> argv);

// In a child: writes "key=value\n" to stdout with one write(2).
void Report(const char* key, long value);

// In a child: reports `key` as 0 when `ret` is not -1, else as errno.
void ReportErrno(const char* key, long ret);

// The key=value lines of `out` (other lines are ignored).
std::map<std::string, std::string> ParseReport(const std::string& out);

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_INTEGRATION_RUNTIME_SECCOMP_CHILD_RUNNER_H_
