#include "mesh/replication/grpc_transport.h"

#include <grpcpp/client_context.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mycel/v1/replication.grpc.pb.h"

namespace mycel::replication {
namespace {

// Everything one call needs until gRPC completes it.
struct Call {
  std::unique_ptr<mycel::v1::Replication::Stub> stub;
  grpc::ClientContext context;
  mycel::v1::ReplicationFrame request;
  mycel::v1::ReplicationFrameAck response;
  Transport::SendDone done;
};

}  // namespace

void GrpcTransport::Send(absl::string_view peer, absl::string_view address,
                         std::string bytes, SendDone done) {
  std::shared_ptr<grpc::Channel> channel =
      channels_ ? channels_(peer, address) : nullptr;
  if (channel == nullptr) {
    done(absl::UnavailableError(absl::StrCat("replication to ", peer, " at ",
                                             address,
                                             ": no channel (not in a mesh)")));
    return;
  }
  auto call = std::make_shared<Call>();
  call->stub = mycel::v1::Replication::NewStub(std::move(channel));
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
  call->request.set_message(std::move(bytes));
  call->done = std::move(done);
  Call* raw = call.get();
  raw->stub->async()->Exchange(
      &raw->context, &raw->request, &raw->response,
      [call = std::move(call)](grpc::Status s) mutable {
        SendDone finish = std::move(call->done);
        absl::Status status =
            s.ok() ? absl::OkStatus()
                   : absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                                  s.error_message());
        call.reset();
        finish(std::move(status));
      });
}

}  // namespace mycel::replication
