// OriginVerifier: the check that a replicated change was made by the origin
// it names (store::ObjectStore::ChangeVerifier). Every change carries its
// origin's ECDSA P-256 signature over store::ChangeSigningBytes, made with
// the origin's node key; this finds the origin's certificate (from
// membership, which holds each member's certificate in its signed records),
// checks it against identity::Trust, and checks the signature with its key.
// A member that relays changes can therefore neither forge a change in
// another node's name nor take another origin's sequence numbers.
//
// Node keys are kept across certificate renewals (docs/security.md,
// Rotation), so a change signed before a renewal checks against the new
// certificate. An expired certificate still vouches for the changes its key
// signed (its chain to the mesh CA and the revocation list are checked; its
// dates are not): an origin's changes outlive its certificate. A revoked
// origin's changes are refused.
//
// An origin NAME~KEYID (a node admitted under a revoked node's name;
// store::OriginNode, docs/replication.md "Origins") is checked against a
// certificate of NAME with that key; a plain NAME that the revocation list
// revokes as a node never against a certificate of NAME issued since, which
// is a later lineage's.
//
// Membership forgets a member a day after it left. So that its changes can
// still be checked, and handed to nodes that join later, the verifier keeps
// the certificate it checked each origin with (Memory: the store's
// origin_certificates), and takes one a peer hands over (Offer) for an
// origin it has none for, once the mesh CA vouches for it.
#ifndef MYCEL_MESH_REPLICATION_ORIGIN_VERIFIER_H_
#define MYCEL_MESH_REPLICATION_ORIGIN_VERIFIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/objects.h"
#include "mesh/identity/trust.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/private_key.h"
#include "runtime/clock.h"

namespace mycel::replication {

class OriginVerifier {
 public:
  // The certificate (DER) of node `name` as this node knows it; empty when
  // it knows none.
  using CertificateSource = std::function<std::string(absl::string_view name)>;

  // Where checked certificates are kept beyond membership. Either may be
  // empty (then they live as long as this object).
  struct Memory {
    // The certificate kept for a name; empty when none.
    CertificateSource recall;
    // Keeps `der` as `name`'s (called outside any store transaction).
    std::function<void(absl::string_view name, absl::string_view der)> keep;
  };

  // `trust` and `clock` must outlive it.
  OriginVerifier(const identity::Trust* trust, const Clock* clock,
                 CertificateSource certificates, Memory memory = {})
      : trust_(trust),
        clock_(clock),
        certificates_(std::move(certificates)),
        memory_(std::move(memory)) {}
  OriginVerifier(const OriginVerifier&) = delete;
  OriginVerifier& operator=(const OriginVerifier&) = delete;

