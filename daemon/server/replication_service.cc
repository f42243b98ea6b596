#include "daemon/server/replication_service.h"

#include "absl/strings/str_cat.h"

namespace mycel {

grpc::ServerUnaryReactor* ReplicationService::Exchange(
    grpc::CallbackServerContext* ctx, const mycel::v1::ReplicationFrame* req,
    mycel::v1::ReplicationFrameAck*) {
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
                     " may not replicate: only nodes of the mesh may")));
    return reactor;
  }
  reactor->Finish(identity::ToGrpcStatus(
      replication_->Deliver(caller->name, req->message())));
  return reactor;
}

}  // namespace mycel
