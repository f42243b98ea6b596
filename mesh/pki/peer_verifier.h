// Decides whether a peer's leaf certificate is a trusted identity of this
// mesh.
#ifndef MYCEL_MESH_PKI_PEER_VERIFIER_H_
#define MYCEL_MESH_PKI_PEER_VERIFIER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/internal/openssl.h"
#include "mesh/pki/peer_identity.h"
#include "mesh/pki/revocation_list.h"

namespace mycel::pki {

// Which end of the TLS connection the peer is. A server verifying the
// client that connected passes kClient; a client verifying the server it
// reached passes kServer.
enum class PeerSide { kClient, kServer };

// Verifies peers against one mesh CA. Build one per CA (at start-up and
// whenever the CA certificate changes) and call Verify() on every handshake
// and call: with the leaf PEM gRPC exposes as the auth context property
// "x509_pem_cert", it re-checks expiry and revocation that a long-lived
// connection would otherwise escape.
//
// The checks that depend only on the certificate's bytes (signature, key,
// names, usages, RFC 5280 path validation) are done once per certificate and
// remembered, keyed by the SHA-256 of its exact DER and the side; validity
// times (the leaf's and the CA's) and revocation are checked on every call.
// A repeated Verify() of the same PEM costs a base64 decode and a hash
// (microseconds) instead of two ECDSA verifications (hundreds of them).
//
// Thread-safe: Verify() is const and may run on many threads at once. The
// RevocationList passed in must not change during the call.
class PeerVerifier {
 public:
  // `ca` must pass MeshOfCaCertificate(); INVALID_ARGUMENT otherwise.
  static absl::StatusOr<PeerVerifier> Create(const Certificate& ca);
  // The CA certificate as PEM or DER.
  static absl::StatusOr<PeerVerifier> Create(absl::string_view ca);

  PeerVerifier(PeerVerifier&&);
  PeerVerifier& operator=(PeerVerifier&&);
  PeerVerifier(const PeerVerifier&) = delete;
  PeerVerifier& operator=(const PeerVerifier&) = delete;
  ~PeerVerifier();

  const std::string& mesh() const { return mesh_; }
  const Certificate& ca() const { return ca_; }

  // Verifies `leaf` (PEM or DER, the peer's certificate alone: this mesh
  // issues leaves directly from its root) and returns who it is. Every
  // failure is UNAUTHENTICATED and names the rule:
  //   "peer certificate: <parse error>"      garbage, truncated, wrong PEM
  //   "issued by another CA"                 signature is not this CA's
  //   "certificate not valid before T"       now < notBefore
  //   "certificate expired at T"             now > notAfter
  //   "CA certificate expired at T"          the CA itself
  //   "certificate key is not ECDSA P-256"
  //   "certificate: URI SAN missing" ...     ParsePeerIdentity rules
  //   "certificate is a CA" / "keyUsage ..." / "extendedKeyUsage ..."
  //                                          leaf usage: CA:FALSE,
  //                                          digitalSignature, no
  //                                          keyCertSign/cRLSign, EKU
  //                                          serverAuth+clientAuth for nodes,
  //                                          clientAuth only for users
  //   "a user certificate cannot serve"      side == kServer and a user
  //   "certificate is for mesh M, not N"     SPIFFE trust domain != CA's
  //   "chain rejected: <OpenSSL reason>"     RFC 5280 path validation
  //                                          (strict mode, name constraints)
  //   "revoked: serial S at T" / "revoked: node N at T"
  absl::StatusOr<PeerIdentity> Verify(absl::string_view leaf, PeerSide side,
                                      const RevocationList& revocations,
                                      absl::Time now) const;
  absl::StatusOr<PeerIdentity> Verify(const Certificate& leaf, PeerSide side,
                                      const RevocationList& revocations,
                                      absl::Time now) const;

 private:
  struct Cache;

  PeerVerifier(std::string mesh, Certificate ca,
               internal::UniqueX509Store store);

  // The checks that depend only on the certificate and `side`.
  absl::StatusOr<PeerIdentity> VerifyOnce(const Certificate& leaf,
                                          PeerSide side, absl::Time now) const;
  // RFC 5280 path validation of `leaf` against the CA; the error code of
  // X509_verify_cert (X509_V_OK when it passes) and its depth.
  int Chain(X509* leaf, PeerSide side, absl::Time now, int* depth) const;
  // The checks in the order of their clearest messages, the chain last.
  absl::StatusOr<PeerIdentity> Diagnose(const Certificate& leaf, PeerSide side,
                                        absl::Time now) const;
  // The checks besides the signature and the chain.
  absl::StatusOr<PeerIdentity> CheckFields(const Certificate& leaf,
                                           PeerSide side, absl::Time now) const;
  // The checks that depend on the time and the revocation list.
  absl::Status CheckNow(const PeerIdentity& peer,
                        const RevocationList& revocations,
                        absl::Time now) const;
  absl::StatusOr<PeerIdentity> Remember(const std::string& key,
                                        absl::StatusOr<PeerIdentity> peer,
                                        const RevocationList& revocations,
                                        absl::Time now) const;

  std::string mesh_;
  Certificate ca_;
  internal::UniqueX509Store store_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_PEER_VERIFIER_H_
