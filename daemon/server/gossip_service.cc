#include "daemon/server/gossip_service.h"

#include "absl/strings/str_cat.h"

namespace mycel {

grpc::ServerUnaryReactor* GossipService::Exchange(
    grpc::CallbackServerContext* ctx, const mycel::v1::GossipFrame* req,
    mycel::v1::GossipFrameAck*) {
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
  reactor->Finish(identity::ToGrpcStatus(
      membership_->Deliver(caller->name, req->message())));
  return reactor;
}

}  // namespace mycel
