#include "mesh/identity/trust.h"

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::identity {

absl::Status Trust::SetCa(absl::string_view ca_pem) {
  absl::StatusOr<pki::PeerVerifier> v = pki::PeerVerifier::Create(ca_pem);
  if (!v.ok()) return Annotate(v.status(), "mesh CA");
  auto shared = std::make_shared<const pki::PeerVerifier>(*std::move(v));
  absl::MutexLock lock(&mu_);
  verifier_ = std::move(shared);
  generation_.fetch_add(1);
  return absl::OkStatus();
}

void Trust::SetRevocations(pki::RevocationList list) {
  auto shared = std::make_shared<const pki::RevocationList>(std::move(list));
  absl::MutexLock lock(&mu_);
  revocations_ = std::move(shared);
  generation_.fetch_add(1);
}

std::string Trust::mesh() const {
  absl::MutexLock lock(&mu_);
  return verifier_ == nullptr ? "" : verifier_->mesh();
}

pki::RevocationList Trust::revocations() const {
  absl::MutexLock lock(&mu_);
  return *revocations_;
}

bool Trust::IdentityRevoked(pki::IdentityKind kind,
                            absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  return revocations_->IdentityRevokedAt(kind, name).has_value();
}

bool Trust::CouldRevoke(pki::IdentityKind kind, absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  return !revocations_->serials().empty() ||
         revocations_->IdentityRevokedAt(kind, name).has_value();
}

absl::StatusOr<Caller> Trust::Identify(absl::string_view pem, absl::Time now,
                                       pki::PeerSide side) const {
  if (pem.empty()) return Caller{};
  return IdentifyWith([&](const pki::PeerVerifier& verifier,
                          const pki::RevocationList& revocations) {
    return verifier.Verify(pem, side, revocations, now);
  });
}

absl::StatusOr<Caller> Trust::Identify(const pki::Certificate& leaf,
                                       absl::Time now,
                                       pki::PeerSide side) const {
  return IdentifyWith([&](const pki::PeerVerifier& verifier,
                          const pki::RevocationList& revocations) {
    return verifier.Verify(leaf, side, revocations, now);
  });
}

absl::StatusOr<Caller> Trust::IdentifyWith(
    absl::FunctionRef<absl::StatusOr<pki::PeerIdentity>(
        const pki::PeerVerifier&, const pki::RevocationList&)>
        verify) const {
  std::shared_ptr<const pki::PeerVerifier> verifier;
  std::shared_ptr<const pki::RevocationList> revocations;
  {
    absl::MutexLock lock(&mu_);
    verifier = verifier_;
    revocations = revocations_;
  }
  if (verifier == nullptr) {
    return absl::UnauthenticatedError(
        "this node is not in a mesh: it trusts no certificate");
  }
  absl::StatusOr<pki::PeerIdentity> peer = verify(*verifier, *revocations);
  if (!peer.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("client certificate refused: ", peer.status().message()));
  }
  Caller c;
  c.kind = peer->kind == pki::IdentityKind::kNode ? CallerKind::kNode
                                                  : CallerKind::kUser;
  c.name = peer->name;
  c.role = peer->role;
  c.serial = peer->serial;
  return c;
}

}  // namespace mycel::identity
