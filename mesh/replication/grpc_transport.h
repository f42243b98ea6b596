// GrpcTransport: the replication Transport (driver.h) over the Replication
// service (proto/mycel/v1/replication.proto): one unary Exchange per
// message, with gRPC's callback API (never blocking the caller), on a
// mutual-TLS channel whose server must prove the node name meant
// (identity::PeerChannels makes such channels).
#ifndef MYCEL_MESH_REPLICATION_GRPC_TRANSPORT_H_
#define MYCEL_MESH_REPLICATION_GRPC_TRANSPORT_H_

#include <grpcpp/channel.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/replication/driver.h"

namespace mycel::replication {

// Thread-safe.
class GrpcTransport final : public Transport {
 public:
  using ChannelSource = std::function<std::shared_ptr<grpc::Channel>(
      absl::string_view name, absl::string_view address)>;

  GrpcTransport(ChannelSource channels, absl::Duration deadline)
      : channels_(std::move(channels)), deadline_(deadline) {}

  void Send(absl::string_view peer, absl::string_view address,
            std::string bytes, SendDone done) override;

 private:
  const ChannelSource channels_;
  const absl::Duration deadline_;
};

}  // namespace mycel::replication

#endif  // MYCEL_MESH_REPLICATION_GRPC_TRANSPORT_H_
