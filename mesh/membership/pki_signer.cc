#include "mesh/membership/pki_signer.h"

#include <openssl/crypto.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/internal/openssl.h"
#include "mesh/pki/private_key.h"
#include "mesh/pki/signature.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel::membership {
namespace {

absl::Status SignWith(const pki::Certificate& cert, const pki::PrivateKey& key,
                      Alive* alive) {
  if (X509_check_private_key(cert.x509(), key.evp()) != 1) {
    return absl::InvalidArgumentError(
        "node key: it is not the key of the node certificate");
  }
  ASSIGN_OR_RETURN(std::string signature,
                   pki::SignSha256(key, CanonicalAliveBytes(*alive)));
  alive->signature = std::move(signature);
  alive->certificate = cert.der();
  return absl::OkStatus();
}

}  // namespace

absl::Status SignAlive(absl::string_view cert_pem, absl::string_view key_pem,
                       Alive* alive) {
  absl::StatusOr<pki::Certificate> cert = pki::Certificate::FromPem(cert_pem);
  if (!cert.ok()) return Annotate(cert.status(), "node certificate");
  absl::StatusOr<pki::PrivateKey> key = pki::PrivateKey::FromPem(key_pem);
  if (!key.ok()) return Annotate(key.status(), "node key");
  return SignWith(*cert, *key, alive);
}

absl::Status PkiSigner::Sign(Alive* alive) {
  ASSIGN_OR_RETURN(std::string cert_pem, ReadFile(cert_file_));
  ASSIGN_OR_RETURN(std::string key_pem, ReadFile(key_file_));
  std::string digest =
      pki::internal::Sha256(cert_pem) + pki::internal::Sha256(key_pem);
  if (digest != digest_ || !cert_.has_value() || !key_.has_value()) {
    absl::StatusOr<pki::Certificate> cert = pki::Certificate::FromPem(cert_pem);
    absl::StatusOr<pki::PrivateKey> key = pki::PrivateKey::FromPem(key_pem);
    OPENSSL_cleanse(key_pem.data(), key_pem.size());
    if (!cert.ok()) return Annotate(cert.status(), "node certificate");
    if (!key.ok()) return Annotate(key.status(), "node key");
    ++parses_;
    cert_ = *std::move(cert);
    key_ = *std::move(key);
    digest_ = std::move(digest);
  }
  OPENSSL_cleanse(key_pem.data(), key_pem.size());
  return SignWith(*cert_, *key_, alive);
}

absl::StatusOr<PkiVerifier::Checked> PkiVerifier::Check(const Alive& alive,
                                                        absl::Time now) {
  const uint64_t generation = trust_->generation();
  {
    absl::MutexLock lock(&mu_);
    auto it = checked_.find(alive.certificate);
    if (it != checked_.end()) {
      const Checked& c = it->second;
      if (c.generation == generation && now >= c.checked_at &&
          now - c.checked_at < kCertificateCacheTtl &&
          now >= c.certificate->not_before() &&
          now <= c.certificate->not_after()) {
        return c;
      }
      checked_.erase(it);
    }
  }
  absl::StatusOr<pki::Certificate> cert =
      pki::Certificate::FromDer(alive.certificate);
  if (!cert.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("alive record of ", alive.name,
                     ": certificate: ", cert.status().message()));
  }
  absl::StatusOr<identity::Caller> caller =
      trust_->Identify(*cert, now, pki::PeerSide::kClient);
  {
    absl::MutexLock lock(&mu_);
    ++certificate_checks_;
  }
  if (!caller.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "alive record of ", alive.name, ": ", caller.status().message()));
  }
  if (caller->kind != identity::CallerKind::kNode) {
    return absl::PermissionDeniedError(
        absl::StrCat("alive record of ", alive.name, ": signed by ",
                     caller->Describe(), ", not by a node"));
  }
  Checked c{std::make_shared<const pki::Certificate>(*std::move(cert)),
            caller->name, generation, now};
  absl::MutexLock lock(&mu_);
  // Members are few; a cache this full is being fed garbage: start over.
  if (checked_.size() >= kCertificateCacheMax) checked_.clear();
  checked_.insert_or_assign(alive.certificate, c);
  return c;
}

absl::StatusOr<std::string> PkiVerifier::Verify(const Alive& alive) {
  ASSIGN_OR_RETURN(Checked c, Check(alive, clock_->Now()));
  if (c.node != alive.name) {
    return absl::PermissionDeniedError(
        absl::StrCat("alive record of ", alive.name,
                     ": its certificate is node ", c.node, "'s"));
  }
  if (!pki::VerifySha256(*c.certificate, CanonicalAliveBytes(alive),
                         alive.signature)
           .ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("alive record of ", alive.name,
                     ": the signature is not its certificate key's"));
  }
  return c.node;
}

uint64_t PkiVerifier::certificate_checks() const {
  absl::MutexLock lock(&mu_);
  return certificate_checks_;
}

}  // namespace mycel::membership
