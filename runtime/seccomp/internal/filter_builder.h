// Builds the BPF program of a seccomp profile with libseccomp. No caching
// (CompileSeccomp caches); exposed for tests and measurements.
#ifndef MYCEL_RUNTIME_SECCOMP_INTERNAL_FILTER_BUILDER_H_
#define MYCEL_RUNTIME_SECCOMP_INTERNAL_FILTER_BUILDER_H_

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/seccomp/seccomp_profile.h"

namespace mycel::seccomp_internal {

// The libseccomp architecture tokens (SCMP_ARCH_*) a filter covers: the
// native one first, then the compat ABIs the kernel may run on it (x86_64:
// x86, and x32 where KernelHasX32()).
std::vector<uint32_t> FilterArches();

// Whether the running kernel implements the x32 ABI (CONFIG_X86_X32_ABI):
// an x32 getpid answers. Asked once; a process that is itself under a
// seccomp filter does not ask (the filter may kill it) and assumes yes.
bool KernelHasX32();

// The highest syscall number, for `arch`, of any name in the profile tables
// that libseccomp can resolve there (x32 numbers include the 0x40000000
// bit); -1 if none resolves. Numbers above it are "newer than the profile".
int HighestKnownSyscall(uint32_t arch);

// Options with the same key compile to the same program: the profile, the
// set of extra_deny names and, except for profile none (which ignores
// them), the set of protected pids and deny_broadcast_signals. Order and
// repeats do not count.
std::string CacheKey(const SeccompOptions& options);

// Compiles `options` from scratch. REQUIRES: every extra_deny name resolves
// (CompileSeccomp checks). An empty vector means "no filter" (profile none,
// no extra_deny). The program is libseccomp's, made smaller by
// CompressDispatch (range_dispatch.h) where that is proven equal.
absl::StatusOr<std::vector<struct sock_filter>> BuildSeccompFilter(
    const SeccompOptions& options);

// libseccomp's program for `options`, as it exports it.
absl::StatusOr<std::vector<struct sock_filter>> BuildLibseccompFilter(
    const SeccompOptions& options);

}  // namespace mycel::seccomp_internal

#endif  // MYCEL_RUNTIME_SECCOMP_INTERNAL_FILTER_BUILDER_H_
