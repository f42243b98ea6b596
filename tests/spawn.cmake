# Tests for runtime/spawn.
# unit: no privileges needed (exec, statuses, stdio, errors, adoption).
mycel_test(spawn_test SRCS unit/runtime/spawn/spawn_test.cc
  DEPS mycel_spawn mycel_testing)
# integration: namespaces, credentials, the cell init, and joining each
# kind of cgroup; each binary needs root, and the cgroup ones a hierarchy of
# their kind, or it is skipped with the reason.
mycel_test(spawn_privileged_test
  SRCS integration/runtime/spawn/spawn_privileged_test.cc
  DEPS mycel_spawn mycel_testing
  LABELS integration TIMEOUT 180)
foreach(_mode v1 v2)
  mycel_test(spawn_cgroup_${_mode}_test
    SRCS integration/runtime/spawn/spawn_cgroup_${_mode}_test.cc
    DEPS mycel_spawn
    LABELS integration)
endforeach()

# Benchmark: built, not run by ctest (see the program's header).
add_executable(spawn_bench bench/spawn_bench.cc)
mycel_compile_options(spawn_bench)
target_link_libraries(spawn_bench PRIVATE mycel_spawn)
