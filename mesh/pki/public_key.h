// An ECDSA P-256 public key, the only key type a mesh certificate carries.
#ifndef MYCEL_MESH_PKI_PUBLIC_KEY_H_
#define MYCEL_MESH_PKI_PUBLIC_KEY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesh/pki/internal/openssl.h"

namespace mycel::pki {

// An ECDSA P-256 public key. Move-only; immutable after construction, so
// const methods may be called from several threads at once.
class PublicKey {
 public:
  // SubjectPublicKeyInfo DER / PEM ("PUBLIC KEY"). Other algorithms or
  // curves, explicit curve parameters, a point off the curve, trailing bytes
  // or a truncated encoding are INVALID_ARGUMENT.
  static absl::StatusOr<PublicKey> FromDer(absl::string_view der);
  static absl::StatusOr<PublicKey> FromPem(absl::string_view pem);

  // Takes ownership of `key` after the same checks as FromDer.
  static absl::StatusOr<PublicKey> FromEvp(internal::UniqueEvpPkey key);

  PublicKey(PublicKey&&) = default;
  PublicKey& operator=(PublicKey&&) = default;
  PublicKey(const PublicKey&) = delete;
  PublicKey& operator=(const PublicKey&) = delete;

  // SubjectPublicKeyInfo encodings.
  absl::StatusOr<std::string> ToDer() const;
  absl::StatusOr<std::string> ToPem() const;

  // The OpenSSL handle, for the rest of mesh/pki. Owned by this object.
  EVP_PKEY* evp() const { return key_.get(); }

 private:
  explicit PublicKey(internal::UniqueEvpPkey key) : key_(std::move(key)) {}

  internal::UniqueEvpPkey key_;
};

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_PUBLIC_KEY_H_
