# e2e tests: QEMU boots of packaging/image.
#
# e2e_image_build builds the image once per ctest run into
# ${CMAKE_BINARY_DIR}/image (the kernel .deb is cached by build.sh), from this
# tree's myceld and mycel; every boot test requires it as a fixture, so
# `ctest -R e2e_boot_test` builds it first.
set(MYCEL_E2E_IMAGE_DIR ${CMAKE_BINARY_DIR}/image)

add_test(NAME e2e_image_build
  COMMAND bash ${PROJECT_SOURCE_DIR}/packaging/image/build.sh
    --build-dir ${CMAKE_BINARY_DIR}
    --extra ${CMAKE_BINARY_DIR}/tests/cgroup_v2_kernel_test
    ${MYCEL_E2E_IMAGE_DIR})
# Tests do not build targets: without the binaries ctest reports the
# fixture as not run (and the boot tests with it) instead of booting a stale
# image.
set_tests_properties(e2e_image_build PROPERTIES
  FIXTURES_SETUP e2e_image
  REQUIRED_FILES "${CMAKE_BINARY_DIR}/daemon/myceld;${CMAKE_BINARY_DIR}/cli/mycel;${CMAKE_BINARY_DIR}/tests/cgroup_v2_kernel_test"
  LABELS e2e
  TIMEOUT 600)

mycel_test(e2e_boot_test SRCS e2e/boot_test.cc e2e/guest.cc
  DEPS mycel_daemon mycel_proto mycel_testing mycel_runtime
  LABELS e2e TIMEOUT 180)
add_dependencies(e2e_boot_test myceld mycel)
# One QEMU at a time: under TCG each guest takes a whole core.
set_tests_properties(e2e_boot_test PROPERTIES
  FIXTURES_REQUIRED e2e_image
  RESOURCE_LOCK qemu)
