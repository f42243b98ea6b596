#include "mesh/identity/mesh_node.h"

#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel::identity {
namespace {

constexpr int64_t kMaxTokenUses = 1000;
constexpr absl::Duration kMaxTokenTtl = absl::Hours(24 * 7);

absl::StatusOr<std::string> ReadMeshFile(const std::string& path) {
  absl::StatusOr<std::string> data = ReadFile(path);
  if (!data.ok()) {
    return absl::DataLossError(
        absl::StrCat("mesh: this node is in a mesh but ", path,
                     " cannot be read: ", data.status().message()));
  }
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MeshNode>> MeshNode::Open(Options options) {
  std::unique_ptr<MeshNode> node(new MeshNode(std::move(options)));
  ASSIGN_OR_RETURN(std::optional<MeshRow> row, node->store_.GetMesh());
  ASSIGN_OR_RETURN(pki::RevocationList revocations,
                   node->store_.GetRevocations());
  node->options_.trust->SetRevocations(std::move(revocations));
  if (row.has_value()) {
    absl::MutexLock lock(&node->mu_);
    RETURN_IF_ERROR(node->LoadLocked(*row));
  }
  return node;
}

absl::Status MeshNode::LoadLocked(const MeshRow& row) {
  const std::string d = dir();
  ASSIGN_OR_RETURN(std::string ca_pem, ReadMeshFile(d + "/ca.crt"));
  ASSIGN_OR_RETURN(std::string cert_pem, ReadMeshFile(d + "/node.crt"));
  ASSIGN_OR_RETURN(std::string key_pem, ReadMeshFile(d + "/node.key"));
  absl::StatusOr<pki::Certificate> ca_cert = pki::Certificate::FromPem(ca_pem);
  if (!ca_cert.ok()) {
    return absl::DataLossError(
        absl::StrCat("mesh: ", d, "/ca.crt: ", ca_cert.status().message()));
  }
  absl::StatusOr<pki::Certificate> cert = pki::Certificate::FromPem(cert_pem);
  if (!cert.ok()) {
    return absl::DataLossError(
        absl::StrCat("mesh: ", d, "/node.crt: ", cert.status().message()));
  }
  if (row.authority) {
    ASSIGN_OR_RETURN(std::string ca_key, ReadMeshFile(d + "/ca.key"));
    absl::StatusOr<pki::CertificateAuthority> ca =
        pki::CertificateAuthority::Load(ca_pem, ca_key);
    if (!ca.ok()) {
      return absl::DataLossError(
          absl::StrCat("mesh: ", d, "/ca.key: ", ca.status().message()));
    }
    ca_.emplace(*std::move(ca));
  }
  RETURN_IF_ERROR(options_.trust->SetCa(ca_pem));
  row_ = row;
  ca_cert_.emplace(*std::move(ca_cert));
  node_expires_ = cert->not_after();
  node_ = NodeCredentials{std::move(ca_pem), std::move(cert_pem),
                          std::move(key_pem)};
  return absl::OkStatus();
}

absl::StatusOr<UserCredentials> MeshNode::Init(const std::string& mesh,
                                               const std::string& admin) {
  RETURN_IF_ERROR(Annotate(pki::ValidateMeshName(mesh), "mesh name"));
  RETURN_IF_ERROR(Annotate(pki::ValidateIdentityName(admin), "admin name"));
  RETURN_IF_ERROR(
      Annotate(pki::ValidateIdentityName(options_.node_name), "node name"));
  absl::MutexLock lock(&mu_);
  if (row_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this node is already in the mesh ", row_->name));
  }
  const absl::Time now = options_.clock->Now();
  ASSIGN_OR_RETURN(pki::CertificateAuthority ca,
                   pki::CertificateAuthority::Create(mesh, now));
  ASSIGN_OR_RETURN(pki::PrivateKey node_key, pki::PrivateKey::Generate());
  ASSIGN_OR_RETURN(pki::SpiffeId node_id,
                   pki::SpiffeId::Create(pki::IdentityKind::kNode, mesh,
                                         options_.node_name));
  ASSIGN_OR_RETURN(pki::PublicKey node_pub, node_key.GetPublicKey());
  ASSIGN_OR_RETURN(
      pki::Certificate node_cert,
      ca.IssueForKey(node_pub,
                     {node_id, pki::Role::kNode, options_.node_validity}, now));
  // The files first, each written whole; the row last, so that a crash
  // between them leaves a node that is not in a mesh (and whose files the
  // next init overwrites).
  const std::string d = dir();
  RETURN_IF_ERROR(Annotate(MakeDirs(d, 0700), "mesh"));
  RETURN_IF_ERROR(ca.private_key().WriteToFile(d + "/ca.key"));
  ASSIGN_OR_RETURN(std::string ca_pem, ca.certificate().ToPem());
  RETURN_IF_ERROR(WriteFileAtomic(d + "/ca.crt", ca_pem, 0644));
  RETURN_IF_ERROR(node_key.WriteToFile(d + "/node.key"));
  ASSIGN_OR_RETURN(std::string node_pem, node_cert.ToPem());
  RETURN_IF_ERROR(WriteFileAtomic(d + "/node.crt", node_pem, 0644));
  MeshRow row{mesh, options_.node_name, /*authority=*/true, now};
  RETURN_IF_ERROR(store_.InsertMesh(row));
  RETURN_IF_ERROR(LoadLocked(row));
  return IssueUserLocked(admin, pki::Role::kAdmin);
}

absl::Status MeshNode::RequireMeshLocked() const {
  if (!row_.has_value()) {
    return absl::FailedPreconditionError(
        "this node is not in a mesh (mycel mesh init, or mycel mesh join)");
  }
  return absl::OkStatus();
}

absl::StatusOr<UserCredentials> MeshNode::IssueUserLocked(
    const std::string& name, pki::Role role) {
  RETURN_IF_ERROR(RequireMeshLocked());
  if (!ca_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", row_->node, " is not an authority of the mesh ",
                     row_->name, ": it cannot sign"));
  }
  RETURN_IF_ERROR(Annotate(pki::ValidateIdentityName(name), "user name"));
  RETURN_IF_ERROR(pki::CheckRoleFitsKind(pki::IdentityKind::kUser, role));
  ASSIGN_OR_RETURN(pki::PrivateKey key, pki::PrivateKey::Generate());
  ASSIGN_OR_RETURN(pki::PublicKey pub, key.GetPublicKey());
  ASSIGN_OR_RETURN(
      pki::SpiffeId id,
      pki::SpiffeId::Create(pki::IdentityKind::kUser, ca_->mesh(), name));
  ASSIGN_OR_RETURN(pki::Certificate cert,
                   ca_->IssueForKey(pub, {id, role}, options_.clock->Now()));
  UserCredentials out;
  out.mesh = ca_->mesh();
  out.user = name;
  out.role = role;
  out.ca_pem = node_->ca_pem;
  ASSIGN_OR_RETURN(out.cert_pem, cert.ToPem());
  ASSIGN_OR_RETURN(out.key_pem, key.ToPem());
  return out;
}

