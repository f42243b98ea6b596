#include "mesh/membership/grpc_transport.h"

#include <grpcpp/client_context.h>

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mycel/v1/gossip.grpc.pb.h"

namespace mycel::membership {
namespace {

// Everything one call needs until gRPC completes it.
struct Call {
  std::unique_ptr<mycel::v1::Gossip::Stub> stub;
  grpc::ClientContext context;
  mycel::v1::GossipFrame request;
  mycel::v1::GossipFrameAck response;
  Transport::SendDone done;
  std::shared_ptr<std::atomic<int64_t>> in_flight;
};

}  // namespace

void GrpcTransport::Send(absl::string_view peer, absl::string_view address,
                         std::string bytes, absl::Duration deadline,
                         SendDone done) {
  std::shared_ptr<grpc::Channel> channel =
      options_.channels ? options_.channels(peer, address) : nullptr;
  if (channel == nullptr) {
    done(absl::UnavailableError(absl::StrCat(
        "gossip to ", peer.empty() ? "seed" : peer, " at ", address,
        ": no channel (the node's credentials cannot be read)")));
    return;
  }
  // The protocol paces what it sends to an unreachable member (probes,
  // gossip to the dead, reconnect attempts with their own backoff), and a
  // member that restarts must be reachable at its first message, which is
  // often the only one for a while (the answer to its join). gRPC's
  // reconnect backoff (up to two minutes) would fail every send to it at
  // once meanwhile: a channel that failed connects again now, and the call
  // waits for the connection, within its deadline, instead of failing
  // while the channel is still marked as failed.
  if (channel->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    grpc::experimental::ChannelResetConnectionBackoff(channel.get());
  }
  auto call = std::make_shared<Call>();
  call->context.set_wait_for_ready(true);
  call->stub = mycel::v1::Gossip::NewStub(std::move(channel));
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  call->request.set_message(std::move(bytes));
  call->done = std::move(done);
  call->in_flight = in_flight_;
  in_flight_->fetch_add(1);
  // The callback holds the call, so its state outlives this frame and the
  // transport; gRPC runs it exactly once.
  Call* raw = call.get();
  raw->stub->async()->Exchange(
      &raw->context, &raw->request, &raw->response,
      [call = std::move(call)](grpc::Status s) mutable {
        call->in_flight->fetch_sub(1);
        SendDone finish = std::move(call->done);
        absl::Status status =
            s.ok() ? absl::OkStatus()
                   : absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                                  s.error_message());
        // The call (its context and stub) may be freed on this thread only
        // after gRPC has finished with it, which it has when this runs.
        call.reset();
        finish(std::move(status));
      });
}

}  // namespace mycel::membership
