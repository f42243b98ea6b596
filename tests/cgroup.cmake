# Tests for runtime/cgroup.

# unit: the drivers on a fake cgroupfs (a temp directory).
set(_cgroup_fake unit/runtime/cgroup/fake_cgroupfs.cc)
mycel_test(cgroup_limits_test SRCS unit/runtime/cgroup/cgroup_limits_test.cc
  DEPS mycel_cgroup)
mycel_test(cgroup_v1_test SRCS unit/runtime/cgroup/cgroup_v1_test.cc
  ${_cgroup_fake} DEPS mycel_cgroup mycel_testing)
mycel_test(cgroup_v2_test SRCS unit/runtime/cgroup/cgroup_v2_test.cc
  ${_cgroup_fake} DEPS mycel_cgroup mycel_testing)

# integration: the same real-kernel test bodies for each driver. Each binary
# is skipped (with the reason) unless it runs as root on a host of its
# cgroup mode; the v2 one runs inside the QEMU guest's pure cgroup2.
foreach(_mode v1 v2)
  mycel_test(cgroup_${_mode}_kernel_test
    SRCS integration/runtime/cgroup/cgroup_kernel_test.cc
    DEPS mycel_cgroup
    LABELS integration TIMEOUT 180)
  target_compile_definitions(cgroup_${_mode}_kernel_test PRIVATE
    MYCEL_CGROUP_WANT="${_mode}")
endforeach()
# Static, so that the e2e image can carry it into the guest (which has no
# shared libraries) and the boot test can run it there on a pure cgroup2.
mycel_static_executable(cgroup_v2_kernel_test)
