#include "mesh/identity/mesh_node.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/store/store.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "mesh/pki/signature.h"
#include "mycel/v1/mesh.pb.h"
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

// When to issue a certificate of `kind`/`name`: `now`, or, when that
// identity was revoked less than a second before, just past the revocation.
// The list keeps its times to the second and a certificate's issue time is
// its notBefore (whole seconds) plus kNotBeforeBackdate, so a certificate
// issued now would count as issued at the revocation, and be refused with
// the ones it revoked. notBefore stays in the past (backdated by minutes):
// the certificate is valid at once.
absl::Time IssueTime(const pki::RevocationList& revocations,
                     pki::IdentityKind kind, const std::string& name,
                     absl::Time now) {
  const std::optional<absl::Time> at =
      revocations.IdentityRevokedAt(kind, name);
  if (!at.has_value()) return now;
  return std::max(now, *at + absl::Seconds(1));
}

}  // namespace

absl::StatusOr<std::string> MeshNode::OriginOf(const std::string& state_dir,
                                               const std::string& node_name) {
  const std::string path = state_dir + "/mesh/origin";
  absl::StatusOr<std::string> text = ReadFile(path);
  if (absl::IsNotFound(text.status())) return node_name;
  RETURN_IF_ERROR(Annotate(text.status(), "mesh origin"));
  const std::string origin(absl::StripAsciiWhitespace(*text));
  if (store::OriginNode(origin) != node_name ||
      store::OriginKeyId(origin).size() != pki::kKeyIdDigits) {
    return absl::DataLossError(absl::StrCat(path, ": \"", origin,
                                            "\" is not an origin of node ",
                                            node_name, " (NAME~KEYID)"));
  }
  return origin;
}

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
  absl::StatusOr<pki::PrivateKey> key = pki::PrivateKey::FromPem(key_pem);
  if (!key.ok()) {
    return absl::DataLossError(
        absl::StrCat("mesh: ", d, "/node.key: ", key.status().message()));
  }
  RETURN_IF_ERROR(options_.trust->SetCa(ca_pem));
  row_ = row;
  ca_cert_.emplace(*std::move(ca_cert));
  node_key_.emplace(*std::move(key));
  node_issued_ = cert->not_before() + pki::kNotBeforeBackdate;
  node_expires_ = cert->not_after();
  if (channels_ == nullptr) {
    channels_ = std::make_unique<PeerChannels>(PeerChannels::Options{
        .mesh = row.name,
        .ca_file = d + "/ca.crt",
        .cert_file = d + "/node.crt",
        .key_file = d + "/node.key",
        .refresh = RefreshIntervalFor(options_.node_validity)});
  }
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

absl::Status MeshNode::RequireCaKeyLocked(absl::string_view does) const {
  if (ca_.has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("node ", row_->node,
                   " is not an authority: only a holder of the CA key ", does));
}

absl::Status MeshNode::RequireAuthorityLocked(absl::string_view why) const {
  RETURN_IF_ERROR(RequireMeshLocked());
  if (ca_.has_value()) return absl::OkStatus();
  std::string known;
  absl::StatusOr<std::vector<PeerRow>> peers =
      const_cast<MeshStore&>(store_).ListPeers();
  if (peers.ok()) {
    for (const PeerRow& p : *peers) {
      if (!p.authority) continue;
      absl::StrAppend(&known, known.empty() ? "" : ", ", p.name, " (",
                      p.address, ")");
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "node ", row_->node, " is not an authority of the mesh ", row_->name,
      ": ", why, "; authorities it knows: ", known.empty() ? "none" : known));
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
                   ca_->IssueForKey(pub, {id, role},
                                    IssueTime(options_.trust->revocations(),
                                              pki::IdentityKind::kUser, name,
                                              options_.clock->Now())));
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

