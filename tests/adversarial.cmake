# The adversarial tier: every attack that once worked against mycel (ways
# out of a cell, floods, bad input, crash and disk faults), kept running in
# CI. Select it with `ctest -L adversarial`.
add_library(mycel_adversarial STATIC adversarial/adversarial.cc)
mycel_compile_options(mycel_adversarial)
target_link_libraries(mycel_adversarial PUBLIC mycel_testing mycel_proto
  PkgConfig::GRPCPP PkgConfig::ABSL PkgConfig::OPENSSL)
target_compile_definitions(mycel_adversarial PRIVATE
  MYCEL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

foreach(t availability logs escape data)
  mycel_test(${t}_adversarial_test SRCS adversarial/${t}_test.cc
    DEPS mycel_adversarial mycel_runtime
    LABELS "adversarial;integration" TIMEOUT 600)
  add_dependencies(${t}_adversarial_test myceld mycel)
endforeach()
