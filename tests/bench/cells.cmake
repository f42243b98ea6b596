# The cells benchmark (run by hand: tests/bench/cells_bench.sh BUILD_DIR).
# cells_api_bench is its API half: a connected gRPC client timing
# Create/Start/Wait/Delete and Cells.Run against a running myceld.
add_executable(cells_api_bench cells_api_bench.cc)
mycel_compile_options(cells_api_bench)
target_link_libraries(cells_api_bench PRIVATE mycel_proto PkgConfig::ABSL)