absl::StatusOr<UserCredentials> MeshNode::AddUser(const std::string& name,
                                                  pki::Role role) {
  absl::MutexLock lock(&mu_);
  return IssueUserLocked(name, role);
}

MeshStatus MeshNode::Status() const {
  absl::MutexLock lock(&mu_);
  MeshStatus s;
  if (!row_.has_value()) return s;
  s.mesh = row_->name;
  s.node = row_->node;
  absl::StatusOr<pki::SpiffeId> id =
      pki::SpiffeId::Create(pki::IdentityKind::kNode, row_->name, row_->node);
  if (id.ok()) s.spiffe_id = id->ToString();
  s.ca_fingerprint = ca_cert_->fingerprint();
  s.ca_pem = node_->ca_pem;
  s.authority = ca_.has_value();
  s.certificate_expires = node_expires_;
  return s;
}

std::optional<NodeCredentials> MeshNode::Credentials() const {
  absl::MutexLock lock(&mu_);
  return node_;
}

absl::StatusOr<std::pair<std::string, pki::StoredJoinToken>>
MeshNode::CreateToken(absl::Duration ttl, int64_t uses) {
  if (ttl <= absl::ZeroDuration() || ttl > kMaxTokenTtl) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl: ", absl::FormatDuration(ttl), " is not in (0, ",
                     absl::FormatDuration(kMaxTokenTtl), "]"));
  }
  if (uses < 1 || uses > kMaxTokenUses) {
    return absl::InvalidArgumentError(
        absl::StrCat("uses: ", uses, " is not in 1..", kMaxTokenUses));
  }
  std::string fingerprint;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(RequireMeshLocked());
    if (!ca_.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", row_->node, " is not an authority of the mesh ", row_->name,
          ": joins must go to an authority, which makes the token"));
    }
    fingerprint = ca_->fingerprint();
  }
  ASSIGN_OR_RETURN(pki::JoinToken token, pki::JoinToken::Generate(fingerprint));
  const absl::Time now = options_.clock->Now();
  pki::StoredJoinToken stored = token.ToStored(now, now + ttl, uses);
  RETURN_IF_ERROR(store_.InsertToken(stored));
  return std::make_pair(token.ToString(), stored);
}

absl::StatusOr<std::vector<pki::StoredJoinToken>> MeshNode::ListTokens() {
  return store_.ListTokens();
}

absl::Status MeshNode::RevokeToken(const std::string& id) {
  RETURN_IF_ERROR(pki::ValidateJoinTokenId(id));
  return store_.RevokeToken(id);
}

}  // namespace mycel::identity
