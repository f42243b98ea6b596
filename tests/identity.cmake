# Tests for mesh/identity: the rule table, certificates as callers, and the
# authorizer (unit); real daemons over loopback mTLS (integration).
mycel_test(identity_test
  SRCS unit/mesh/identity_test.cc
  DEPS mycel_identity mycel_proto mycel_testing)
mycel_test(tls_defaults_test
  SRCS unit/mesh/tls_defaults_test.cc
  DEPS mycel_identity mycel_runtime mycel_testing)

mycel_test(identity_integration_test
  SRCS integration/mesh/authz_test.cc
  DEPS mycel_pki mycel_proto mycel_test_proto mycel_testing mycel_runtime
  LABELS integration TIMEOUT 300)
add_dependencies(identity_integration_test myceld mycel)

mycel_test(mesh_integration_test
  SRCS integration/mesh/mesh_test.cc
  DEPS mycel_runtime mycel_testing
  LABELS integration TIMEOUT 300)
add_dependencies(mesh_integration_test myceld mycel)

# unit: join, renewal and revocation between MeshNodes without the network.
mycel_test(join_test
  SRCS unit/mesh/join_test.cc
  DEPS mycel_identity mycel_daemon mycel_testing)

# integration: joins, revocations and renewals between real daemons over
# loopback mTLS.
mycel_test(join_integration_test
  SRCS integration/mesh/join_test.cc
  DEPS mycel_identity mycel_pki mycel_proto mycel_replication mycel_runtime
    mycel_store mycel_testing
  LABELS integration TIMEOUT 300)
add_dependencies(join_integration_test myceld mycel)
