#include "daemon/server/grpc_log.h"

#include <grpc/support/log.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mycel {
namespace {

void Route(gpr_log_func_args* args) {
  log::Level level = log::Level::kError;
  switch (args->severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      level = log::Level::kDebug;
      break;
    case GPR_LOG_SEVERITY_INFO:
      level = log::Level::kInfo;
      break;
    case GPR_LOG_SEVERITY_ERROR:
      level = log::Level::kError;
      break;
  }
  const absl::string_view message =
      args->message != nullptr ? args->message : "";
  absl::string_view file = args->file != nullptr ? args->file : "";
  if (const size_t slash = file.rfind('/'); slash != absl::string_view::npos) {
    file.remove_prefix(slash + 1);
  }
  log::Write(GrpcLineLevel(level, message), absl::StrCat("grpc: ", message),
             {{"source", absl::StrCat(file, ":", args->line)}});
}

}  // namespace

log::Level GrpcLineLevel(log::Level grpc_level, absl::string_view message) {
  // Peers' certificates name them by SPIFFE ID (a URI SAN) only, which each
  // peer channel's verifier checks (mesh/identity/peer_channels.cc). gRPC
  // also matches the address dialled against DNS and IP names, finds none,
  // and says so at ERROR on every new connection to a peer, although the
  // connection goes on.
  if (absl::StartsWith(message, "No match found for server name")) {
    return log::Level::kDebug;
  }
  return grpc_level;
}

void RouteGrpcLogs() { gpr_set_log_function(Route); }

}  // namespace mycel