bool MeshNode::AdmitsJoins() {
  {
    absl::MutexLock lock(&mu_);
    if (!ca_.has_value()) return false;
  }
  // Asked at every handshake without a certificate and every TCP accept:
  // the answer holds until a token changes here or the first open token
  // expires, so the table is read once per change, not per connection.
  const absl::Time now = options_.clock->Now();
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&admits_mu_);
    if (admits_.generation == token_generation_ && now < admits_.until) {
      return admits_.open;
    }
    generation = token_generation_;
  }
  absl::StatusOr<std::vector<pki::StoredJoinToken>> tokens =
      store_.ListTokens();
  // A store that cannot list the tokens cannot take a use of one either:
  // no join could succeed, so none is served.
  if (!tokens.ok()) return false;
  bool open = false;
  absl::Time until = absl::InfiniteFuture();
  for (const pki::StoredJoinToken& t : *tokens) {
    if (!t.revoked && t.uses_left > 0 && t.expires > now) {
      open = true;
      until = std::min(until, t.expires);
    }
  }
  absl::MutexLock lock(&admits_mu_);
  // Kept only if no token changed while the table was read.
  if (token_generation_ == generation) {
    admits_ = {.generation = generation, .open = open, .until = until};
  }
  return open;
}

void MeshNode::TokensChanged() {
  absl::MutexLock lock(&admits_mu_);
  ++token_generation_;
}

std::optional<NodeCredentials> MeshNode::Credentials() const {
  absl::MutexLock lock(&mu_);
  return node_;
}

absl::StatusOr<std::pair<std::string, pki::StoredJoinToken>>
MeshNode::CreateToken(absl::Duration ttl, int64_t uses, bool authority) {
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
  stored.authority = authority;
  absl::Status inserted = store_.InsertToken(stored);
  TokensChanged();
  RETURN_IF_ERROR(inserted);
  if (token_listener_) token_listener_(stored.id);
  return std::make_pair(token.ToString(), stored);
}

absl::StatusOr<std::vector<pki::StoredJoinToken>> MeshNode::ListTokens() {
  return store_.ListTokens();
}

absl::StatusOr<std::vector<std::string>> MeshNode::CollectExpiredTokens() {
  return store_.DeleteTokensExpiredBefore(options_.clock->Now() -
                                          options_.token_retention);
}

absl::StatusOr<pki::StoredJoinToken> MeshNode::GetToken(const std::string& id) {
  return store_.GetToken(id);
}

absl::Status MeshNode::RevokeToken(const std::string& id) {
  RETURN_IF_ERROR(pki::ValidateJoinTokenId(id));
  absl::Status revoked = store_.RevokeToken(id);
  TokensChanged();
  RETURN_IF_ERROR(revoked);
  if (token_listener_) token_listener_(id);
  return absl::OkStatus();
}

absl::StatusOr<Admission> MeshNode::Admit(const AdmitRequest& req) {
  absl::StatusOr<Admission> out = AdmitHere(req);
  if (out.ok() && token_listener_) token_listener_(req.token_id);
  return out;
}

namespace {

// `message` as the JSON kept in the replicated store (proto field names).
absl::StatusOr<std::string> ToStoreJson(const google::protobuf::Message& m,
                                        absl::string_view what) {
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(m, &json, o).ok()) {
    return absl::InternalError(absl::StrCat(what, ": cannot encode as JSON"));
  }
  return json;
}

// Parses a value of the replicated store into `m`.
absl::Status FromStoreJson(absl::string_view json, google::protobuf::Message* m,
                           absl::string_view what) {
  if (!google::protobuf::util::JsonStringToMessage(std::string(json), m).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": not a ", m->GetDescriptor()->full_name(), " in JSON"));
  }
  return absl::OkStatus();
}

// What the CA signature of a shared token covers.
absl::StatusOr<std::string> SignedTokenBytes(v1::SignedJoinToken token) {
  token.clear_signature();
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream out(&stream);
  out.SetSerializationDeterministic(true);
  if (!token.SerializeToCodedStream(&out)) {
    return absl::InternalError("join token: cannot serialize");
  }
  out.Trim();
  return absl::StrCat("mycel.join-token.v1", absl::string_view("\0", 1), bytes);
}

}  // namespace

