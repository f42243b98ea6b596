# Replicated state end to end: five myceld in network namespaces, in one
# mesh made with `mesh init` and `mesh join`; a write everywhere, a
# partition and its end, kill -9 in a burst of writes, a stopped node.
# Needs root and `ip netns`; skipped (exit 77, with the reason) otherwise.
mycel_test(replication_netns_test
  SRCS e2e/replication_netns_test.cc
  DEPS mycel_proto mycel_runtime mycel_store mycel_testing
  LABELS "e2e;privileged" TIMEOUT 300)
add_dependencies(replication_netns_test myceld mycel)
# The namespaces use one private subnet (10.214.0.0/24), apart from
# membership_netns_test's, so the two may run at once.
set_tests_properties(replication_netns_test PROPERTIES
  RESOURCE_LOCK netns_10_214)
