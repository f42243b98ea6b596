#include "mesh/membership/pki_signer.h"

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/private_key.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel::membership {
namespace {

struct MdCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using UniqueMdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

const unsigned char* Bytes(absl::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

absl::Status SignWith(const pki::Certificate& cert, const pki::PrivateKey& key,
                      Alive* alive) {
  if (X509_check_private_key(cert.x509(), key.evp()) != 1) {
    return absl::InvalidArgumentError(
        "node key: it is not the key of the node certificate");
  }
  const std::string data = CanonicalAliveBytes(*alive);
  UniqueMdCtx ctx(EVP_MD_CTX_new());
  size_t size = 0;
  if (ctx == nullptr ||
      EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr,
                         key.evp()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &size, Bytes(data), data.size()) !=
          1) {
    return absl::InternalError("sign alive record: EVP_DigestSign failed");
  }
  std::string signature(size, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(&signature[0]),
                     &size, Bytes(data), data.size()) != 1) {
    return absl::InternalError("sign alive record: EVP_DigestSign failed");
  }
  signature.resize(size);
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
  return SignAlive(cert_pem, key_pem, alive);
}

absl::StatusOr<std::string> PkiVerifier::Verify(const Alive& alive) {
  absl::StatusOr<pki::Certificate> cert =
      pki::Certificate::FromDer(alive.certificate);
  if (!cert.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("alive record of ", alive.name,
                     ": certificate: ", cert.status().message()));
  }
  ASSIGN_OR_RETURN(std::string pem, cert->ToPem());
  absl::StatusOr<identity::Caller> caller =
      trust_->Identify(pem, clock_->Now(), pki::PeerSide::kClient);
  if (!caller.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "alive record of ", alive.name, ": ", caller.status().message()));
  }
  if (caller->kind != identity::CallerKind::kNode) {
    return absl::PermissionDeniedError(
        absl::StrCat("alive record of ", alive.name, ": signed by ",
                     caller->Describe(), ", not by a node"));
  }
  if (caller->name != alive.name) {
    return absl::PermissionDeniedError(
        absl::StrCat("alive record of ", alive.name,
                     ": its certificate is node ", caller->name, "'s"));
  }
  const std::string data = CanonicalAliveBytes(alive);
  UniqueMdCtx ctx(EVP_MD_CTX_new());
  if (ctx == nullptr ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr,
                           X509_get0_pubkey(cert->x509())) != 1 ||
      EVP_DigestVerify(ctx.get(), Bytes(alive.signature),
                       alive.signature.size(), Bytes(data), data.size()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("alive record of ", alive.name,
                     ": the signature is not its certificate key's"));
  }
  return caller->name;
}

}  // namespace mycel::membership