absl::StatusOr<std::string> MeshNode::SignedToken(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireMeshLocked());
  RETURN_IF_ERROR(RequireCaKeyLocked("publishes join tokens"));
  ASSIGN_OR_RETURN(pki::StoredJoinToken t,
                   const_cast<MeshStore&>(store_).GetToken(id));
  v1::SignedJoinToken out;
  out.set_id(t.id);
  out.set_secret_hash(t.secret_hash);
  out.set_created_us(absl::ToUnixMicros(t.created));
  out.set_expires_us(absl::ToUnixMicros(t.expires));
  out.set_uses_left(t.uses_left);
  out.set_revoked(t.revoked);
  out.set_authority(t.authority);
  out.set_by(row_->node);
  ASSIGN_OR_RETURN(std::string bytes, SignedTokenBytes(out));
  ASSIGN_OR_RETURN(*out.mutable_signature(),
                   pki::SignSha256(ca_->private_key(), bytes));
  return ToStoreJson(out, "join token");
}

absl::StatusOr<bool> MeshNode::MergeSignedToken(absl::string_view key,
                                                absl::string_view value) {
  v1::SignedJoinToken in;
  RETURN_IF_ERROR(FromStoreJson(value, &in, absl::StrCat("join token ", key)));
  if (in.id() != key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "join token ", key, ": signed for token ", in.id(), ", not ", key));
  }
  RETURN_IF_ERROR(Annotate(pki::ValidateJoinTokenId(in.id()), "join token"));
  ASSIGN_OR_RETURN(std::string bytes, SignedTokenBytes(in));
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(RequireMeshLocked());
    if (!pki::VerifySha256(*ca_cert_, bytes, in.signature()).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "join token ", key, ": not signed by the CA of mesh ", row_->name));
    }
  }
  pki::StoredJoinToken t;
  t.id = in.id();
  t.secret_hash = in.secret_hash();
  t.created = absl::FromUnixMicros(in.created_us());
  t.expires = absl::FromUnixMicros(in.expires_us());
  t.uses_left = in.uses_left();
  t.revoked = in.revoked();
  t.authority = in.authority();
  // Collected here already (or about to be): a late copy does not bring
  // it back.
  if (TokenCollectable(t.expires)) return false;
  absl::StatusOr<bool> merged = store_.MergeToken(t);
  TokensChanged();
  return merged;
}

