// An ECDSA P-256 private key: generation, PKCS#8 PEM, and key files.
#ifndef MYCEL_MESH_PKI_PRIVATE_KEY_H_
#define MYCEL_MESH_PKI_PRIVATE_KEY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesh/pki/internal/openssl.h"
#include "mesh/pki/public_key.h"

namespace mycel::pki {

// An ECDSA P-256 private key (the mesh CA's, a node's or a user's).
// Move-only; immutable after construction, so const methods (signing
// included) may be called from several threads at once.
class PrivateKey {
 public:
  // A fresh key from OpenSSL's CSPRNG.
  static absl::StatusOr<PrivateKey> Generate();

  // Parses an unencrypted PKCS#8 PEM block ("PRIVATE KEY"). Encrypted keys,
  // legacy "EC PRIVATE KEY" blocks, other algorithms or curves, and a key
  // whose public half does not match are INVALID_ARGUMENT. Never prompts
  // for a passphrase.
  static absl::StatusOr<PrivateKey> FromPem(absl::string_view pem);

  PrivateKey(PrivateKey&&) = default;
  PrivateKey& operator=(PrivateKey&&) = default;
  PrivateKey(const PrivateKey&) = delete;
  PrivateKey& operator=(const PrivateKey&) = delete;

  // Unencrypted PKCS#8 PEM ("-----BEGIN PRIVATE KEY-----"). The returned
  // string is a secret: write it with WriteToFile() rather than logging it.
  absl::StatusOr<std::string> ToPem() const;

  // The public half.
  absl::StatusOr<PublicKey> GetPublicKey() const;

  // Writes ToPem() to `path` atomically with mode 0600 (see
  // internal::WriteFileAtomic): the key never exists on disk readable by
  // anyone but the owner, and a crash leaves the old file or the new one.
  absl::Status WriteToFile(const std::string& path) const;

  // The OpenSSL handle, for the rest of mesh/pki. Owned by this object.
  EVP_PKEY* evp() const { return key_.get(); }

 private:
  explicit PrivateKey(internal::UniqueEvpPkey key) : key_(std::move(key)) {}

  internal::UniqueEvpPkey key_;
};

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_PRIVATE_KEY_H_
