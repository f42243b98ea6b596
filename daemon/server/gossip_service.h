// The mycel.v1.Gossip gRPC service: the receiving end of the membership
// protocol (docs/membership.md). Served on the TCP endpoint only, to nodes
// of the mesh (rule peer in mesh/identity/access_rules.cc). The sender is
// the name in its verified client certificate, never what the message
// says: the state machine refuses a message whose `from` differs.
#ifndef MYCEL_DAEMON_SERVER_GOSSIP_SERVICE_H_
#define MYCEL_DAEMON_SERVER_GOSSIP_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mesh/identity/authorizer.h"
#include "mesh/membership/node_membership.h"
#include "mycel/v1/gossip.grpc.pb.h"

namespace mycel {

// Thread-safe. `authz` (the TCP endpoint's) and `membership` must outlive
// it. Exchange never blocks: the frame is queued for the driver's strand.
class GossipService final : public mycel::v1::Gossip::CallbackService {
 public:
  GossipService(const identity::Authorizer* authz,
                membership::NodeMembership* membership)
      : authz_(authz), membership_(membership) {}

  // UNAUTHENTICATED / PERMISSION_DENIED when the caller is not a node of
  // the mesh (the authorizer refuses those before this runs; checked again
  // because the name is taken from here); FAILED_PRECONDITION when this
  // node runs no membership.
  grpc::ServerUnaryReactor* Exchange(grpc::CallbackServerContext* ctx,
                                     const mycel::v1::GossipFrame* req,
                                     mycel::v1::GossipFrameAck* resp) override;
  // A link kept open with a peer (membership::GrpcTransport), refused as
  // Exchange is.
  grpc::ServerBidiReactor<mycel::v1::GossipFrame, mycel::v1::GossipFrame>* Link(
      grpc::CallbackServerContext* ctx) override;

 private:
  const identity::Authorizer* const authz_;
  membership::NodeMembership* const membership_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_GOSSIP_SERVICE_H_
