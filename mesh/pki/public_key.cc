#include "mesh/pki/public_key.h"

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::pki {

using internal::ErrorScope;
using internal::OpenSslError;

absl::StatusOr<PublicKey> PublicKey::FromDer(absl::string_view der) {
  ErrorScope errors;
  if (der.empty()) return absl::InvalidArgumentError("public key: empty");
  if (der.size() > internal::kMaxInputBytes) {
    return absl::InvalidArgumentError("public key: too large");
  }
  const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
  const unsigned char* end = p + der.size();
  internal::UniqueEvpPkey key(
      d2i_PUBKEY(nullptr, &p, static_cast<long>(der.size())));
  if (key == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "public key: malformed or truncated DER");
  }
  if (p != end) {
    return absl::InvalidArgumentError(
        "public key: unexpected bytes after the DER");
  }
  return FromEvp(std::move(key));
}

absl::StatusOr<PublicKey> PublicKey::FromPem(absl::string_view pem) {
  ASSIGN_OR_RETURN(std::string der,
                   internal::DecodePem(pem, "PUBLIC KEY", "public key"));
  return FromDer(der);
}

absl::StatusOr<PublicKey> PublicKey::FromEvp(internal::UniqueEvpPkey key) {
  ErrorScope errors;
  if (!internal::IsP256(key.get())) {
    return absl::InvalidArgumentError(
        "public key: must be ECDSA on the named curve P-256");
  }
  internal::UniqueEvpPkeyCtx ctx(
      EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr));
  if (ctx == nullptr) {
    return OpenSslError(absl::StatusCode::kInternal, "public key");
  }
  if (EVP_PKEY_public_check(ctx.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "public key: invalid point");
  }
  return PublicKey(std::move(key));
}

absl::StatusOr<std::string> PublicKey::ToDer() const {
  ErrorScope errors;
  int len = i2d_PUBKEY(key_.get(), nullptr);
  if (len <= 0) {
    return OpenSslError(absl::StatusCode::kInternal, "encode public key");
  }
  std::string out(static_cast<size_t>(len), '\0');
  unsigned char* p = reinterpret_cast<unsigned char*>(out.data());
  if (i2d_PUBKEY(key_.get(), &p) != len) {
    return OpenSslError(absl::StatusCode::kInternal, "encode public key");
  }
  return out;
}

absl::StatusOr<std::string> PublicKey::ToPem() const {
  ASSIGN_OR_RETURN(std::string der, ToDer());
  return internal::EncodePem(der, "PUBLIC KEY");
}

}  // namespace mycel::pki
