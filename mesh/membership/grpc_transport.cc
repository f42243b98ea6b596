#include "mesh/membership/grpc_transport.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/auth_context.h>

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "mycel/v1/gossip.grpc.pb.h"

namespace mycel::membership {
namespace {

// Everything one call needs until gRPC completes it.
struct Call {
  std::string peer;
  std::unique_ptr<mycel::v1::Gossip::Stub> stub;
  grpc::ClientContext context;
  mycel::v1::GossipFrame request;
  mycel::v1::GossipFrameAck response;
  Transport::SendDone done;
  std::shared_ptr<std::atomic<int64_t>> in_flight;
};

// The node name in the server's SPIFFE ID (spiffe://MESH/node/NAME), which
// the channel's verifier already checked is a node of this mesh; "" if none.
std::string ServerNodeName(const grpc::ClientContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return "";
  for (const grpc::string_ref& ref :
       auth->FindPropertyValues(GRPC_PEER_SPIFFE_ID_PROPERTY_NAME)) {
    absl::string_view id(ref.data(), ref.size());
    if (!absl::ConsumePrefix(&id, "spiffe://")) continue;
    const size_t slash = id.find("/node/");
    if (slash == absl::string_view::npos) continue;
    absl::string_view name = id.substr(slash + 6);
    if (!name.empty() && name.find('/') == absl::string_view::npos) {
      return std::string(name);
    }
  }
  return "";
}

}  // namespace

void GrpcTransport::Send(absl::string_view peer, absl::string_view address,
                         std::string bytes, absl::Duration deadline,
                         SendDone done) {
  std::shared_ptr<grpc::Channel> channel =
      options_.channels ? options_.channels(peer, address) : nullptr;
  if (channel == nullptr) {
    done(absl::UnavailableError(absl::StrCat(
             "gossip to ", peer.empty() ? "seed" : peer, " at ", address,
             ": no channel (the node's credentials cannot be read)")),
         {});
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
  call->peer = std::string(peer);
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
        Reply reply;
        if (s.ok() && !call->response.reply().empty()) {
          // A seed known only by its address answers as whichever node
          // its certificate names.
          reply.from =
              call->peer.empty() ? ServerNodeName(call->context) : call->peer;
          if (!reply.from.empty()) {
            reply.bytes = std::move(*call->response.mutable_reply());
          }
        }
        // The call (its context and stub) may be freed on this thread only
        // after gRPC has finished with it, which it has when this runs.
        call.reset();
        finish(std::move(status), std::move(reply));
      });
}

}  // namespace mycel::membership
