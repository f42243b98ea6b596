# Tests for runtime/spawn.
# unit: no privileges needed (exec, statuses, stdio, errors, adoption).
mycel_test(spawn_test SRCS unit/runtime/spawn/spawn_test.cc
  DEPS mycel_spawn mycel_testing)
# integration: namespaces, cgroups, credentials, the cell init; runs as root
# and skips (with the reason) what the host cannot do.
mycel_test(spawn_privileged_test SRCS unit/runtime/spawn/spawn_privileged_test.cc
  DEPS mycel_spawn mycel_testing
  LABELS integration TIMEOUT 180)

# Benchmark: built, not run by ctest (see the program's header).
add_executable(spawn_bench bench/spawn_bench.cc)
mycel_compile_options(spawn_bench)
target_link_libraries(spawn_bench PRIVATE mycel_spawn)