absl::StatusOr<Admission> MeshNode::AdmitHere(const AdmitRequest& req) {
  const absl::Time now = options_.clock->Now();
  RETURN_IF_ERROR(limiter_.Check(req.source, now));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireAuthorityLocked("only authorities admit nodes"));
  // The token: every failure here may be a guess, and counts.
  const std::string fingerprint = ca_->fingerprint();
  const std::string self = row_->node;
  absl::Status token_ok = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        pki::JoinToken presented,
        pki::JoinToken::FromPresented(req.token_id, req.secret, fingerprint));
    absl::StatusOr<pki::StoredJoinToken> stored = store_.GetToken(req.token_id);
    if (stored.status().code() == absl::StatusCode::kNotFound) {
      return absl::UnauthenticatedError(absl::StrCat(
          "join token ", req.token_id, " is not known to node ", self,
          " (tokens are checked by the authority that made them)"));
    }
    RETURN_IF_ERROR(stored.status());
    RETURN_IF_ERROR(pki::CheckJoinToken(*stored, presented, now));
    if (req.authority && !stored->authority) {
      return absl::PermissionDeniedError(absl::StrCat(
          "join token ", req.token_id,
          " does not admit authorities (make one with mycel mesh token "
          "create --authority)"));
    }
    return absl::OkStatus();
  }();
  if (!token_ok.ok()) {
    if (token_ok.code() != absl::StatusCode::kPermissionDenied) {
      limiter_.RecordFailure(req.source, now);
    }
    return token_ok;
  }
  // The request itself.
  ASSIGN_OR_RETURN(pki::CertificateRequest csr,
                   pki::CertificateRequest::Parse(req.csr, ca_->mesh()));
  if (csr.spiffe_id().kind() != pki::IdentityKind::kNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("csr: asks for ", csr.spiffe_id().ToString(),
                     ": a join admits nodes only"));
  }
  const std::string& name = csr.spiffe_id().name();
  ASSIGN_OR_RETURN(std::optional<PeerRow> existing, store_.GetPeer(name));
  const pki::RevocationList revoked = options_.trust->revocations();
  const bool name_revoked =
      revoked.IdentityRevokedAt(pki::IdentityKind::kNode, name).has_value();
  bool in_use = existing.has_value();
  if (!in_use && !name_revoked && options_.name_in_use) {
    // A name that cannot be checked is not admitted: two nodes under one
    // name would share an origin.
    absl::StatusOr<bool> known = options_.name_in_use(name);
    if (!known.ok()) {
      return Annotate(known.status(), absl::StrCat("checking whether node ",
                                                   name, " is in the mesh"));
    }
    in_use = *known;
  }
  if (name == row_->node || (in_use && !name_revoked)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "node ", name, " is already a member of the mesh ", ca_->mesh(),
        ": join under another name (--node-name), or revoke it first (mycel "
        "mesh revoke ",
        name, ")"));
  }
  if (req.address.empty() || req.address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: \"", req.address,
                     "\" is not HOST:PORT (the joining node must serve the "
                     "mesh: start it with --listen)"));
  }
  absl::Status consumed = store_.ConsumeToken(req.token_id);
  TokensChanged();
  RETURN_IF_ERROR(consumed);
  ASSIGN_OR_RETURN(
      pki::Certificate cert,
      ca_->Issue(csr,
                 {csr.spiffe_id(), pki::Role::kNode, options_.node_validity},
                 IssueTime(revoked, pki::IdentityKind::kNode, name, now)));
  RETURN_IF_ERROR(
      store_.PutPeer({name, req.address, req.authority, cert.serial(), now}));
  Admission out;
  out.mesh = ca_->mesh();
  ASSIGN_OR_RETURN(out.cert_pem, cert.ToPem());
  out.ca_pem = node_->ca_pem;
  if (req.authority) {
    ASSIGN_OR_RETURN(out.ca_key_pem, ca_->private_key().ToPem());
  }
  out.revocations = revoked.Serialize();
  out.admitted_by = row_->node;
  ASSIGN_OR_RETURN(std::vector<PeerRow> peers, store_.ListPeers());
  for (PeerRow& p : peers) {
    if (p.authority && p.name != name) out.authorities.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<std::pair<pki::PrivateKey, std::string>> MeshNode::PrepareJoin(
    const std::string& mesh) {
  RETURN_IF_ERROR(
      Annotate(pki::ValidateIdentityName(options_.node_name), "node name"));
  {
    absl::MutexLock lock(&mu_);
    if (row_.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("this node is already in the mesh ", row_->name));
    }
  }
  ASSIGN_OR_RETURN(pki::PrivateKey key, pki::PrivateKey::Generate());
  ASSIGN_OR_RETURN(pki::SpiffeId id,
                   pki::SpiffeId::Create(pki::IdentityKind::kNode, mesh,
                                         options_.node_name));
  ASSIGN_OR_RETURN(pki::CertificateRequest csr,
                   pki::CertificateRequest::Create(id, key));
  ASSIGN_OR_RETURN(std::string pem, csr.ToPem());
  return std::make_pair(std::move(key), std::move(pem));
}

