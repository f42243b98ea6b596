// Cheap stand-ins for the node-key signer and the certificate verifier, for
// tests and the simulator. A "realm secret" plays the CA: each node's key is
// derived from it and the node's name, a signature is a keyed hash of the
// canonical bytes, and the certificate is a fixed-layout blob naming the
// node. Sizes match the real thing (a DER ECDSA P-256 signature is ~72
// bytes, a mesh certificate ~450), so simulated byte counts are realistic.
// Not cryptography: anyone who knows the realm secret can sign for anyone.
#ifndef MYCEL_MESH_MEMBERSHIP_FAKE_SIGNER_H_
#define MYCEL_MESH_MEMBERSHIP_FAKE_SIGNER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "mesh/membership/signing.h"

namespace mycel::membership {

inline constexpr size_t kFakeSignatureBytes = 72;
inline constexpr size_t kFakeCertificateBytes = 450;

// Signs as `name`. Thread-compatible.
class FakeSigner final : public AliveSigner {
 public:
  FakeSigner(uint64_t realm_secret, std::string name);
  absl::Status Sign(Alive* alive) override;

 private:
  uint64_t key_;
  std::string certificate_;
};

// Accepts what a FakeSigner of the same realm signed. Thread-compatible.
class FakeVerifier final : public AliveVerifier {
 public:
  explicit FakeVerifier(uint64_t realm_secret) : realm_secret_(realm_secret) {}
  absl::StatusOr<std::string> Verify(const Alive& alive) override;

 private:
  uint64_t realm_secret_;
};

// The fake certificate for `name` (exposed so tests can build forgeries that
// carry someone else's certificate).
std::string FakeCertificate(uint64_t realm_secret, absl::string_view name);

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_FAKE_SIGNER_H_
