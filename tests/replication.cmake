# Tests for replication: the store half (daemon/store/objects.h) and the
# state machine (mesh/replication) in a simulated mesh of real SQLite stores.
mycel_test(replication_store_test SRCS unit/mesh/replication_store_test.cc
  DEPS mycel_store mycel_testing)
# A simulated mesh of real stores: partitions, loss, restarts, days offline
# (a few seconds of wall time).
mycel_test(replication_sim_test SRCS unit/mesh/replication_sim_test.cc
  DEPS mycel_replication mycel_membership_sim mycel_testing TIMEOUT 300)

# unit: the driver on a ManualClock with an in-process transport and a
# state database per node.
mycel_test(replication_driver_test
  SRCS unit/mesh/replication_driver_test.cc
  DEPS mycel_replication mycel_testing)
# unit: a change's origin signature against the origin's certificate.
mycel_test(origin_verifier_test SRCS unit/mesh/origin_verifier_test.cc
  DEPS mycel_replication mycel_pki mycel_runtime)
