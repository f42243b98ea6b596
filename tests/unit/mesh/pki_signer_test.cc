// The node-key signer and the mesh-CA verifier of alive records: a record
// signed by its node verifies; every forgery a relay or an outsider could
// try is refused with the reason (another node's key or certificate, a
// certificate of another CA, a user's certificate, a revoked or expired
// node, a record changed after signing).
#include "mesh/membership/pki_signer.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <string>

#include "mesh/identity/trust.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/private_key.h"
#include "runtime/fs.h"
#include "runtime/manual_clock.h"
#include "tests/testing/process.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::membership {
namespace {

using pki::testing::Fails;
using pki::testing::Must;
using pki::testing::T0;

struct Creds {
  std::string cert_pem;
  std::string key_pem;
};

Creds Issue(const pki::CertificateAuthority& ca, const std::string& name,
            pki::IdentityKind kind = pki::IdentityKind::kNode,
            pki::Role role = pki::Role::kNode,
            absl::Duration validity = absl::ZeroDuration()) {
  pki::PrivateKey key = Must(pki::PrivateKey::Generate());
  pki::PublicKey pub = Must(key.GetPublicKey());
  pki::SpiffeId id = Must(pki::SpiffeId::Create(kind, ca.mesh(), name));
  pki::Certificate cert =
      Must(ca.IssueForKey(pub, pki::Grant{id, role, validity}, T0()));
  return {Must(cert.ToPem()), Must(key.ToPem())};
}

Alive Record(const std::string& name) {
  Alive a;
  a.name = name;
  a.incarnation = 7;
  a.meta.addresses = {"10.0.0.1:7946"};
  a.meta.labels = {{"zone", "a"}};
  return a;
}

struct Fixture {
  Fixture() {
    REQUIRE(trust.SetCa(Must(ca.certificate().ToPem())).ok());
    a = Issue(ca, "a");
    b = Issue(ca, "b");
  }
  pki::CertificateAuthority ca = pki::testing::MakeCa("prod");
  identity::Trust trust;
  ManualClock clock{T0() + absl::Hours(1)};
  PkiVerifier verifier{&trust, &clock};
  Creds a, b;
};

TEST_CASE("a record signed with its node's key verifies as that node") {
  Fixture f;
  Alive alive = Record("a");
  REQUIRE(SignAlive(f.a.cert_pem, f.a.key_pem, &alive).ok());
  CHECK_FALSE(alive.signature.empty());
  CHECK_FALSE(alive.certificate.empty());
  absl::StatusOr<std::string> name = f.verifier.Verify(alive);
  REQUIRE_MESSAGE(name.ok(), name.status().ToString());
  CHECK(*name == "a");
}

TEST_CASE("a record in another node's name, signed by b, is refused") {
  Fixture f;
  // b signs a record that claims to be a: its own certificate names b.
  Alive alive = Record("a");
  REQUIRE(SignAlive(f.b.cert_pem, f.b.key_pem, &alive).ok());
  CHECK(Fails(f.verifier.Verify(alive), absl::StatusCode::kPermissionDenied,
              "its certificate is node b's"));
}

TEST_CASE("a's certificate with a signature by b's key is refused") {
  Fixture f;
  Alive alive = Record("a");
  REQUIRE(SignAlive(f.b.cert_pem, f.b.key_pem, &alive).ok());
  Alive genuine = Record("a");
  REQUIRE(SignAlive(f.a.cert_pem, f.a.key_pem, &genuine).ok());
  alive.certificate = genuine.certificate;
  CHECK(Fails(f.verifier.Verify(alive), absl::StatusCode::kInvalidArgument,
              "signature"));
}

TEST_CASE("a record changed after signing is refused") {
  Fixture f;
  Alive alive = Record("a");
  REQUIRE(SignAlive(f.a.cert_pem, f.a.key_pem, &alive).ok());
  SUBCASE("incarnation") { alive.incarnation++; }
  SUBCASE("address") { alive.meta.addresses = {"10.6.6.6:7946"}; }
  SUBCASE("leaving") { alive.leaving = true; }
  CHECK(Fails(f.verifier.Verify(alive), absl::StatusCode::kInvalidArgument,
              "signature"));
}

TEST_CASE("a certificate of another CA for the same mesh name is refused") {
  Fixture f;
  pki::CertificateAuthority rogue = pki::testing::MakeCa("prod");
  Creds forged = Issue(rogue, "a");
  Alive alive = Record("a");
  REQUIRE(SignAlive(forged.cert_pem, forged.key_pem, &alive).ok());
  CHECK(f.verifier.Verify(alive).status().code() ==
        absl::StatusCode::kUnauthenticated);
}

TEST_CASE("a user's certificate cannot vouch for a node") {
  Fixture f;
  Creds user = Issue(f.ca, "a", pki::IdentityKind::kUser, pki::Role::kAdmin);
  Alive alive = Record("a");
  REQUIRE(SignAlive(user.cert_pem, user.key_pem, &alive).ok());
  absl::Status s = f.verifier.Verify(alive).status();
  CHECK_MESSAGE(s.code() != absl::StatusCode::kOk, s.ToString());
}

TEST_CASE("a revoked node's record is refused") {
  Fixture f;
  Alive alive = Record("a");
  REQUIRE(SignAlive(f.a.cert_pem, f.a.key_pem, &alive).ok());
  REQUIRE(f.verifier.Verify(alive).ok());
  pki::RevocationList revoked;
  REQUIRE(revoked.RevokeIdentity(pki::IdentityKind::kNode, "a", T0()).ok());
  f.trust.SetRevocations(std::move(revoked));
  CHECK(Fails(f.verifier.Verify(alive), absl::StatusCode::kUnauthenticated,
              "revoked"));
}

TEST_CASE("an expired node certificate is refused") {
  Fixture f;
  Creds shortlived = Issue(f.ca, "a", pki::IdentityKind::kNode,
                           pki::Role::kNode, absl::Hours(2));
  Alive alive = Record("a");
  REQUIRE(SignAlive(shortlived.cert_pem, shortlived.key_pem, &alive).ok());
  REQUIRE(f.verifier.Verify(alive).ok());
  f.clock.Advance(absl::Hours(3));
  CHECK(f.verifier.Verify(alive).status().code() ==
        absl::StatusCode::kUnauthenticated);
}

TEST_CASE("garbage in place of the certificate is refused") {
  Fixture f;
  Alive alive = Record("a");
  REQUIRE(SignAlive(f.a.cert_pem, f.a.key_pem, &alive).ok());
  alive.certificate = "not a certificate";
  CHECK(f.verifier.Verify(alive).status().code() ==
        absl::StatusCode::kUnauthenticated);
}

TEST_CASE("a certificate is checked once; every record's signature always") {
  Fixture f;
  Alive first = Record("a");
  REQUIRE(SignAlive(f.a.cert_pem, f.a.key_pem, &first).ok());
  REQUIRE(f.verifier.Verify(first).ok());
  CHECK(f.verifier.certificate_checks() == 1);
  // A refutation: a new record with the same certificate.
  Alive refuted = Record("a");
  refuted.incarnation = 8;
  REQUIRE(SignAlive(f.a.cert_pem, f.a.key_pem, &refuted).ok());
  REQUIRE(f.verifier.Verify(refuted).ok());
  CHECK(f.verifier.certificate_checks() == 1);
  // The cached certificate does not vouch for a record it did not sign:
  // b's signature under a's (cached) certificate.
  Alive forged = Record("a");
  forged.incarnation = 9;
  REQUIRE(SignAlive(f.b.cert_pem, f.b.key_pem, &forged).ok());
  forged.certificate = first.certificate;
  CHECK(Fails(f.verifier.Verify(forged), absl::StatusCode::kInvalidArgument,
              "signature"));
  // Nor for another name: a's certificate on a record of b's.
  Alive misnamed = Record("b");
  REQUIRE(SignAlive(f.a.cert_pem, f.a.key_pem, &misnamed).ok());
  CHECK(Fails(f.verifier.Verify(misnamed), absl::StatusCode::kPermissionDenied,
              "its certificate is node a's"));
  // After the cache's time to live, Trust is asked again.
  f.clock.Advance(PkiVerifier::kCertificateCacheTtl + absl::Seconds(1));
  REQUIRE(f.verifier.Verify(refuted).ok());
  CHECK(f.verifier.certificate_checks() == 2);
  // So it is when Trust changes (a new revocation list, even one that does
  // not name a).
  pki::RevocationList other;
  REQUIRE(other.RevokeIdentity(pki::IdentityKind::kNode, "c", T0()).ok());
  f.trust.SetRevocations(std::move(other));
  REQUIRE(f.verifier.Verify(refuted).ok());
  CHECK(f.verifier.certificate_checks() == 3);
}

TEST_CASE("the signer refuses a key that is not its certificate's") {
  Fixture f;
  Alive alive = Record("a");
  CHECK(Fails(SignAlive(f.a.cert_pem, f.b.key_pem, &alive),
              absl::StatusCode::kInvalidArgument,
              "not the key of the node certificate"));
  CHECK(alive.signature.empty());
}

TEST_CASE(
    "the file signer parses its files again only when they change, and "
    "signs with the rotated pair from the next record on") {
  Fixture f;
  testing::TempDir dir;
  const std::string cert_file = dir.Sub("node.crt");
  const std::string key_file = dir.Sub("node.key");
  REQUIRE(WriteFileAtomic(cert_file, f.a.cert_pem, 0644).ok());
  REQUIRE(WriteFileAtomic(key_file, f.a.key_pem, 0600).ok());
  PkiSigner signer(cert_file, key_file);
  for (int i = 0; i < 3; ++i) {
    Alive alive = Record("a");
    alive.incarnation += static_cast<uint64_t>(i);
    REQUIRE(signer.Sign(&alive).ok());
    CHECK(f.verifier.Verify(alive).ok());
  }
  CHECK(signer.parses() == 1);
  // Renewed: a new key and certificate for the same name.
  Creds renewed = Issue(f.ca, "a");
  REQUIRE(WriteFileAtomic(key_file, renewed.key_pem, 0600).ok());
  // Half rotated (the key written, not yet the certificate): refused, and
  // nothing is signed with the old pair's certificate and the new key.
  Alive half = Record("a");
  CHECK(Fails(signer.Sign(&half), absl::StatusCode::kInvalidArgument,
              "not the key of the node certificate"));
  CHECK(half.signature.empty());
  REQUIRE(WriteFileAtomic(cert_file, renewed.cert_pem, 0644).ok());
  Alive alive = Record("a");
  REQUIRE(signer.Sign(&alive).ok());
  CHECK(alive.certificate ==
        Must(pki::Certificate::FromPem(renewed.cert_pem)).der());
  CHECK(f.verifier.Verify(alive).ok());
  CHECK(signer.parses() == 3);
  // A file that cannot be read names itself.
  REQUIRE(unlink(key_file.c_str()) == 0);
  CHECK(Fails(signer.Sign(&alive), absl::StatusCode::kNotFound, "node.key"));
}

}  // namespace
}  // namespace mycel::membership
