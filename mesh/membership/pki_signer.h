// The real AliveSigner and AliveVerifier (signing.h): ECDSA P-256 with the
// node key of the mesh, and the node certificate carried in the record,
// verified against identity::Trust (the mesh CA, validity, revocation).
// fake_signer.h has the cheap stand-ins the simulator uses.
#ifndef MYCEL_MESH_MEMBERSHIP_PKI_SIGNER_H_
#define MYCEL_MESH_MEMBERSHIP_PKI_SIGNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mesh/identity/trust.h"
#include "mesh/membership/signing.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/private_key.h"
#include "runtime/clock.h"

namespace mycel::membership {

// Signs this node's records with the key of `key_file` and attaches the
// certificate of `cert_file` (both PEM, as gen-pki.sh and the mesh layer
// write them). The files are read on every Sign (start, a refutation, a
// meta change, a leave), so a rotated certificate is used from the next
// record on; they are parsed again only when their bytes changed, since a
// key's parse from PEM costs about 1 ms with OpenSSL 3.0 and refutations
// come in bursts while a mesh forms on a busy host. Thread-compatible (the
// state machine calls it from its strand).
class PkiSigner final : public AliveSigner {
 public:
  PkiSigner(std::string cert_file, std::string key_file)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}
  // The files' errors (naming the file); INVALID_ARGUMENT when the key does
  // not belong to the certificate, which would make every record refused.
  absl::Status Sign(Alive* alive) override;

  // How many times the files were parsed (tests).
  uint64_t parses() const { return parses_; }

 private:
  std::string cert_file_;
  std::string key_file_;
  // The pair last parsed, and the SHA-256 of the files' bytes it came from
  // (a digest rather than a copy of the key's PEM).
  std::string digest_;
  std::optional<pki::Certificate> cert_;
  std::optional<pki::PrivateKey> key_;
  uint64_t parses_ = 0;
};

// Signs with PEM held in memory (tests; no rotation).
absl::Status SignAlive(absl::string_view cert_pem, absl::string_view key_pem,
                       Alive* alive);

// Accepts a record whose certificate is a node certificate that `trust`
// accepts at clock->Now() (chain to the mesh CA, validity of both, usages,
// revocation), whose node name is the record's name, and whose key made
// the signature. Errors: UNAUTHENTICATED for the certificate (the reason
// from Trust), PERMISSION_DENIED for a user certificate or a name that is
// not the record's, INVALID_ARGUMENT for a bad signature. Thread-safe;
// `trust` and `clock` must outlive it.
//
// A member's certificate comes again with each of its records (every
// refutation, every meta change), so what Trust said of it is remembered:
// for at most kCertificateCacheTtl, while Trust's generation (its CA and
// revocation list) is the same and the certificate is within its validity.
// The record's own signature is checked every time.
class PkiVerifier final : public AliveVerifier {
 public:
  static constexpr absl::Duration kCertificateCacheTtl = absl::Seconds(60);
  static constexpr size_t kCertificateCacheMax = 4096;

  PkiVerifier(const identity::Trust* trust, const Clock* clock)
      : trust_(trust), clock_(clock) {}
  absl::StatusOr<std::string> Verify(const Alive& alive) override;

  // Certificates parsed and checked against Trust, over this verifier's
  // life (cache misses).
  uint64_t certificate_checks() const;

 private:
  struct Checked {
    std::shared_ptr<const pki::Certificate> certificate;
    std::string node;     // the node name it certifies
    uint64_t generation;  // Trust's, when checked
    absl::Time checked_at;
  };
  // The certificate `der`, parsed and accepted by Trust as a node's at
  // `now`, from the cache or checked now.
  absl::StatusOr<Checked> Check(const Alive& alive, absl::Time now);

  const identity::Trust* const trust_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Checked> checked_ ABSL_GUARDED_BY(mu_);
  uint64_t certificate_checks_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_PKI_SIGNER_H_
