// The mycel.v1.Replication gRPC service: the receiving end of the
// replicated store's gossip (docs/replication.md). Served on the TCP
// endpoint only, to nodes of the mesh (rule peer); the sender is the name
// in its verified client certificate.
#ifndef MYCEL_DAEMON_SERVER_REPLICATION_SERVICE_H_
#define MYCEL_DAEMON_SERVER_REPLICATION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mesh/identity/authorizer.h"
#include "mesh/replication/node_replication.h"
#include "mycel/v1/replication.grpc.pb.h"

namespace mycel {

// Thread-safe; never blocks (frames are queued for the driver's strand).
class ReplicationService final
    : public mycel::v1::Replication::CallbackService {
 public:
  ReplicationService(const identity::Authorizer* authz,
                     replication::NodeReplication* replication)
      : authz_(authz), replication_(replication) {}

  // PERMISSION_DENIED for a caller that is not a node; FAILED_PRECONDITION
  // when this node does not replicate yet.
  grpc::ServerUnaryReactor* Exchange(
      grpc::CallbackServerContext* ctx, const mycel::v1::ReplicationFrame* req,
      mycel::v1::ReplicationFrameAck* resp) override;

 private:
  const identity::Authorizer* const authz_;
  replication::NodeReplication* const replication_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_REPLICATION_SERVICE_H_