  // OK when `change.stamp.signature` is the signature of `bytes` (its
  // SigningBytes) by the key of its origin's certificate. Errors:
  //  - PERMISSION_DENIED: unsigned, a signature by another key, or an
  //    origin whose certificate Trust refuses (revoked, another CA) or
  //    that certifies another name;
  //  - UNAVAILABLE: no certificate of the origin is known here yet.
  // Thread-safe.
  absl::Status Verify(const store::ObjectChange& change,
                      absl::string_view bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether `origin`'s changes are refused whatever they say: a plain name
  // revoked as a node, or an origin whose known certificate Trust refuses
  // (revoked). False for an origin not known here. Thread-safe.
  bool Refuses(absl::string_view origin) ABSL_LOCKS_EXCLUDED(mu_);

  // Certificates parsed and checked against Trust (cache misses).
  uint64_t certificate_checks() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a certificate of `origin` is known here (membership, kept, or
  // offered); it may still be refused when checked.
  bool Knows(absl::string_view origin) ABSL_LOCKS_EXCLUDED(mu_);
  // The certificate (DER) of `origin` known here, for a peer that lacks it;
  // empty when none.
  std::string CertificateFor(absl::string_view origin) ABSL_LOCKS_EXCLUDED(mu_);
  // A certificate a peer handed over. Checked as Verify checks an origin's
  // (the mesh CA issued it to a node and has not revoked it; its dates are
  // not checked), then kept as the certificate of an origin, which it
  // returns: NAME~KEYID (the node and its key) when `wanted` accepts that,
  // else the node's plain name when `wanted` accepts it (null: any) and the
  // name is not revoked as a node (a certificate issued since a node's
  // revocation is of a later lineage); FAILED_PRECONDITION otherwise. Taken
  // only when no certificate of that origin is known here: a peer cannot
  // replace one (ALREADY_EXISTS). INVALID_ARGUMENT: not a certificate, or
  // larger than 16 KiB; PERMISSION_DENIED: Trust refuses it, or it is not
  // a node's.
  absl::StatusOr<std::string> Offer(
      absl::string_view der,
      const std::function<bool(absl::string_view origin)>& wanted = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Checked {
    std::string der;
    std::shared_ptr<const pki::Certificate> certificate;
    uint64_t generation = 0;
    // Membership's certificate of the node when it was of another lineage
    // (another key) than the origin's, and `der` the one kept.
    std::string passed_over;
  };
  // Whether `origin` is a plain node name that the revocation list revokes
  // as a node: every certificate of its lineage is revoked, and one issued
  // since belongs to a later lineage (NAME~KEYID).
  bool PlainOriginRevoked(absl::string_view origin) const;
  // Membership's certificate of the node `origin` names, or "" (none, or
  // PlainOriginRevoked).
  std::string MemberCertificate(absl::string_view origin);
  // OK when `cert` has the key an origin NAME~KEYID names (any, for a
  // plain name).
  static absl::Status CheckLineage(absl::string_view origin,
                                   const pki::Certificate& cert);
  // `der` checked as `origin`'s certificate: parsed, checked against Trust,
  // a node's, of the node and key the origin names.
  absl::StatusOr<std::shared_ptr<const pki::Certificate>> Check(
      absl::string_view origin, const std::string& der)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The origin's certificate, checked against Trust (cached while the
  // certificate and Trust's generation stay the same; a refusal while the
  // generation does).
  absl::StatusOr<std::shared_ptr<const pki::Certificate>> CertificateOf(
      absl::string_view origin) ABSL_LOCKS_EXCLUDED(mu_);
  // CertificateOf without the cache of refusals; `member` is
  // MemberCertificate(origin).
  absl::StatusOr<std::shared_ptr<const pki::Certificate>> FindCertificate(
      absl::string_view origin, const std::string& member, uint64_t generation)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `cert` checked against Trust as a node's certificate: the node's name.
  absl::StatusOr<std::string> NodeOf(const pki::Certificate& cert)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The certificate of `origin` beyond membership: kept_ (offered, or
  // recalled before), else Memory's recall. Empty when none.
  std::string Kept(absl::string_view origin) ABSL_LOCKS_EXCLUDED(mu_);
  void Keep(absl::string_view origin, const std::string& der)
      ABSL_LOCKS_EXCLUDED(mu_);

  const identity::Trust* const trust_;
  const Clock* const clock_;
  const CertificateSource certificates_;
  const Memory memory_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Checked> checked_ ABSL_GUARDED_BY(mu_);
  // The certificate of each origin known beyond membership, as kept in
  // Memory (written through); "" records that Memory has none.
  absl::flat_hash_map<std::string, std::string> kept_ ABSL_GUARDED_BY(mu_);
  uint64_t certificate_checks_ ABSL_GUARDED_BY(mu_) = 0;
  // Origins whose certificate was refused (PERMISSION_DENIED), with the
  // Trust generation then and the error: a change of such an origin costs
  // no parse until the generation moves.
  struct Refused {
    uint64_t generation = 0;
    std::string member;  // membership's certificate then
    absl::Status error;
  };
  absl::flat_hash_map<std::string, Refused> refused_ ABSL_GUARDED_BY(mu_);
};

// Signs this node's changes (store::ChangeSigner) with `key`.
store::ChangeSigner NodeKeySigner(std::shared_ptr<const pki::PrivateKey> key);

}  // namespace mycel::replication

#endif  // MYCEL_MESH_REPLICATION_ORIGIN_VERIFIER_H_
