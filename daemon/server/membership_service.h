// The mycel.v1.Membership gRPC service: the members this node sees and a
// graceful leave, over NodeMembership (mesh/membership/node_membership.h).
// Who may call each method is decided before the call by the Authorizer
// (ListMembers: read, Leave: write).
#ifndef MYCEL_DAEMON_SERVER_MEMBERSHIP_SERVICE_H_
#define MYCEL_DAEMON_SERVER_MEMBERSHIP_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mesh/membership/node_membership.h"
#include "mesh/replication/node_replication.h"
#include "mycel/v1/membership.grpc.pb.h"

namespace mycel {

// Thread-safe. `membership` and `replication` (may be null) must outlive
// it. Leave waits for the leave to
// be gossiped without parking a server thread (callback API).
class MembershipService final : public mycel::v1::Membership::CallbackService {
 public:
  MembershipService(membership::NodeMembership* membership,
                    const replication::NodeReplication* replication)
      : membership_(membership), replication_(replication) {}

  // FAILED_PRECONDITION when this node runs no membership.
  grpc::ServerUnaryReactor* ListMembers(
      grpc::CallbackServerContext* ctx,
      const mycel::v1::ListMembersRequest* req,
      mycel::v1::ListMembersResponse* resp) override;
  // OK once the leave was gossiped; DEADLINE_EXCEEDED when it could not be
  // within the timeout (the node has left all the same);
  // FAILED_PRECONDITION when not running or already left.
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx,
                                  const mycel::v1::LeaveRequest* req,
                                  mycel::v1::LeaveResponse* resp) override;

 private:
  membership::NodeMembership* const membership_;
  const replication::NodeReplication* const replication_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_MEMBERSHIP_SERVICE_H_
