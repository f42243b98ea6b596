// Trust: what this node currently trusts (the mesh CA, as a PeerVerifier)
// and refuses (the revocation list), and the one function that turns a
// peer's certificate into a Caller. Shared by the API's authorizer, and by
// membership and replication when they serve peers.
#ifndef MYCEL_MESH_IDENTITY_TRUST_H_
#define MYCEL_MESH_IDENTITY_TRUST_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mesh/identity/caller.h"
#include "mesh/pki/peer_verifier.h"
#include "mesh/pki/revocation_list.h"

namespace mycel::identity {

// Thread-safe. The CA and the revocation list can be replaced at any time
// (mesh init, join, a pushed revocation); a call being verified keeps the
// snapshot it started with.
class Trust {
 public:
  // Trusts nothing until SetCa().
  Trust() = default;
  Trust(const Trust&) = delete;
  Trust& operator=(const Trust&) = delete;

  // Trusts the mesh CA `ca_pem` from now on. INVALID_ARGUMENT when it is
  // not a mesh CA certificate (MeshOfCaCertificate).
  absl::Status SetCa(absl::string_view ca_pem) ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces the revocation list.
  void SetRevocations(pki::RevocationList list) ABSL_LOCKS_EXCLUDED(mu_);

  // Changes whenever SetCa or SetRevocations does: a cache of what
  // Identify said must be dropped when it moves.
  uint64_t generation() const { return generation_.load(); }

  // The mesh trusted, empty before SetCa().
  std::string mesh() const ABSL_LOCKS_EXCLUDED(mu_);
  // A copy of the current revocation list.
  pki::RevocationList revocations() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the revocation list revokes the identity `kind`/`name` (every
  // certificate of it issued before some time).
  bool IdentityRevoked(pki::IdentityKind kind, absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the revocation list could refuse a certificate of `kind` and
  // `name`: it names that identity, or it lists serials (which only the
  // certificate itself can be checked against). False lets a caller that
  // has just seen the certificate chained and in its validity (a TLS
  // handshake) skip parsing it again.
  bool CouldRevoke(pki::IdentityKind kind, absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Who presented `pem` (the peer's leaf certificate as gRPC's auth context
  // gives it, "x509_pem_cert") at `now`: the chain to the mesh CA, the
  // validity of both, the usages for `side`, and the revocation list are
  // checked on every call. An empty `pem` is Caller{kNone} (no certificate,
  // which only Access::kAnyone admits). UNAUTHENTICATED naming the rule
  // otherwise, and when no CA is trusted yet.
  absl::StatusOr<Caller> Identify(absl::string_view pem, absl::Time now,
                                  pki::PeerSide side = pki::PeerSide::kClient)
      const ABSL_LOCKS_EXCLUDED(mu_);
  // The same for a certificate already parsed (one carried in a signed
  // record): no second parse, which with OpenSSL 3.0 costs about as much
  // as the chain check itself.
  absl::StatusOr<Caller> Identify(const pki::Certificate& leaf, absl::Time now,
                                  pki::PeerSide side = pki::PeerSide::kClient)
      const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Identify's checks, with `verify` asking the verifier about the leaf.
  absl::StatusOr<Caller> IdentifyWith(
      absl::FunctionRef<absl::StatusOr<pki::PeerIdentity>(
          const pki::PeerVerifier&, const pki::RevocationList&)>
          verify) const ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::atomic<uint64_t> generation_{0};
  std::shared_ptr<const pki::PeerVerifier> verifier_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const pki::RevocationList> revocations_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<const pki::RevocationList>();
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_TRUST_H_
