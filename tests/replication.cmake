# Tests for replication: the store half (daemon/store/objects.h) and the
# state machine (mesh/replication) in a simulated mesh of real SQLite stores.
mycel_test(replication_store_test SRCS unit/mesh/replication_store_test.cc
  DEPS mycel_store mycel_testing)