absl::StatusOr<pki::Certificate> MeshNode::CheckOwnCertificate(
    const std::string& pem, const std::string& ca_pem,
    const pki::PrivateKey& key) const {
  ASSIGN_OR_RETURN(pki::PeerVerifier verifier,
                   pki::PeerVerifier::Create(ca_pem));
  ASSIGN_OR_RETURN(pki::Certificate cert, pki::Certificate::FromPem(pem));
  absl::StatusOr<pki::PeerIdentity> peer =
      verifier.Verify(cert, pki::PeerSide::kServer, pki::RevocationList(),
                      options_.clock->Now());
  if (!peer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the certificate issued to this node: ", peer.status().message()));
  }
  if (peer->kind != pki::IdentityKind::kNode ||
      peer->name != options_.node_name) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate issued to this node is for ",
                     peer->spiffe_id, ", not node ", options_.node_name));
  }
  RETURN_IF_ERROR(Annotate(cert.CheckKeyMatches(key),
                           "the certificate issued to this node"));
  return cert;
}

absl::Status MeshNode::CompleteJoin(pki::PrivateKey key, const Admission& a,
                                    const std::string& via_address) {
  absl::MutexLock lock(&mu_);
  if (row_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this node is already in the mesh ", row_->name));
  }
  ASSIGN_OR_RETURN(pki::Certificate ca_cert,
                   pki::Certificate::FromPem(a.ca_pem));
  ASSIGN_OR_RETURN(std::string mesh, pki::MeshOfCaCertificate(ca_cert));
  if (mesh != a.mesh) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the authority says mesh ", a.mesh, " but its CA is for ", mesh));
  }
  RETURN_IF_ERROR(CheckOwnCertificate(a.cert_pem, a.ca_pem, key).status());
  std::optional<pki::CertificateAuthority> ca;
  if (!a.ca_key_pem.empty()) {
    ASSIGN_OR_RETURN(ca,
                     pki::CertificateAuthority::Load(a.ca_pem, a.ca_key_pem));
  }
  absl::StatusOr<pki::RevocationList> revocations =
      pki::RevocationList::Parse(a.revocations);
  RETURN_IF_ERROR(Annotate(revocations.status(), "revocations"));
  const absl::Time now = options_.clock->Now();
  const std::string d = dir();
  RETURN_IF_ERROR(Annotate(MakeDirs(d, 0700), "mesh"));
  if (ca.has_value()) {
    RETURN_IF_ERROR(ca->private_key().WriteToFile(d + "/ca.key"));
  }
  RETURN_IF_ERROR(WriteFileAtomic(d + "/ca.crt", a.ca_pem, 0644));
  RETURN_IF_ERROR(key.WriteToFile(d + "/node.key"));
  RETURN_IF_ERROR(WriteFileAtomic(d + "/node.crt", a.cert_pem, 0644));
  pki::RevocationList merged = options_.trust->revocations();
  merged.Merge(*revocations);
  // Admitted under the name of a revoked node: this node's changes are
  // another origin than its predecessor's, whose numbers peers hold.
  if (merged.IdentityRevokedAt(pki::IdentityKind::kNode, options_.node_name)
          .has_value()) {
    ASSIGN_OR_RETURN(pki::Certificate own,
                     pki::Certificate::FromPem(a.cert_pem));
    ASSIGN_OR_RETURN(std::string key, own.KeyId());
    RETURN_IF_ERROR(WriteFileAtomic(
        d + "/origin",
        absl::StrCat(options_.node_name,
                     std::string(1, store::kOriginKeySeparator), key, "\n"),
        0644));
  }
  RETURN_IF_ERROR(SetRevocationsLocked(merged));
  RETURN_IF_ERROR(store_.PutPeer({a.admitted_by, via_address, true, "", now}));
  for (const PeerRow& p : a.authorities) {
    if (p.name != options_.node_name) RETURN_IF_ERROR(store_.PutPeer(p));
  }
  MeshRow row{mesh, options_.node_name, ca.has_value(), now};
  RETURN_IF_ERROR(store_.InsertMesh(row));
  return LoadLocked(row);
}

pki::RotationPlan MeshNode::Rotation() const {
  absl::MutexLock lock(&mu_);
  if (!row_.has_value()) return {absl::InfiniteFuture(), false};
  return pki::PlanRotation(node_issued_, node_expires_, options_.clock->Now());
}

