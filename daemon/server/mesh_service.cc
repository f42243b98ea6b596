#include "daemon/server/mesh_service.h"

#include "google/protobuf/util/time_util.h"
#include "mesh/identity/authorizer.h"

namespace mycel {
namespace {

using google::protobuf::util::TimeUtil;
using identity::ToGrpcStatus;

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(t));
}

void ToProto(const identity::UserCredentials& c,
             mycel::v1::UserCredentials* out) {
  out->set_mesh(c.mesh);
  out->set_user(c.user);
  out->set_role(std::string(pki::RoleName(c.role)));
  out->set_ca_certificate(c.ca_pem);
  out->set_certificate(c.cert_pem);
  out->set_private_key(c.key_pem);
}

void ToProto(const pki::StoredJoinToken& t, mycel::v1::JoinTokenInfo* out) {
  out->set_id(t.id);
  *out->mutable_created() = ToProto(t.created);
  *out->mutable_expires() = ToProto(t.expires);
  out->set_uses_left(t.uses_left);
  out->set_revoked(t.revoked);
}

}  // namespace

void MeshService::FillInfo(mycel::v1::MeshInfo* info) const {
  identity::MeshStatus s = mesh_->Status();
  info->set_mesh(s.mesh);
  info->set_node(s.node);
  if (s.mesh.empty()) return;
  info->set_spiffe_id(s.spiffe_id);
  info->set_ca_fingerprint(s.ca_fingerprint);
  info->set_authority(s.authority);
  *info->mutable_certificate_expires() = ToProto(s.certificate_expires);
  info->set_ca_certificate(s.ca_pem);
  info->set_listen(listen_);
}

grpc::Status MeshService::Init(grpc::ServerContext*,
                               const mycel::v1::InitMeshRequest* req,
                               mycel::v1::InitMeshResponse* resp) {
  absl::StatusOr<identity::UserCredentials> admin =
      mesh_->Init(req->mesh().empty() ? "mycel" : req->mesh(),
                  req->admin().empty() ? "admin" : req->admin());
  if (!admin.ok()) return ToGrpcStatus(admin.status());
  ToProto(*admin, resp->mutable_admin());
  FillInfo(resp->mutable_mesh());
  if (on_joined_) on_joined_();
  return grpc::Status::OK;
}

grpc::Status MeshService::GetInfo(grpc::ServerContext*,
                                  const mycel::v1::GetMeshInfoRequest*,
                                  mycel::v1::MeshInfo* resp) {
  FillInfo(resp);
  return grpc::Status::OK;
}

grpc::Status MeshService::CreateToken(grpc::ServerContext*,
                                      const mycel::v1::CreateTokenRequest* req,
                                      mycel::v1::CreateTokenResponse* resp) {
  if (req->ttl_seconds() < 0 || req->uses() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "ttl_seconds and uses must not be negative");
  }
  absl::Duration ttl = req->ttl_seconds() == 0
                           ? absl::Hours(1)
                           : absl::Seconds(req->ttl_seconds());
  auto made = mesh_->CreateToken(ttl, req->uses() == 0 ? 1 : req->uses());
  if (!made.ok()) return ToGrpcStatus(made.status());
  resp->set_token(made->first);
  ToProto(made->second, resp->mutable_info());
  return grpc::Status::OK;
}

grpc::Status MeshService::ListTokens(grpc::ServerContext*,
                                     const mycel::v1::ListTokensRequest*,
                                     mycel::v1::ListTokensResponse* resp) {
  auto tokens = mesh_->ListTokens();
  if (!tokens.ok()) return ToGrpcStatus(tokens.status());
  for (const pki::StoredJoinToken& t : *tokens) ToProto(t, resp->add_tokens());
  return grpc::Status::OK;
}

grpc::Status MeshService::RevokeToken(grpc::ServerContext*,
                                      const mycel::v1::RevokeTokenRequest* req,
                                      mycel::v1::RevokeTokenResponse*) {
  return ToGrpcStatus(mesh_->RevokeToken(req->id()));
}

grpc::Status MeshService::AddUser(grpc::ServerContext*,
                                  const mycel::v1::AddUserRequest* req,
                                  mycel::v1::UserCredentials* resp) {
  absl::StatusOr<pki::Role> role = pki::ParseRole(req->role());
  if (!role.ok() || *role == pki::Role::kNode) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "role: want admin or viewer, got \"" + req->role() + "\"");
  }
  auto creds = mesh_->AddUser(req->name(), *role);
  if (!creds.ok()) return ToGrpcStatus(creds.status());
  ToProto(*creds, resp);
  return grpc::Status::OK;
}

}  // namespace mycel
