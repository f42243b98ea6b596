#include "daemon/server/gossip_service.h"

#include "absl/strings/str_cat.h"

namespace mycel {
grpc::ServerBidiReactor<mycel::v1::GossipFrame, mycel::v1::GossipFrame>*
GossipService::Link(grpc::CallbackServerContext* ctx) {
  // Read before the check: a change of the trust after it makes the link
  // check the caller again at its first frame.
  const uint64_t generation = authz_->trust_generation();
  absl::StatusOr<identity::Caller> caller = authz_->CallerOf(*ctx);
  if (!caller.ok()) {
    return membership::GrpcTransport::Refuse(
        identity::ToGrpcStatus(caller.status()));
  }
  if (caller->kind != identity::CallerKind::kNode) {
    return membership::GrpcTransport::Refuse(grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(caller->Describe(),
                     " may not gossip: only nodes of the mesh may")));
  }
  absl::Status refused;
  auto* link = membership_->AcceptLink(ctx, caller->name, generation, &refused);
  if (link == nullptr)
    return membership::GrpcTransport::Refuse(identity::ToGrpcStatus(refused));
  return link;
}

grpc::ServerUnaryReactor* GossipService::Exchange(
    grpc::CallbackServerContext* ctx, const mycel::v1::GossipFrame* req,
    mycel::v1::GossipFrameAck* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<identity::Caller> caller = authz_->CallerOf(*ctx);
  if (!caller.ok()) {
    reactor->Finish(identity::ToGrpcStatus(caller.status()));
    return reactor;
  }
  if (caller->kind != identity::CallerKind::kNode) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(caller->Describe(),
                     " may not gossip: only nodes of the mesh may")));
    return reactor;
  }
  // The call ends once the message is handled, with its direct answer (an
  // ack, a push-pull answer) in the response; the reactor and the response
  // live until Finish.
  absl::Status s = membership_->DeliverWithReply(
      caller->name, req->message(), [reactor, resp](std::string reply) {
        resp->set_reply(std::move(reply));
        reactor->Finish(grpc::Status::OK);
      });
  if (!s.ok()) reactor->Finish(identity::ToGrpcStatus(s));
  return reactor;
}

}  // namespace mycel