absl::StatusOr<std::string> MeshNode::RenewalCsr() const {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireMeshLocked());
  ASSIGN_OR_RETURN(
      pki::SpiffeId id,
      pki::SpiffeId::Create(pki::IdentityKind::kNode, row_->name, row_->node));
  ASSIGN_OR_RETURN(pki::CertificateRequest csr,
                   pki::CertificateRequest::Create(id, *node_key_));
  return csr.ToPem();
}

absl::StatusOr<std::string> MeshNode::RenewFor(const std::string& node,
                                               absl::string_view csr_pem) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireAuthorityLocked("only authorities renew"));
  ASSIGN_OR_RETURN(pki::CertificateRequest csr,
                   pki::CertificateRequest::Parse(csr_pem, ca_->mesh()));
  ASSIGN_OR_RETURN(
      pki::SpiffeId id,
      pki::SpiffeId::Create(pki::IdentityKind::kNode, ca_->mesh(), node));
  RETURN_IF_ERROR(csr.CheckAsksFor(id));
  const absl::Time now = options_.clock->Now();
  ASSIGN_OR_RETURN(
      pki::Certificate cert,
      ca_->Issue(csr, {id, pki::Role::kNode, options_.node_validity}, now));
  ASSIGN_OR_RETURN(std::optional<PeerRow> peer, store_.GetPeer(node));
  if (peer.has_value()) {
    peer->serial = cert.serial();
    RETURN_IF_ERROR(store_.PutPeer(*peer));
  }
  return cert.ToPem();
}

absl::Status MeshNode::RenewSelf() {
  std::string pem;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(RequireAuthorityLocked("it cannot renew itself"));
    ASSIGN_OR_RETURN(pki::PublicKey pub, node_key_->GetPublicKey());
    ASSIGN_OR_RETURN(pki::SpiffeId id,
                     pki::SpiffeId::Create(pki::IdentityKind::kNode, row_->name,
                                           row_->node));
    ASSIGN_OR_RETURN(
        pki::Certificate cert,
        ca_->IssueForKey(pub, {id, pki::Role::kNode, options_.node_validity},
                         options_.clock->Now()));
    ASSIGN_OR_RETURN(pem, cert.ToPem());
  }
  return InstallNodeCertificate(pem);
}

absl::Status MeshNode::InstallNodeCertificate(const std::string& pem) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireMeshLocked());
  ASSIGN_OR_RETURN(pki::Certificate cert,
                   CheckOwnCertificate(pem, node_->ca_pem, *node_key_));
  RETURN_IF_ERROR(WriteFileAtomic(dir() + "/node.crt", pem, 0644));
  node_->cert_pem = pem;
  node_issued_ = cert.not_before() + pki::kNotBeforeBackdate;
  node_expires_ = cert.not_after();
  return absl::OkStatus();
}

absl::Status MeshNode::SetRevocationsLocked(const pki::RevocationList& list) {
  RETURN_IF_ERROR(store_.PutRevocations(list));
  options_.trust->SetRevocations(list);
  return absl::OkStatus();
}

absl::StatusOr<pki::RevocationList> MeshNode::Revoke(const std::string& target,
                                                     const std::string& kind) {
  absl::StatusOr<pki::RevocationList> list = RevokeHere(target, kind);
  if (list.ok() && revoked_listener_) revoked_listener_();
  return list;
}

