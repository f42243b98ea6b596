// Certificate signing requests (PKCS#10) for mesh identities.
#ifndef MYCEL_MESH_PKI_CERTIFICATE_REQUEST_H_
#define MYCEL_MESH_PKI_CERTIFICATE_REQUEST_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesh/pki/private_key.h"
#include "mesh/pki/public_key.h"
#include "mesh/pki/spiffe_id.h"

namespace mycel::pki {

// A CSR that passed strict validation: its signature verifies with its own
// ECDSA P-256 key, and it asks for exactly one identity, a SPIFFE ID of the
// expected mesh in its only subjectAltName. Holding one proves the requester
// holds the private key; it does not prove the requester may have the
// identity: CertificateAuthority::Issue() compares it with what the caller
// granted. The CSR's subject is ignored (the CA writes the subject).
// Move-only; immutable.
class CertificateRequest {
 public:
  // Builds and signs a CSR for `id` with `key`: subject CN=NAME, one URI
  // SAN holding `id`, ecdsa-with-SHA256.
  static absl::StatusOr<CertificateRequest> Create(const SpiffeId& id,
                                                   const PrivateKey& key);

  // Parses a CSR from PEM ("CERTIFICATE REQUEST") or DER and validates it:
  //   - well-formed, not truncated, nothing after it, at most 64 KiB;
  //   - version 1, signature ecdsa-with-SHA256 that verifies;
  //   - the key is ECDSA on the named curve P-256;
  //   - no attribute but extensionRequest, no extension but one
  //     subjectAltName, holding exactly one name: a URI that is a
  //     well-formed SPIFFE ID of `expected_mesh` (no DNS, IP, e-mail or
  //     other names).
  // Anything else is INVALID_ARGUMENT with a message starting "csr: " that
  // names the rule broken.
  static absl::StatusOr<CertificateRequest> Parse(
      absl::string_view pem_or_der, absl::string_view expected_mesh);

  CertificateRequest(CertificateRequest&&) = default;
  CertificateRequest& operator=(CertificateRequest&&) = default;
  CertificateRequest(const CertificateRequest&) = delete;
  CertificateRequest& operator=(const CertificateRequest&) = delete;

  const SpiffeId& spiffe_id() const { return spiffe_id_; }
  const PublicKey& public_key() const { return public_key_; }
  const std::string& der() const { return der_; }
  absl::StatusOr<std::string> ToPem() const;

  // OK when the CSR asks for exactly `granted`. Otherwise INVALID_ARGUMENT
  // saying how it differs: another kind ("asks for a user identity ... but
  // a node identity was granted"), another name, or another mesh.
  absl::Status CheckAsksFor(const SpiffeId& granted) const;

 private:
  CertificateRequest(SpiffeId id, PublicKey key, std::string der)
      : spiffe_id_(std::move(id)),
        public_key_(std::move(key)),
        der_(std::move(der)) {}

  SpiffeId spiffe_id_;
  PublicKey public_key_;
  std::string der_;
};

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_CERTIFICATE_REQUEST_H_
