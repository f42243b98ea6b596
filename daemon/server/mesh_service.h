// The mycel.v1.Mesh gRPC service: a thin layer over MeshNode
// (mesh/identity/mesh_node.h). Who may call each method is decided before
// the call by the Authorizer (mesh/identity/access_rules.cc).
#ifndef MYCEL_DAEMON_SERVER_MESH_SERVICE_H_
#define MYCEL_DAEMON_SERVER_MESH_SERVICE_H_

#include <functional>
#include <string>

#include "mesh/identity/authorizer.h"
#include "mesh/identity/mesh_node.h"
#include "mycel/v1/mesh.grpc.pb.h"

namespace mycel {

// Thread-safe. `mesh` and `authz` (the authorizer of the endpoint this
// instance serves) must outlive it. `listen` is where this node serves the
// mesh, told to the authority when it joins. `on_joined` (may be empty) is
// called after the node entered a mesh, from a gRPC thread. `listen_error`
// (may be empty) says why the node does not serve `listen` yet.
class MeshService final : public mycel::v1::Mesh::Service {
 public:
  MeshService(identity::MeshNode* mesh, const identity::Authorizer* authz,
              std::string listen, std::function<void()> on_joined,
              std::function<std::string()> listen_error = nullptr)
      : mesh_(mesh),
        authz_(authz),
        listen_(std::move(listen)),
        on_joined_(std::move(on_joined)),
        listen_error_(std::move(listen_error)) {}

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
  grpc::Status Join(grpc::ServerContext* ctx,
                    const mycel::v1::JoinMeshRequest* req,
                    mycel::v1::MeshInfo* resp) override;
  grpc::Status Revoke(grpc::ServerContext* ctx,
                      const mycel::v1::RevokeRequest* req,
                      mycel::v1::RevokeResponse* resp) override;
  grpc::Status ListRevocations(grpc::ServerContext* ctx,
                               const mycel::v1::ListRevocationsRequest* req,
                               mycel::v1::RevocationListInfo* resp) override;
  grpc::Status ListPeers(grpc::ServerContext* ctx,
                         const mycel::v1::ListPeersRequest* req,
                         mycel::v1::ListPeersResponse* resp) override;
  grpc::Status GetCa(grpc::ServerContext* ctx,
                     const mycel::v1::GetCaRequest* req,
                     mycel::v1::GetCaResponse* resp) override;
  grpc::Status Admit(grpc::ServerContext* ctx,
                     const mycel::v1::AdmitRequest* req,
                     mycel::v1::AdmitResponse* resp) override;
  grpc::Status Renew(grpc::ServerContext* ctx,
                     const mycel::v1::RenewRequest* req,
                     mycel::v1::RenewResponse* resp) override;
  grpc::Status PushRevocations(
      grpc::ServerContext* ctx, const mycel::v1::PushRevocationsRequest* req,
      mycel::v1::PushRevocationsResponse* resp) override;

 private:
  void FillInfo(mycel::v1::MeshInfo* info) const;
  // The calling node (peer RPCs); PERMISSION_DENIED for anyone else.
  absl::StatusOr<identity::Caller> CallingNode(
      const grpc::ServerContext& ctx) const;

  identity::MeshNode* const mesh_;
  const identity::Authorizer* const authz_;
  const std::string listen_;
  const std::function<void()> on_joined_;
  const std::function<std::string()> listen_error_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_MESH_SERVICE_H_
