// absl::Status ↔ grpc::Status at the service edge; the code passes through.
#ifndef MYCEL_DAEMON_SERVER_STATUS_CONVERT_H_
#define MYCEL_DAEMON_SERVER_STATUS_CONVERT_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace mycel {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_STATUS_CONVERT_H_
