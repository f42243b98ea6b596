// The calls one node makes to another for the identity layer: joining a
// mesh (with the CA pinned before anything secret is sent), pushing the
// revocation list, and renewing its certificate before it expires.
#ifndef MYCEL_MESH_IDENTITY_PEER_CALLS_H_
#define MYCEL_MESH_IDENTITY_PEER_CALLS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mesh/identity/mesh_node.h"
#include "mesh/pki/revocation_list.h"
#include "runtime/clock.h"

namespace mycel::identity {

struct JoinOptions {
  // A node of the mesh (HOST:PORT); an authority signs.
  std::string address;
  // The join token, as `mycel mesh token create` printed it.
  std::string token;
  bool authority = false;
  // Where this node serves the mesh (its --listen), told to the authority.
  std::string advertise;
  // For each of the two calls.
  absl::Duration timeout = absl::Seconds(15);
};

// Joins `node` to the mesh of the node at options.address:
//   1. asks it for the mesh CA over TLS without trusting it yet, and
//      compares the CA's SHA-256 with the token's pin: on a mismatch the
//      join stops with UNAUTHENTICATED, before anything secret is sent;
//   2. makes this node's key (it never leaves the node) and a CSR;
//   3. over TLS that trusts only the pinned CA and accepts only a node of
//      that mesh, presents the token and the CSR (Mesh.Admit);
//   4. checks what it got and enters the mesh (MeshNode::CompleteJoin).
// Errors keep the authority's status code, prefixed with where they
// happened.
absl::Status JoinMesh(MeshNode* node, const JoinOptions& options);

// Who took a pushed revocation list, and who did not (with why).
struct PushOutcome {
  std::vector<std::string> pushed;
  std::vector<std::string> failed;
};

// Pushes `list` to every peer of `node` except those named in `skip`,
// concurrently, and waits up to `timeout` for all of them.
PushOutcome PushRevocations(MeshNode* node, const pki::RevocationList& list,
                            const std::vector<std::string>& skip,
                            absl::Duration timeout);
// The same without waiting: the outcome is logged.
void PushRevocationsInBackground(MeshNode* node,
                                 const pki::RevocationList& list,
                                 std::vector<std::string> skip,
                                 absl::Duration timeout);

// Renews this node's certificate at two thirds of its life: an authority
// signs its own; any other node asks the authorities it knows in turn
// (Mesh.Renew over mTLS with its current certificate), retrying until one
// answers. The new certificate is written in place of node.crt, where the
// TLS credentials of the listener and of PeerChannels pick it up.
//
// Runs on `clock`'s timers; the node and the clock must outlive it.
class CertificateRotator {
 public:
  CertificateRotator(MeshNode* node, Clock* clock);
  ~CertificateRotator();
  CertificateRotator(const CertificateRotator&) = delete;
  CertificateRotator& operator=(const CertificateRotator&) = delete;

  // Starts checking (once; later calls do nothing).
  void Start();

  // Certificates renewed so far, and failed attempts.
  int64_t renewed() const;
  int64_t failures() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_PEER_CALLS_H_
