// Signed liveness. An alive record (name, incarnation, addresses, labels,
// capacity, leaving) is signed by the node it describes, with its node key,
// and carries that node's certificate; a relay can forward it but cannot
// forge another node's liveness, address or labels. The driver implements
// both interfaces with real certificates (ECDSA P-256 under the mesh CA);
// fake_signer.h has cheap stand-ins for tests and the simulator.
#ifndef MYCEL_MESH_MEMBERSHIP_SIGNING_H_
#define MYCEL_MESH_MEMBERSHIP_SIGNING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mesh/membership/message.h"

namespace mycel::membership {

// The exact bytes that are signed: a domain tag, then every field of the
// record except the signature and the certificate, in a fixed order with
// explicit lengths (labels and capacity sorted by key). The one definition:
// signers and verifiers must both call this, never re-derive it.
std::string CanonicalAliveBytes(const Alive& alive);

// Signs this node's own records. Implementations are final; the state
// machine calls it from its single thread.
class AliveSigner {
 public:
  virtual ~AliveSigner() = default;
  // Fills alive->signature over CanonicalAliveBytes(*alive) and
  // alive->certificate with this node's certificate (DER).
  virtual absl::Status Sign(Alive* alive) = 0;
};

// Checks records from others. Called from the state machine's thread only
// for records that would change what it holds (never for duplicates).
class AliveVerifier {
 public:
  virtual ~AliveVerifier() = default;
  // Checks that alive.certificate chains to the mesh CA and is valid, and
  // that alive.signature is a signature over CanonicalAliveBytes(alive) by
  // that certificate's key. Returns the node name the certificate certifies.
  // The caller compares it with alive.name, so a valid certificate for one
  // node can never vouch for another.
  virtual absl::StatusOr<std::string> Verify(const Alive& alive) = 0;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_SIGNING_H_
