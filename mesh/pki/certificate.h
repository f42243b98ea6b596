// An X.509 certificate of the mesh (the CA's or a leaf), parsed and
// immutable.
#ifndef MYCEL_MESH_PKI_CERTIFICATE_H_
#define MYCEL_MESH_PKI_CERTIFICATE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/pki/internal/openssl.h"
#include "mesh/pki/private_key.h"

namespace mycel::pki {

// Every certificate this library issues starts this long before the time
// it was issued, so that a peer whose clock lags a little accepts it.
inline constexpr absl::Duration kNotBeforeBackdate = absl::Minutes(5);

// Hex digits in a Certificate::KeyId (48 bits).
inline constexpr size_t kKeyIdDigits = 12;

// One parsed X.509 certificate. Parsing checks the encoding only; whether
// the certificate is trusted is PeerVerifier's job. Move-only; immutable, so
// const methods may be called from several threads at once.
class Certificate {
 public:
  // Exactly one PEM "CERTIFICATE" block (whitespace around it is fine).
  static absl::StatusOr<Certificate> FromPem(absl::string_view pem);
  // DER; trailing bytes are refused.
  static absl::StatusOr<Certificate> FromDer(absl::string_view der);
  // PEM when the input starts with "-----BEGIN", DER otherwise.
  static absl::StatusOr<Certificate> Parse(absl::string_view pem_or_der);
  // Takes ownership of a certificate built or parsed by OpenSSL.
  static absl::StatusOr<Certificate> FromX509(internal::UniqueX509 x509);

  Certificate(Certificate&&) = default;
  Certificate& operator=(Certificate&&) = default;
  Certificate(const Certificate&) = delete;
  Certificate& operator=(const Certificate&) = delete;

  // A second handle on the same (immutable) certificate.
  Certificate Clone() const;

  const std::string& der() const { return der_; }
  absl::StatusOr<std::string> ToPem() const;

  // SHA-256 of the DER encoding, lower-case hex (64 characters). For the CA
  // certificate this is the mesh's pin; it equals the output of
  // `openssl x509 -noout -fingerprint -sha256` without the colons.
  const std::string& fingerprint() const { return fingerprint_; }
  // The serial number, lower-case hex without leading zero bytes.
  const std::string& serial() const { return serial_; }
  absl::Time not_before() const { return not_before_; }
  absl::Time not_after() const { return not_after_; }

  // A short name of the certificate's public key: the first kKeyIdDigits
  // hex digits of the SHA-256 of its SubjectPublicKeyInfo (DER). Renewals
  // keep a node's key, so it names the node's lineage of certificates
  // (replication origins, docs/replication.md).
  absl::StatusOr<std::string> KeyId() const;

  // OK when `key` is the private half of this certificate's public key;
  // INVALID_ARGUMENT otherwise.
  absl::Status CheckKeyMatches(const PrivateKey& key) const;

  // The OpenSSL handle, for the rest of mesh/pki. Owned by this object;
  // callers must not modify it.
  X509* x509() const { return x509_.get(); }

 private:
  Certificate() = default;

  internal::UniqueX509 x509_;
  std::string der_;
  std::string fingerprint_;
  std::string serial_;
  absl::Time not_before_;
  absl::Time not_after_;
};

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_CERTIFICATE_H_
