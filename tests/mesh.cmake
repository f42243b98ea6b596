# Tests for mesh/membership (SWIM + Lifeguard) and mesh/sim.
# unit: the state machine and its parts, driven by hand.
mycel_test(membership_parts_test SRCS unit/mesh/membership_parts_test.cc
  DEPS mycel_membership)
mycel_test(membership_test SRCS unit/mesh/membership_test.cc
  DEPS mycel_membership)
# unit: simulated clusters of 50-300 nodes (a few seconds of wall time).
mycel_test(membership_sim_test SRCS unit/mesh/membership_sim_test.cc
  DEPS mycel_membership_sim TIMEOUT 300)
# unit: the members table on a real state database.
mycel_test(member_store_test SRCS unit/mesh/member_store_test.cc
  DEPS mycel_membership_driver mycel_testing)
# unit: the driver on a ManualClock with the in-process transport and a
# state database per node.
mycel_test(membership_driver_test SRCS unit/mesh/membership_driver_test.cc
  DEPS mycel_membership_driver mycel_testing)
# integration: the driver on real timers (AsioClock, a real io_context).
mycel_test(membership_driver_integration_test
  SRCS integration/mesh/membership_driver_test.cc
  DEPS mycel_membership_driver mycel_testing
  LABELS integration TIMEOUT 120)
