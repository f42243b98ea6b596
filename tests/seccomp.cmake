# Tests for runtime/seccomp.

# unit: parsing, tables, and filter decisions run in a BPF interpreter.
mycel_test(seccomp_profile_test
  SRCS
    unit/runtime/seccomp/seccomp_profile_test.cc
    unit/runtime/seccomp/bpf_interpreter.cc
  DEPS mycel_seccomp)
mycel_test(range_dispatch_test
  SRCS
    unit/runtime/seccomp/range_dispatch_test.cc
    unit/runtime/seccomp/bpf_interpreter.cc
  DEPS mycel_seccomp)
mycel_test(capabilities_test
  SRCS unit/runtime/seccomp/capabilities_test.cc
  DEPS mycel_seccomp)

# integration: fork, load the filter / drop capabilities in the child, exec
# real programs; needs root (else skipped).
mycel_test(seccomp_apply_test
  SRCS
    integration/runtime/seccomp/seccomp_apply_test.cc
    integration/runtime/seccomp/child_runner.cc
  DEPS mycel_seccomp mycel_testing Threads::Threads
  LABELS integration)
mycel_test(capabilities_apply_test
  SRCS
    integration/runtime/seccomp/capabilities_apply_test.cc
    integration/runtime/seccomp/child_runner.cc
  DEPS mycel_seccomp
  LABELS integration)
