// A classic-BPF interpreter for seccomp filters, for tests: it runs a
// compiled program against a seccomp_data the way the kernel does, so that
// unit tests can check decisions for any architecture and argument without
// loading the filter (and for ABIs this machine cannot execute).
#ifndef MYCEL_TESTS_UNIT_RUNTIME_SECCOMP_BPF_INTERPRETER_H_
#define MYCEL_TESTS_UNIT_RUNTIME_SECCOMP_BPF_INTERPRETER_H_

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mycel::testing {

// The filter's return value (SECCOMP_RET_*), or an error for a program the
// kernel would reject or that runs off its end.
absl::StatusOr<uint32_t> RunSeccompFilter(
    const std::vector<struct sock_filter>& program,
    const struct seccomp_data& data);

// A seccomp_data for syscall `nr` of `audit_arch` (AUDIT_ARCH_*).
struct seccomp_data SyscallData(uint32_t audit_arch, int nr,
                                std::initializer_list<uint64_t> args = {});

// "ALLOW", "ERRNO(1)", "KILL_PROCESS", ... for readable test failures.
std::string DescribeAction(uint32_t ret);

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_UNIT_RUNTIME_SECCOMP_BPF_INTERPRETER_H_
