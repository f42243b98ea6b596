// Signed changes (mesh/replication/origin_verifier.h): a change signed by
// its origin's node key verifies; each forgery a relaying member could try
// is refused with the reason: no signature, its own key in another node's
// name, a value changed after signing, a certificate of another name or
// another CA, a revoked origin. An unknown origin is UNAVAILABLE (refused
// for now, taken when it comes again), and an expired certificate still
// vouches for what its key signed.
#include "mesh/replication/origin_verifier.h"

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>

#include "daemon/store/objects.h"
#include "mesh/identity/trust.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/private_key.h"
#include "runtime/manual_clock.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::replication {
namespace {

using pki::testing::Must;
using pki::testing::T0;

struct Identity {
  std::string cert_der;
  std::shared_ptr<const pki::PrivateKey> key;
};

Identity Issue(const pki::CertificateAuthority& ca, const std::string& name,
               absl::Duration validity = absl::ZeroDuration()) {
  auto key =
      std::make_shared<pki::PrivateKey>(Must(pki::PrivateKey::Generate()));
  pki::SpiffeId id =
      Must(pki::SpiffeId::Create(pki::IdentityKind::kNode, ca.mesh(), name));
  pki::Certificate cert =
      Must(ca.IssueForKey(Must(key->GetPublicKey()),
                          pki::Grant{id, pki::Role::kNode, validity}, T0()));
  return {cert.der(), std::move(key)};
}

store::ObjectChange Change(const std::string& origin,
                           const std::string& value) {
  store::ObjectChange c;
  c.stamp.origin = origin;
  c.stamp.seq = 3;
  c.stamp.hlc = store::MakeHlc(absl::ToUnixMillis(T0()), 0);
  c.ns = "kv";
  c.key = "app/config";
  c.value = value;
  return c;
}

// Signs `c` with `key`, as a node's store does.
void Sign(const Identity& signer, store::ObjectChange* c) {
  c->stamp.signature =
      Must(NodeKeySigner(signer.key)(store::ObjectStore::SigningBytes(*c)));
}

struct Fixture {
  Fixture() {
    REQUIRE(trust.SetCa(Must(ca.certificate().ToPem())).ok());
    ids["a"] = Issue(ca, "a");
    ids["b"] = Issue(ca, "b");
  }
  absl::Status Verify(const store::ObjectChange& c) {
    return verifier.Verify(c, store::ObjectStore::SigningBytes(c));
  }
  pki::CertificateAuthority ca = pki::testing::MakeCa("prod");
  identity::Trust trust;
  ManualClock clock{T0() + absl::Hours(1)};
  // What membership holds: a name's certificate.
  std::map<std::string, Identity> ids;
  std::map<std::string, std::string> known_as;  // overrides, name -> DER
  OriginVerifier verifier{&trust, &clock, [this](absl::string_view name) {
                            auto o = known_as.find(std::string(name));
                            if (o != known_as.end()) return o->second;
                            auto it = ids.find(std::string(name));
                            return it == ids.end() ? std::string()
                                                   : it->second.cert_der;
                          }};
};

bool Refused(const absl::Status& s, absl::StatusCode code,
             const std::string& words) {
  INFO(s.ToString());
  return s.code() == code && s.message().find(words) != std::string::npos;
}

TEST_CASE("a change signed by its origin verifies; the check is cached") {
  Fixture f;
  store::ObjectChange c = Change("a", "\"v1\"");
  Sign(f.ids["a"], &c);
  CHECK(f.Verify(c).ok());
  store::ObjectChange d = Change("a", "\"v2\"");
  d.stamp.seq = 4;
  Sign(f.ids["a"], &d);
  CHECK(f.Verify(d).ok());
  CHECK(f.verifier.certificate_checks() == 1);
  // A deletion is signed too (no value).
  store::ObjectChange del = Change("a", "");
  del.value.reset();
  Sign(f.ids["a"], &del);
  CHECK(f.Verify(del).ok());
}

TEST_CASE("forgeries a relaying member could try are refused") {
  Fixture f;
  SUBCASE("no signature") {
    CHECK(Refused(f.Verify(Change("a", "1")),
                  absl::StatusCode::kPermissionDenied, "unsigned"));
  }
  SUBCASE("b signs a change in a's name") {
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["b"], &c);
    CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied,
                  "not made by the key of a's certificate"));
  }
  SUBCASE("the value changed after signing") {
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["a"], &c);
    c.value = "2";
    CHECK(
        Refused(f.Verify(c), absl::StatusCode::kPermissionDenied, "signature"));
  }
  SUBCASE("the sequence number changed after signing") {
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["a"], &c);
    c.stamp.seq += 100;
    CHECK(
        Refused(f.Verify(c), absl::StatusCode::kPermissionDenied, "signature"));
  }
  SUBCASE("a delete turned into a put, or the key moved") {
    store::ObjectChange c = Change("a", "");
    c.value.reset();
    Sign(f.ids["a"], &c);
    store::ObjectChange put = c;
    put.value = "";
    CHECK(!f.Verify(put).ok());
    store::ObjectChange moved = c;
    moved.key = "app/other";
    CHECK(!f.Verify(moved).ok());
    store::ObjectChange other_ns = c;
    other_ns.ns = "node.status";
    CHECK(!f.Verify(other_ns).ok());
  }
  SUBCASE("a certificate of another name offered for the origin") {
    f.known_as["a"] = f.ids["b"].cert_der;
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["b"], &c);
    CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied,
                  "the certificate known for it is node b's"));
  }
  SUBCASE("a certificate of another mesh's CA") {
    pki::CertificateAuthority other = pki::testing::MakeCa("prod");
    Identity rogue = Issue(other, "a");
    f.known_as["a"] = rogue.cert_der;
    store::ObjectChange c = Change("a", "1");
    Sign(rogue, &c);
    CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied,
                  "origin a: certificate"));
  }
  SUBCASE("garbage for a certificate") {
    f.known_as["a"] = "not a certificate";
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["a"], &c);
    CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied,
                  "origin a: certificate"));
  }
}

