#include "daemon/server/mesh_service.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "mesh/identity/authorizer.h"
#include "mesh/identity/join_limiter.h"
#include "mesh/identity/peer_calls.h"
#include "runtime/log.h"
#include "runtime/source_address.h"
#include "runtime/status.h"

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
  out->set_authority(t.authority);
}

void ToProto(const pki::RevocationList& list,
             mycel::v1::RevocationListInfo* out) {
  out->set_generation(list.generation());
  for (const auto& [serial, at] : list.serials()) {
    mycel::v1::RevocationEntry* e = out->add_entries();
    e->set_kind("serial");
    e->set_target(serial);
    *e->mutable_revoked() = ToProto(at);
  }
  for (const auto& [key, at] : list.identities()) {
    mycel::v1::RevocationEntry* e = out->add_entries();
    e->set_kind(std::string(pki::IdentityKindName(key.first)));
    e->set_target(key.second);
    *e->mutable_revoked() = ToProto(at);
  }
}

void ToProto(const identity::PeerRow& p, mycel::v1::Peer* out) {
  out->set_name(p.name);
  out->set_address(p.address);
  out->set_authority(p.authority);
  out->set_serial(p.serial);
  *out->mutable_admitted() = ToProto(p.admitted);
}

// How long a revocation push waits for the members it goes to.
constexpr absl::Duration kPushTimeout = absl::Seconds(3);

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
  if (listen_error_) info->set_listen_error(listen_error_());
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
  auto made = mesh_->CreateToken(ttl, req->uses() == 0 ? 1 : req->uses(),
                                 req->authority());
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

absl::StatusOr<identity::Caller> MeshService::CallingNode(
    const grpc::ServerContext& ctx) const {
  ASSIGN_OR_RETURN(identity::Caller caller, authz_->CallerOf(ctx));
  if (caller.kind != identity::CallerKind::kNode) {
    return absl::PermissionDeniedError(
        absl::StrCat(caller.Describe(), " is not a node of the mesh"));
  }
  return caller;
}

grpc::Status MeshService::Join(grpc::ServerContext*,
                               const mycel::v1::JoinMeshRequest* req,
                               mycel::v1::MeshInfo* resp) {
  if (req->address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "address: the HOST:PORT of a node of the mesh is "
                        "required");
  }
  absl::Status s = identity::JoinMesh(mesh_, {.address = req->address(),
                                              .token = req->token(),
                                              .authority = req->authority(),
                                              .advertise = listen_});
  if (!s.ok()) {
    log::Warn("join failed", {{"via", req->address()}, {"error", s}});
    return ToGrpcStatus(s);
  }
  identity::MeshStatus st = mesh_->Status();
  log::Info("joined the mesh", {{"mesh", st.mesh},
                                {"via", req->address()},
                                {"authority", st.authority}});
  if (on_joined_) on_joined_();
  FillInfo(resp);
  return grpc::Status::OK;
}

grpc::Status MeshService::Revoke(grpc::ServerContext*,
                                 const mycel::v1::RevokeRequest* req,
                                 mycel::v1::RevokeResponse* resp) {
  if (req->target().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "target: a node or user name, or a serial, is "
                        "required");
  }
  absl::StatusOr<pki::RevocationList> list =
      mesh_->Revoke(req->target(), req->kind());
  if (!list.ok()) return ToGrpcStatus(list.status());
  log::Info("revoked", {{"target", req->target()},
                        {"kind", req->kind()},
                        {"generation", list->generation()}});
  identity::PushOutcome pushed =
      identity::PushRevocations(mesh_, *list, {}, kPushTimeout);
  ToProto(*list, resp->mutable_list());
  for (const std::string& n : pushed.pushed) resp->add_pushed(n);
  for (const std::string& n : pushed.failed) resp->add_failed(n);
  return grpc::Status::OK;
}

grpc::Status MeshService::ListRevocations(
    grpc::ServerContext*, const mycel::v1::ListRevocationsRequest*,
    mycel::v1::RevocationListInfo* resp) {
  ToProto(mesh_->Revocations(), resp);
  return grpc::Status::OK;
}

