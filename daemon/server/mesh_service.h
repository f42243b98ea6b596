// The mycel.v1.Mesh gRPC service: a thin layer over MeshNode
// (mesh/identity/mesh_node.h). Who may call each method is decided before
// the call by the Authorizer (mesh/identity/access_rules.cc).
#ifndef MYCEL_DAEMON_SERVER_MESH_SERVICE_H_
#define MYCEL_DAEMON_SERVER_MESH_SERVICE_H_

#include <functional>
#include <string>

#include "mesh/identity/mesh_node.h"
#include "mycel/v1/mesh.grpc.pb.h"

namespace mycel {

// Thread-safe. `mesh` must outlive it. `on_joined` (may be empty) is
// called after the node entered a mesh, from a gRPC thread; it must not
// block.
class MeshService final : public mycel::v1::Mesh::Service {
 public:
  MeshService(identity::MeshNode* mesh, std::string listen,
              std::function<void()> on_joined)
      : mesh_(mesh),
        listen_(std::move(listen)),
        on_joined_(std::move(on_joined)) {}

  grpc::Status Init(grpc::ServerContext* ctx,
                    const mycel::v1::InitMeshRequest* req,
                    mycel::v1::InitMeshResponse* resp) override;
  grpc::Status GetInfo(grpc::ServerContext* ctx,
                       const mycel::v1::GetMeshInfoRequest* req,
                       mycel::v1::MeshInfo* resp) override;
  grpc::Status CreateToken(grpc::ServerContext* ctx,
                           const mycel::v1::CreateTokenRequest* req,
                           mycel::v1::CreateTokenResponse* resp) override;
  grpc::Status ListTokens(grpc::ServerContext* ctx,
                          const mycel::v1::ListTokensRequest* req,
                          mycel::v1::ListTokensResponse* resp) override;
  grpc::Status RevokeToken(grpc::ServerContext* ctx,
                           const mycel::v1::RevokeTokenRequest* req,
                           mycel::v1::RevokeTokenResponse* resp) override;
  grpc::Status AddUser(grpc::ServerContext* ctx,
                       const mycel::v1::AddUserRequest* req,
                       mycel::v1::UserCredentials* resp) override;

 private:
  void FillInfo(mycel::v1::MeshInfo* info) const;

  identity::MeshNode* const mesh_;
  const std::string listen_;
  const std::function<void()> on_joined_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_MESH_SERVICE_H_
