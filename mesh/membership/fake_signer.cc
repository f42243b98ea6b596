#include "mesh/membership/fake_signer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "mesh/membership/prng.h"

namespace mycel::membership {
namespace {

constexpr absl::string_view kCertMagic = "MYCELFAKECERT\x01";

uint64_t Mix(uint64_t x) { return SplitMix64(&x); }

uint64_t KeyedHash(uint64_t key, absl::string_view data) {
  uint64_t h = Mix(key ^ (data.size() * 0x9e3779b97f4a7c15ULL));
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, data.data() + i, 8);
    h = Mix(h ^ word);
  }
  uint64_t tail = 0;
  for (size_t j = 0; i + j < data.size(); ++j) {
    tail |= static_cast<uint64_t>(static_cast<uint8_t>(data[i + j])) << (8 * j);
  }
  return Mix(h ^ tail ^ 0xff51afd7ed558ccdULL);
}

uint64_t NodeKey(uint64_t realm_secret, absl::string_view name) {
  return KeyedHash(realm_secret, absl::StrCat("node-key:", name));
}

std::string FakeSignature(uint64_t key, const Alive& alive) {
  const uint64_t digest = KeyedHash(key, CanonicalAliveBytes(alive));
  std::string sig(kFakeSignatureBytes, '\0');
  for (size_t i = 0; i < kFakeSignatureBytes / 8; ++i) {
    const uint64_t word = Mix(digest + i);
    std::memcpy(sig.data() + 8 * i, &word, 8);
  }
  return sig;
}

}  // namespace

std::string FakeCertificate(uint64_t realm_secret, absl::string_view name) {
  std::string cert(kCertMagic);
  cert.push_back(static_cast<char>(name.size() & 0xff));
  cert.append(name.data(), name.size());
  // Filler standing in for the key, issuer, validity and CA signature.
  uint64_t state = KeyedHash(realm_secret, absl::StrCat("cert:", name));
  while (cert.size() < kFakeCertificateBytes) {
    cert.push_back(static_cast<char>(SplitMix64(&state) & 0xff));
  }
  return cert;
}

FakeSigner::FakeSigner(uint64_t realm_secret, std::string name)
    : key_(NodeKey(realm_secret, name)),
      certificate_(FakeCertificate(realm_secret, name)) {}

absl::Status FakeSigner::Sign(Alive* alive) {
  alive->certificate = certificate_;
  alive->signature = FakeSignature(key_, *alive);
  return absl::OkStatus();
}

absl::StatusOr<std::string> FakeVerifier::Verify(const Alive& alive) {
  const std::string& cert = alive.certificate;
  if (cert.size() < kCertMagic.size() + 1 ||
      absl::string_view(cert).substr(0, kCertMagic.size()) != kCertMagic) {
    return absl::UnauthenticatedError("certificate: not a fake certificate");
  }
  const size_t len = static_cast<uint8_t>(cert[kCertMagic.size()]);
  if (cert.size() < kCertMagic.size() + 1 + len) {
    return absl::UnauthenticatedError("certificate: truncated");
  }
  std::string certified = cert.substr(kCertMagic.size() + 1, len);
  if (cert != FakeCertificate(realm_secret_, certified)) {
    return absl::UnauthenticatedError("certificate: not issued by this realm");
  }
  if (alive.signature !=
      FakeSignature(NodeKey(realm_secret_, certified), alive)) {
    return absl::UnauthenticatedError("signature: does not verify");
  }
  return certified;
}

}  // namespace mycel::membership
