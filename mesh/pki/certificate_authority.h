// The mesh's certificate authority: creates the self-signed mesh CA and
// issues node and user certificates.
#ifndef MYCEL_MESH_PKI_CERTIFICATE_AUTHORITY_H_
#define MYCEL_MESH_PKI_CERTIFICATE_AUTHORITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/certificate_request.h"
#include "mesh/pki/private_key.h"
#include "mesh/pki/public_key.h"
#include "mesh/pki/role.h"
#include "mesh/pki/spiffe_id.h"

namespace mycel::pki {

inline constexpr absl::Duration kDefaultCaValidity = absl::Hours(24 * 3652);
inline constexpr absl::Duration kDefaultNodeValidity = absl::Hours(24 * 30);
inline constexpr absl::Duration kDefaultUserValidity = absl::Hours(24 * 365);

struct CaOptions {
  absl::Duration validity = kDefaultCaValidity;
  // Adds a critical nameConstraints extension that permits only URI names
  // whose host is the mesh (RFC 5280 URI constraints match the host), so
  // even a misused CA key cannot mint an identity of another mesh that a
  // standard verifier accepts. OpenSSL, BoringSSL and Go enforce it; a TLS
  // stack without URI name-constraint support rejects the whole chain, which
  // is the only reason to turn it off.
  bool name_constraints = true;
};

// What the issuer decided to grant: the identity, its role, and how long.
struct Grant {
  SpiffeId id;
  Role role;
  // Zero means the default for the kind: kDefaultNodeValidity for nodes,
  // kDefaultUserValidity for users. The certificate never outlives the CA.
  absl::Duration validity = absl::ZeroDuration();
};

// Checks that `ca` is a mesh CA certificate (self-signed with a valid
// signature, basicConstraints CA:TRUE, keyCertSign, ECDSA P-256, exactly one
// URI SAN that is a trust-domain SPIFFE ID "spiffe://MESH") and returns the
// mesh name. INVALID_ARGUMENT naming the rule broken otherwise.
absl::StatusOr<std::string> MeshOfCaCertificate(const Certificate& ca);

// The mesh CA: its certificate and private key. Create() makes a new one
// (`mycel mesh init`); Load() reads one back.
//
// The CA certificate: version 3, random 128-bit serial, subject = issuer =
// "O=mycel, CN=mycel mesh MESH", URI SAN spiffe://MESH (the SPIFFE trust
// domain ID), basicConstraints critical CA:TRUE pathlen:0, keyUsage critical
// keyCertSign+cRLSign, subjectKeyIdentifier, and (by default) critical
// nameConstraints permitting URI host MESH.
//
// Leaf certificates: version 3, random 128-bit positive serial, subject
// "O=<role organization>, CN=NAME" (see role.h), one URI SAN (the SPIFFE
// ID), basicConstraints critical CA:FALSE, keyUsage critical
// digitalSignature, extendedKeyUsage serverAuth+clientAuth (nodes) or
// clientAuth (users, who never serve), subject and authority key
// identifiers, notBefore = now - kNotBeforeBackdate, notAfter = now +
// validity (capped at the CA's notAfter), ecdsa-with-SHA256.
//
// Move-only. Const methods may be called from several threads at once.
class CertificateAuthority {
 public:
  // A new CA for `mesh` with a fresh key, valid from now - kNotBeforeBackdate
  // for options.validity.
  static absl::StatusOr<CertificateAuthority> Create(
      absl::string_view mesh, absl::Time now, const CaOptions& options = {});

  // A CA from its certificate (PEM or DER) and PKCS#8 PEM key. The
  // certificate must pass MeshOfCaCertificate() and the key must match it.
  static absl::StatusOr<CertificateAuthority> Load(
      absl::string_view certificate, absl::string_view private_key_pem);

  CertificateAuthority(CertificateAuthority&&) = default;
  CertificateAuthority& operator=(CertificateAuthority&&) = default;
  CertificateAuthority(const CertificateAuthority&) = delete;
  CertificateAuthority& operator=(const CertificateAuthority&) = delete;

  const std::string& mesh() const { return mesh_; }
  const Certificate& certificate() const { return certificate_; }
  const PrivateKey& private_key() const { return key_; }
  // The pin: SHA-256 of the CA certificate's DER, lower-case hex.
  const std::string& fingerprint() const { return certificate_.fingerprint(); }

  // Issues a certificate for `grant` to the key in a validated CSR. The CSR
  // must ask for exactly grant.id (CertificateRequest::CheckAsksFor):
  // INVALID_ARGUMENT otherwise. `now` is the issue time.
  absl::StatusOr<Certificate> Issue(const CertificateRequest& csr,
                                    const Grant& grant, absl::Time now) const;

  // Parses and validates a CSR (PEM or DER) against this CA's mesh, then
  // issues as above. The usual entry point of a join or renewal.
  absl::StatusOr<Certificate> IssueFromCsr(absl::string_view csr,
                                           const Grant& grant,
                                           absl::Time now) const;

  // Issues a certificate for `grant` to `key` without a CSR, for keys the
  // caller generated itself (`mycel mesh init` and `user add` creating the
  // admin user's key).
  absl::StatusOr<Certificate> IssueForKey(const PublicKey& key,
                                          const Grant& grant,
                                          absl::Time now) const;

 private:
  CertificateAuthority(std::string mesh, Certificate certificate,
                       PrivateKey key)
      : mesh_(std::move(mesh)),
        certificate_(std::move(certificate)),
        key_(std::move(key)) {}

  std::string mesh_;
  Certificate certificate_;
  PrivateKey key_;
};

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_CERTIFICATE_AUTHORITY_H_