grpc::Status MeshService::ListPeers(grpc::ServerContext*,
                                    const mycel::v1::ListPeersRequest*,
                                    mycel::v1::ListPeersResponse* resp) {
  auto peers = mesh_->Peers();
  if (!peers.ok()) return ToGrpcStatus(peers.status());
  for (const identity::PeerRow& p : *peers) ToProto(p, resp->add_peers());
  return grpc::Status::OK;
}

grpc::Status MeshService::GetCa(grpc::ServerContext*,
                                const mycel::v1::GetCaRequest*,
                                mycel::v1::GetCaResponse* resp) {
  identity::MeshStatus st = mesh_->Status();
  if (st.mesh.empty()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this node is not in a mesh");
  }
  resp->set_mesh(st.mesh);
  resp->set_ca_certificate(st.ca_pem);
  return grpc::Status::OK;
}

grpc::Status MeshService::Admit(grpc::ServerContext* ctx,
                                const mycel::v1::AdmitRequest* req,
                                mycel::v1::AdmitResponse* resp) {
  const std::string source = PeerHost(ctx->peer());
  absl::StatusOr<identity::Admission> a =
      mesh_->Admit({.token_id = req->token_id(),
                    .secret = req->secret(),
                    .csr = req->csr(),
                    .address = req->address(),
                    .authority = req->authority(),
                    .source = SourceBlockOfPeer(ctx->peer())});
  if (!a.ok()) {
    log::Warn("join refused", {{"source", source},
                               {"token", req->token_id()},
                               {"error", a.status()}});
    return ToGrpcStatus(a.status());
  }
  log::Info("node admitted", {{"source", source},
                              {"address", req->address()},
                              {"token", req->token_id()},
                              {"authority", req->authority()}});
  resp->set_mesh(a->mesh);
  resp->set_certificate(a->cert_pem);
  resp->set_ca_certificate(a->ca_pem);
  resp->set_ca_key(a->ca_key_pem);
  resp->set_revocations(a->revocations);
  resp->set_admitted_by(a->admitted_by);
  for (const identity::PeerRow& p : a->authorities) {
    ToProto(p, resp->add_authorities());
  }
  return grpc::Status::OK;
}

grpc::Status MeshService::Renew(grpc::ServerContext* ctx,
                                const mycel::v1::RenewRequest* req,
                                mycel::v1::RenewResponse* resp) {
  absl::StatusOr<identity::Caller> caller = CallingNode(*ctx);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<std::string> cert = mesh_->RenewFor(caller->name, req->csr());
  if (!cert.ok()) return ToGrpcStatus(cert.status());
  log::Info("node certificate renewed", {{"node", caller->name}});
  resp->set_certificate(*cert);
  return grpc::Status::OK;
}

grpc::Status MeshService::PushRevocations(
    grpc::ServerContext* ctx, const mycel::v1::PushRevocationsRequest* req,
    mycel::v1::PushRevocationsResponse* resp) {
  absl::StatusOr<identity::Caller> caller = CallingNode(*ctx);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<pki::RevocationList> list =
      pki::RevocationList::Parse(req->list());
  if (!list.ok()) {
    return ToGrpcStatus(Annotate(list.status(), "list"));
  }
  absl::StatusOr<bool> changed = mesh_->MergeRevocations(*list, caller->name);
  if (!changed.ok()) return ToGrpcStatus(changed.status());
  pki::RevocationList now = mesh_->Revocations();
  if (*changed) {
    log::Info("revocations received",
              {{"from", caller->name}, {"generation", now.generation()}});
    // An authority passes it on to the nodes it admitted, so that a
    // revocation made on any authority reaches every member.
    if (mesh_->Status().authority) {
      identity::PushRevocationsInBackground(mesh_, now, {caller->name},
                                            kPushTimeout);
    }
  }
  resp->set_generation(now.generation());
  return grpc::Status::OK;
}

}  // namespace mycel
