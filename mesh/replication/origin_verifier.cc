#include "mesh/replication/origin_verifier.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mesh/identity/caller.h"
#include "mesh/pki/peer_verifier.h"
#include "mesh/pki/signature.h"
#include "runtime/status.h"

namespace mycel::replication {
namespace {

std::string Describe(const store::ObjectChange& c) {
  return absl::StrCat("change ", c.stamp.origin, ":", c.stamp.seq);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const pki::Certificate>>
OriginVerifier::CertificateOf(absl::string_view origin) {
  std::string der = certificates_(origin);
  if (der.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no certificate of origin ", origin,
                     " is known here yet (membership has not seen it)"));
  }
  const uint64_t generation = trust_->generation();
  {
    absl::MutexLock lock(&mu_);
    auto it = checked_.find(origin);
    if (it != checked_.end() && it->second.der == der &&
        it->second.generation == generation) {
      return it->second.certificate;
    }
  }
  absl::StatusOr<pki::Certificate> cert = pki::Certificate::FromDer(der);
  if (!cert.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "origin ", origin, ": certificate: ", cert.status().message()));
  }
  // The chain and the revocation list, not the dates: see the header.
  // (OpenSSL takes a certificate as expired at its notAfter second.)
  const absl::Time first = cert->not_before() + absl::Seconds(1);
  const absl::Time last = std::max(first, cert->not_after() - absl::Seconds(1));
  const absl::Time at = std::clamp(clock_->Now(), first, last);
  absl::StatusOr<identity::Caller> caller =
      trust_->Identify(*cert, at, pki::PeerSide::kClient);
  {
    absl::MutexLock lock(&mu_);
    ++certificate_checks_;
  }
  if (!caller.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "origin ", origin, ": certificate: ", caller.status().message()));
  }
  if (caller->kind != identity::CallerKind::kNode || caller->name != origin) {
    return absl::PermissionDeniedError(
        absl::StrCat("origin ", origin, ": the certificate known for it is ",
                     caller->Describe(), "'s"));
  }
  auto shared = std::make_shared<const pki::Certificate>(*std::move(cert));
  absl::MutexLock lock(&mu_);
  checked_.insert_or_assign(std::string(origin),
                            Checked{std::move(der), shared, generation});
  return shared;
}

absl::Status OriginVerifier::Verify(const store::ObjectChange& change,
                                    absl::string_view bytes) {
  if (change.stamp.signature.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat(Describe(change), ": unsigned (signature: empty)"));
  }
  absl::StatusOr<std::shared_ptr<const pki::Certificate>> cert =
      CertificateOf(change.stamp.origin);
  if (!cert.ok()) {
    return absl::Status(
        cert.status().code(),
        absl::StrCat(Describe(change), ": ", cert.status().message()));
  }
  if (!pki::VerifySha256(**cert, bytes, change.stamp.signature).ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat(Describe(change), ": signature: not made by the key of ",
                     change.stamp.origin, "'s certificate"));
  }
  return absl::OkStatus();
}

uint64_t OriginVerifier::certificate_checks() const {
  absl::MutexLock lock(&mu_);
  return certificate_checks_;
}

store::ChangeSigner NodeKeySigner(std::shared_ptr<const pki::PrivateKey> key) {
  return [key = std::move(key)](absl::string_view bytes) {
    return pki::SignSha256(*key, bytes);
  };
}

}  // namespace mycel::replication
