# The user key/value namespace of the replicated store (State), read-only
# SQL over the local replica (Query), and durability of acknowledged writes.
mycel_test(state_store_test SRCS unit/daemon/state_store_test.cc
  DEPS mycel_store mycel_testing)
mycel_test(json_text_test SRCS unit/daemon/json_text_test.cc
  DEPS mycel_json_text mycel_testing)
mycel_test(query_test SRCS unit/daemon/query_test.cc
  DEPS mycel_store mycel_testing)
mycel_test(query_service_test SRCS unit/daemon/query_service_test.cc
  DEPS mycel_daemon mycel_testing)
# Real myceld processes: the CLI, Watch over the socket, kill -9.
mycel_test(state_integration_test SRCS integration/state_test.cc
  DEPS mycel_proto mycel_testing mycel_runtime
  LABELS integration TIMEOUT 300)
add_dependencies(state_integration_test myceld mycel)
mycel_test(state_watchers_test SRCS unit/daemon/state_watchers_test.cc
  DEPS mycel_daemon mycel_testing)