absl::StatusOr<pki::RevocationList> MeshNode::RevokeHere(
    const std::string& target, const std::string& kind) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireAuthorityLocked("revoke on an authority"));
  std::string how = kind;
  if (how.empty()) {
    absl::StatusOr<std::string> serial = pki::NormalizeSerial(target);
    how = serial.ok() && serial->size() >= 16 ? "serial" : "node";
  }
  pki::RevocationList list = options_.trust->revocations();
  const absl::Time now = options_.clock->Now();
  if (how == "serial") {
    RETURN_IF_ERROR(Annotate(list.RevokeSerial(target, now), "target"));
  } else if (how == "node" || how == "user") {
    const pki::IdentityKind k =
        how == "node" ? pki::IdentityKind::kNode : pki::IdentityKind::kUser;
    RETURN_IF_ERROR(Annotate(pki::ValidateIdentityName(target), "target"));
    if (k == pki::IdentityKind::kNode && target == row_->node) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", target,
          " is this node: revoke it from another authority of the mesh"));
    }
    RETURN_IF_ERROR(list.RevokeIdentity(k, target, now));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("kind: \"", kind, "\" is not node, user or serial"));
  }
  RETURN_IF_ERROR(SetRevocationsLocked(list));
  return list;
}

namespace {

// What the CA signature of a published list covers: a context string, the
// publishing authority's name, and the list.
std::string SignedRevocationsBytes(absl::string_view by,
                                   absl::string_view list) {
  return absl::StrCat("mycel.revocations.v1", absl::string_view("\0", 1), by,
                      absl::string_view("\0", 1), list);
}

}  // namespace

absl::StatusOr<std::string> MeshNode::SignedRevocations() const {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireMeshLocked());
  RETURN_IF_ERROR(RequireCaKeyLocked("publishes revocations"));
  const pki::RevocationList list = options_.trust->revocations();
  v1::SignedRevocations out;
  out.set_by(row_->node);
  out.set_generation(list.generation());
  out.set_list(list.Serialize());
  ASSIGN_OR_RETURN(
      *out.mutable_signature(),
      pki::SignSha256(ca_->private_key(),
                      SignedRevocationsBytes(out.by(), out.list())));
  return ToStoreJson(out, "revocations");
}

absl::StatusOr<bool> MeshNode::MergeSignedRevocations(absl::string_view key,
                                                      absl::string_view value) {
  v1::SignedRevocations in;
  RETURN_IF_ERROR(
      FromStoreJson(value, &in, absl::StrCat("revocations of ", key)));
  if (in.by() != key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "revocations of ", key, ": signed for ", in.by(), ", not ", key));
  }
  absl::StatusOr<pki::RevocationList> list =
      pki::RevocationList::Parse(in.list());
  if (!list.ok()) {
    return Annotate(list.status(), absl::StrCat("revocations of ", key));
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireMeshLocked());
  absl::Status signed_by_ca = pki::VerifySha256(
      *ca_cert_, SignedRevocationsBytes(in.by(), in.list()), in.signature());
  if (!signed_by_ca.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "revocations of ", key, ": not signed by the CA of mesh ", row_->name));
  }
  pki::RevocationList merged = options_.trust->revocations();
  const pki::RevocationList before = merged;
  merged.Merge(*list);
  if (merged.serials() == before.serials() &&
      merged.identities() == before.identities()) {
    return false;
  }
  RETURN_IF_ERROR(SetRevocationsLocked(merged));
  return true;
}

absl::StatusOr<bool> MeshNode::MergeRevocations(const pki::RevocationList& in,
                                                const std::string& from) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(RequireMeshLocked());
  ASSIGN_OR_RETURN(std::optional<PeerRow> peer, store_.GetPeer(from));
  if (!peer.has_value() || !peer->authority) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", from, " is not an authority that node ", row_->node,
        " knows: it takes revocations from "
        "authorities only"));
  }
  pki::RevocationList list = options_.trust->revocations();
  const pki::RevocationList before = list;
  list.Merge(in);
  if (list.serials() == before.serials() &&
      list.identities() == before.identities()) {
    return false;
  }
  RETURN_IF_ERROR(SetRevocationsLocked(list));
  return true;
}

pki::RevocationList MeshNode::Revocations() const {
  return options_.trust->revocations();
}

absl::StatusOr<std::vector<PeerRow>> MeshNode::Peers() {
  return store_.ListPeers();
}

PeerChannels* MeshNode::channels() const {
  absl::MutexLock lock(&mu_);
  return channels_.get();
}

}  // namespace mycel::identity
