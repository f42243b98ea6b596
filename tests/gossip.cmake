# Membership over the wire: the node-key signer and verifier and the
# daemon's membership settings (unit), the Gossip service and GrpcTransport
# over real mTLS in one process (integration), and five myceld in network
# namespaces (e2e).
mycel_test(pki_signer_test SRCS unit/mesh/pki_signer_test.cc
  DEPS mycel_membership_node mycel_pki mycel_runtime mycel_testing)
mycel_test(membership_config_test SRCS unit/daemon/membership_config_test.cc
  DEPS mycel_daemon mycel_testing)
mycel_test(grpc_log_test SRCS unit/daemon/grpc_log_test.cc
  DEPS mycel_daemon)
mycel_test(gossip_integration_test
  SRCS integration/mesh/gossip_test.cc
  DEPS mycel_daemon mycel_membership_node mycel_testing
  LABELS integration TIMEOUT 120)
# Needs root and `ip netns`; skipped (exit 77, with the reason) otherwise.
mycel_test(membership_netns_test
  SRCS e2e/membership_netns_test.cc
  DEPS mycel_proto mycel_runtime mycel_testing
  LABELS "e2e;privileged" TIMEOUT 420)
add_dependencies(membership_netns_test myceld mycel)
# The namespaces use one private subnet (10.213.0.0/24).
set_tests_properties(membership_netns_test PROPERTIES RESOURCE_LOCK netns_10_213)
