// GrpcTransport: the membership Transport (driver_transport.h) over the
// Gossip service (proto/mycel/v1/gossip.proto): one unary Exchange per
// message on a mutual-TLS channel whose server must prove the member name
// the driver meant to reach (identity::PeerChannels makes such channels).
#ifndef MYCEL_MESH_MEMBERSHIP_GRPC_TRANSPORT_H_
#define MYCEL_MESH_MEMBERSHIP_GRPC_TRANSPORT_H_

#include <grpcpp/channel.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/membership/driver_transport.h"

namespace mycel::membership {

// Thread-safe. Sends never block: each is an asynchronous call of gRPC's
// callback API, completed on gRPC's threads. Calls still in flight when the
// transport is destroyed complete normally (they own their state); the
// driver's `done` callbacks tolerate a driver that is gone.
class GrpcTransport final : public Transport {
 public:
  // A channel to node `name` (empty: any node of the mesh) at `address`, or
  // null when none can be made (e.g. the credentials cannot be read).
  using ChannelSource = std::function<std::shared_ptr<grpc::Channel>(
      absl::string_view name, absl::string_view address)>;

  struct Options {
    ChannelSource channels;
  };

  explicit GrpcTransport(Options options) : options_(std::move(options)) {}
  GrpcTransport(const GrpcTransport&) = delete;
  GrpcTransport& operator=(const GrpcTransport&) = delete;

  void Send(absl::string_view peer, absl::string_view address,
            std::string bytes, absl::Duration deadline, SendDone done) override;

  // Calls started and not completed yet.
  int64_t in_flight() const { return in_flight_->load(); }

 private:
  Options options_;
  // Shared with the calls, which may complete after the transport is gone.
  std::shared_ptr<std::atomic<int64_t>> in_flight_ =
      std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_GRPC_TRANSPORT_H_
