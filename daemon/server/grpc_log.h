// gRPC's own log lines (its handshakes, transports, resolvers) through the
// daemon's logger, so that they come out as the daemon's other lines do
// (logfmt, with the daemon's level, to its sink) instead of in gRPC's own
// format on stderr.
#ifndef MYCEL_DAEMON_SERVER_GRPC_LOG_H_
#define MYCEL_DAEMON_SERVER_GRPC_LOG_H_

#include "absl/strings/string_view.h"
#include "runtime/log.h"

namespace mycel {

// Installs the router for the whole process; call it before gRPC is used.
// gRPC still drops what is below its own verbosity (GRPC_VERBOSITY, ERROR
// by default) before the router sees it, and the daemon's level applies
// after: gRPC's traces (GRPC_TRACE with GRPC_VERBOSITY=debug) also need
// --log-level debug.
void RouteGrpcLogs();

// The level a gRPC line gets (exposed for tests): gRPC's own, except for
// lines known to be harmless here, which become kDebug.
log::Level GrpcLineLevel(log::Level grpc_level, absl::string_view message);

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_GRPC_LOG_H_
