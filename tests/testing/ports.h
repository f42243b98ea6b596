// Loopback TCP ports for the daemons a test starts.
#ifndef MYCEL_TESTS_TESTING_PORTS_H_
#define MYCEL_TESTS_TESTING_PORTS_H_

namespace mycel::testing {

// A TCP port on 127.0.0.1 that is free now and stays this process's to
// hand out: it lies below the kernel's ephemeral range (so no outgoing
// connection is given it as its local port while the daemon it is meant
// for has not bound it yet: a node binds --listen only once it joined), and
// a lock held until the process exits keeps other test processes from
// picking it too. Aborts when no such port is found.
int FreePort();

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_TESTING_PORTS_H_