TEST_CASE("an origin not known here yet is UNAVAILABLE, not forged") {
  Fixture f;
  f.ids["c"] = Issue(f.ca, "c");
  store::ObjectChange c = Change("c", "1");
  Sign(f.ids["c"], &c);
  const std::string der = f.ids["c"].cert_der;
  f.ids.erase("c");
  CHECK(Refused(f.Verify(c), absl::StatusCode::kUnavailable,
                "no certificate of origin c"));
  f.known_as["c"] = der;  // membership learns of it
  CHECK(f.Verify(c).ok());
}

TEST_CASE("a revoked origin's changes are refused, even those cached") {
  Fixture f;
  store::ObjectChange c = Change("a", "1");
  Sign(f.ids["a"], &c);
  REQUIRE(f.Verify(c).ok());
  pki::RevocationList revoked;
  REQUIRE(revoked.RevokeIdentity(pki::IdentityKind::kNode, "a", T0()).ok());
  f.trust.SetRevocations(std::move(revoked));
  CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied, "revoked"));
}

TEST_CASE("an expired certificate still vouches for what its key signed") {
  Fixture f;
  f.ids["old"] = Issue(f.ca, "old", absl::Hours(2));
  store::ObjectChange c = Change("old", "1");
  Sign(f.ids["old"], &c);
  f.clock.Advance(absl::Hours(24 * 400));
  absl::Status s = f.Verify(c);
  CHECK_MESSAGE(s.ok(), s.ToString());
  // Its key still cannot sign for another name.
  store::ObjectChange forged = Change("a", "1");
  Sign(f.ids["old"], &forged);
  CHECK(!f.Verify(forged).ok());
}

}  // namespace
}  // namespace mycel::replication
